"""The core.* service layer: what a brain (REST client, the built-in brain, any LLM through
`cognition.tools`) can ask of Motor Cortex. Views and the tool dispatcher call these functions;
they take the calling `Principal` and the agent the call is for, and return JSON-safe dicts.

The handlers live in one module each: `cognition.core_act`, `cognition.core_task`,
`cognition.core_skill` and `cognition.core_credential`. This module holds what they share:
who a change is recorded under, the consent gate, the text every handler refuses, and how
credential names cross from the vault to a run (the MOTOR_CREDENTIAL_RESOLVER).

Credential names match in any case everywhere (vault, policy, API, runtime). The run records
the lowercased names and `run_credentials_resolve` (the MOTOR_CREDENTIAL_RESOLVER) maps them
back, delivering each value under both spellings so ``$API_KEY`` and ``<credential:API_KEY>``
keep working.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from runs.errors import InvalidRunParams
from runs.models import MotorRun
from skills import bundle as bundle_lib
from skills.models import Policy, PolicyStatus
from skills.selectors import policy_credential_values
from skills.services import Actor

from .consent import consent_check
from .errors import CognitionError, CredentialInvalid, CredentialsMissing
from .models import Agent, Credential
from .principals import Principal
from .selectors import credentials_resolve

logger = logging.getLogger(__name__)

# The install rule of skill names (skills.models.Skill's constraint), at most 64 characters.
_SKILL_NAME = re.compile(r"[a-z](?:[a-z0-9-]{0,62}[a-z0-9])?")


class CredentialNameClash(CognitionError):
    code = "credential_name_clash"
    http_status = 409


# --- actors --------------------------------------------------------------------------------------


def actor_label(principal: Principal, *, relayed: bool = False) -> str:
    """The audit label of a runtime change; an agent that passed the consent gate relays."""
    if principal.is_agent and relayed:
        return f"{principal.label} relaying {principal.user.get_username()}"
    return principal.label


def skill_actor(principal: Principal, *, relayed: bool = False) -> Actor:
    """The skills app's Actor for `principal` (see PrincipalAPIView.actor)."""
    if principal.agent is None:
        return Actor(user=principal.user, label=principal.label)  # type: ignore[arg-type]
    if relayed:
        owner = principal.user
        return Actor(user=owner, label=f"{principal.label} relaying {owner.get_username()}")
    return Actor(user=None, label=principal.label)


def gate(*, principal: Principal, action: str, trigger: str | None) -> Actor:
    """The consent gate, then the actor the gated change is recorded under."""
    consent_check(principal=principal, action=action, trigger=trigger)
    return skill_actor(principal, relayed=True)


# --- credential names between the vault and the runtime -----------------------------------------


def _run_credential_name(name: str) -> str:
    """The runtime's spelling of a vault/policy name: lowercase (`API_KEY` → `api_key`)."""
    lowered = name.lower()
    if not lowered[:1].isalpha():
        # `_TOKEN` is a valid vault name but the runtime wants a leading letter.
        raise CredentialInvalid(
            f"Credential name {name!r} cannot be handed to a run: run credential names start "
            "with a letter.",
            details={"field": "credentials", "rule": "run_credential_name", "name": name},
        )
    return lowered


def _lowercase_map(names: Sequence[str]) -> dict[str, str]:
    """{lowercased: original}; refuses two names that differ only in case."""
    mapping: dict[str, str] = {}
    for name in names:
        key = _run_credential_name(name)
        if key in mapping and mapping[key] != name:
            raise CredentialNameClash(
                f"Credentials {mapping[key]!r} and {name!r} differ only in case; a run cannot "
                "tell them apart. Rename one of them.",
                details={"names": sorted([mapping[key], name])},
            )
        mapping[key] = name
    return mapping


def run_credentials_resolve(*, agent_id: int, run_id: str, names: list[str]) -> dict[str, str]:
    """MOTOR_CREDENTIAL_RESOLVER: values for run `run_id`'s (lowercase) credential names.

    Never raises for a missing value: that name is left out, and the runtime asks the human to
    set it (the run waits in awaiting_input). When the run executes an approved skill, the
    policy's stored values come first, then the vault. Names match in any case; each value is
    returned under the run's name and under the policy's spelling (so ``$API_KEY`` and
    ``<credential:API_KEY>`` keep working).
    """
    agent = Agent.objects.get(pk=agent_id)
    run = MotorRun.objects.filter(pk=run_id, agent_id=agent_id).first()
    policy = None
    if run is not None and run.skill_id is not None and not run.review:
        policy = (
            Policy.objects.filter(skill_id=run.skill_id, agent_id=agent_id)
            .filter(status=PolicyStatus.APPROVED)
            .first()
        )
    # The spelling a program reads ($API_KEY): the vault's, overridden by the policy's.
    spelled = list(Credential.objects.filter(agent=agent).values_list("name", flat=True))
    if policy is not None:
        spelled += [*policy.required_credentials, *policy_credential_values(policy=policy)]
    by_lower = {n.lower(): n for n in spelled}
    out: dict[str, str] = {}
    for run_name in names:
        try:
            values = credentials_resolve(agent=agent, names=[run_name], policy=policy)
        except CredentialsMissing:
            continue  # not set anywhere: the run asks for it
        value = next(iter(values.values()))
        out[run_name] = value
        out[by_lower.get(run_name.lower(), run_name)] = value
    if len(out) < len(names):
        logger.info(
            "run credentials not set: agent=%s run=%s names=%s",
            agent.name,
            run_id,
            ",".join(n for n in names if n not in out),
        )
    return out


def _require_storable(**values: Any) -> None:
    """Refuse strings PostgreSQL cannot store (NUL, lone surrogates) before anything happens."""
    for field, value in values.items():
        where = bundle_lib.unstorable_text(value, field)
        if where is not None:
            raise InvalidRunParams(
                f"{field}: {where} holds a NUL or an unpaired surrogate character",
                field=field,
            )
