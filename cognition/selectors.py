"""Reads of the brain side."""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import F, FilteredRelation, Q, QuerySet
from django.db.models.functions import Lower

from skills.models import Skill
from skills.selectors import policy_credential_values

from . import vault
from .errors import AgentNotFound, AgentRequired, CredentialsMissing
from .models import Agent, Credential, PersonalToken, hash_token


def agent_by_token(*, raw: str) -> Agent | None:
    """The agent whose live (not revoked) token is `raw`, or None."""
    if not raw:
        return None
    digest = hash_token(raw)
    agent = Agent.objects.select_related("owner").filter(token_hash=digest).first()
    # the lookup is by digest; the constant-time compare guards against timing on the index
    if agent is None or not hmac.compare_digest(agent.token_hash, digest):
        return None
    return agent


def user_by_personal_token(*, raw: str) -> AbstractBaseUser | None:
    """The active user whose live personal token is `raw`, or None."""
    if not raw:
        return None
    digest = hash_token(raw)
    token = (
        PersonalToken.objects.select_related("user")
        .filter(token_hash=digest, revoked_at__isnull=True)
        .first()
    )
    if token is None or not hmac.compare_digest(token.token_hash, digest):
        return None
    if not token.user.is_active:
        return None
    return token.user


def agents_visible_to(*, user: AbstractBaseUser) -> QuerySet[Agent]:
    """Agents a human may act for: the ones they own, or every agent for a superuser."""
    agents = Agent.objects.select_related("owner")
    if getattr(user, "is_superuser", False):
        return agents.all()
    return agents.filter(owner=user)


def agent_for_human(*, user: AbstractBaseUser, ref: str | None) -> Agent:
    """Resolve `ref` (an id or a name) among the agents `user` may act for.

    Without `ref`, a user with exactly one agent gets that one. An agent the user may not act for
    is reported as not found, like one that does not exist.
    """
    visible = agents_visible_to(user=user)
    if not ref:
        only = list(visible.filter(owner=user)[:2])
        if len(only) == 1:
            return only[0]
        raise AgentRequired(
            "Say which agent this is for: add ?agent=<id or name> (you own "
            f"{'no' if not only else 'several'} agents).",
            details={"parameter": "agent", "rule": "required"},
        )
    agent = None
    # ASCII digits that fit a bigint are an id; anything else is looked up as a name (names are
    # at most 100 characters and PostgreSQL text cannot hold NUL, so others cannot match).
    if ref.isascii() and ref.isdigit() and len(ref) <= 18:
        agent = visible.filter(pk=int(ref)).first()
    if agent is None and len(ref) <= 100 and "\x00" not in ref:
        agent = visible.filter(name=ref).first()
    if agent is None:
        raise AgentNotFound(f"No agent {ref!r} that you may act for.", details={"agent": ref})
    return agent


# --- vault -----------------------------------------------------------------------------------


def credential_list_names(*, agent: Agent) -> list[str]:
    """Names of the agent's vault credentials, sorted. Values are never returned."""
    return list(
        Credential.objects.filter(agent=agent).order_by("name").values_list("name", flat=True)
    )


def credentials_queryset(*, agent: Agent) -> QuerySet[Credential]:
    """The agent's credential rows with the ciphertext left unloaded."""
    return Credential.objects.filter(agent=agent).defer("value").order_by("name")


def credentials_resolve(
    *, agent: Agent, names: Iterable[str], policy: Any = None
) -> dict[str, str]:
    """Values for `names`, delivered under their plain names (no VAULT_ prefix), as spelled in
    `names`; a name matches a stored one in any case.

    Priority per name (seed 001): the skill policy's stored values first, then the agent's vault.
    Raises `CredentialsMissing` listing every name found in neither. The result is for handing to
    a sandbox at run start only: never log, serialise or render it.
    """
    wanted: list[str] = []
    for name in names:
        plain = vault.normalize_name(name)
        if plain.lower() not in {w.lower() for w in wanted}:
            wanted.append(plain)
    resolved: dict[str, str] = {}
    if policy is not None and wanted:
        # Names match in any case: `api_key` finds a value stored as `API_KEY`.
        from_policy = {k.lower(): v for k, v in policy_credential_values(policy=policy).items()}
        resolved.update({n: from_policy[n.lower()] for n in wanted if n.lower() in from_policy})
    rest = {n.lower(): n for n in wanted if n not in resolved}
    if rest:
        rows = Credential.objects.annotate(lower_name=Lower("name")).filter(
            agent=agent, lower_name__in=list(rest)
        )
        for credential in rows:
            resolved[rest[credential.name.lower()]] = vault.unseal(
                name=credential.name, token=credential.value
            )
    missing = [n for n in wanted if n not in resolved]
    if missing:
        raise CredentialsMissing(missing, agent_name=agent.name)
    return {n: resolved[n] for n in wanted}


# --- skills as one agent sees them -----------------------------------------------------------


def skills_for_agent(
    *, agent: Agent, status: str | None = None, name: str | None = None
) -> QuerySet[Any]:
    """Skills the agent has a policy for, annotated with `policy_status` and `policy_id`.

    An agent sees only skills it holds a policy for; other agents' skills do not exist for it.
    `name` filters by case-insensitive substring, `status` by the agent's policy status.
    """
    skills = (
        Skill.objects.annotate(own=FilteredRelation("policies", condition=Q(policies__agent=agent)))
        .filter(own__isnull=False)
        .annotate(
            policy_status=F("own__status"),
            policy_id=F("own__id"),
            version_number=F("current_version__number"),
            content_hash=F("current_version__content_hash"),
        )
    )
    if status:
        skills = skills.filter(policy_status=status)
    if name:
        skills = skills.filter(name__icontains=name)
    return skills


def credentials_for_run(*, agent_id: int, names: list[str], run_id: str = "") -> dict[str, str]:
    """Vault values of `names` for the agent (no skill policy); `CredentialsMissing` names any
    not set. A minimal MOTOR_CREDENTIAL_RESOLVER; the default one is
    cognition.core.run_credentials_resolve, which also reads the skill policy's values."""
    agent = Agent.objects.get(pk=agent_id)
    return credentials_resolve(agent=agent, names=names)
