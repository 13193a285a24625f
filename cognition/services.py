"""State changes of the brain side. Keyword-only, typed, one transaction each."""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from forge.reaper import flows_credentials_set

from . import vault
from .errors import CredentialNotFound
from .models import (
    IDEMPOTENCY_TTL_S,
    Agent,
    Credential,
    IdempotencyRecord,
    PersonalToken,
    hash_token,
    new_token,
)
from .selectors import credential_list_names, credentials_resolve  # noqa: F401 - re-exported

logger = logging.getLogger(__name__)

PERSONAL_TOKEN_PREFIX = "mcp_"  # noqa: S105 - a public marker, not a secret


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A freshly issued API token. `raw` is shown once and never stored."""

    agent: Agent
    raw: str


def agent_create(*, name: str, owner: AbstractBaseUser, actor: AbstractBaseUser | None) -> Agent:
    """Create an agent identity without a token (issue one with agent_issue_token)."""
    agent = Agent(name=name, owner=owner)
    agent.full_clean()
    agent.save()
    return agent


def agent_issue_token(*, agent: Agent, actor: AbstractBaseUser | None) -> IssuedToken:
    """Issue a new API token for `agent`, replacing any previous one.

    Only the sha256 of the token is stored; the raw value is returned once.
    """
    raw = new_token()
    with transaction.atomic():
        locked = Agent.objects.select_for_update().get(pk=agent.pk)
        locked.token_hash = hash_token(raw)
        locked.token_prefix = raw[:10]
        locked.token_created_at = timezone.now()
        locked.token_revoked_at = None
        locked.save(
            update_fields=["token_hash", "token_prefix", "token_created_at", "token_revoked_at"]
        )
    return IssuedToken(agent=locked, raw=raw)


#: the reason a run cancelled by a token revocation carries (result.failure.message, signal)
TOKEN_REVOKED_REASON = "agent token revoked"  # noqa: S105 - a message, not a secret


def agent_revoke_token(*, agent: Agent, actor: AbstractBaseUser | None) -> Agent:
    """Revoke the agent's token: it stops authenticating at once, and its in-flight runs stop.

    Every active run of the agent is cancelled in the same transaction ("agent token revoked"):
    the cancel moves the run's fencing token, so a slice in progress records nothing further
    and its running tool call is stopped by the call watch; no next step starts. Each cancel
    releases the agent's mutex and emits a motor_result signal on commit.
    """
    with transaction.atomic():
        locked = Agent.objects.select_for_update().get(pk=agent.pk)
        locked.token_hash = ""
        locked.token_revoked_at = timezone.now()
        locked.save(update_fields=["token_hash", "token_revoked_at"])
        cancelled = _cancel_active_runs(agent=locked, actor=actor, reason=TOKEN_REVOKED_REASON)
    logger.info(
        "agent token revoked: agent=%s actor=%s cancelled_runs=%s",
        locked.name,
        _actor_label(actor),
        ",".join(cancelled) or "-",
    )
    return locked


def _cancel_active_runs(
    *, agent: Agent, actor: AbstractBaseUser | str | None, reason: str
) -> list[str]:
    """Cancel every active run of `agent`; the ids cancelled. Caller holds a transaction."""
    from runs.errors import InvalidTransition
    from runs.models import ACTIVE_STATUSES, MotorRun
    from runs.services import run_cancel

    cancelled: list[str] = []
    active = MotorRun.objects.filter(agent=agent, status__in=ACTIVE_STATUSES)
    for run_id in active.order_by("created_at").values_list("id", flat=True):
        try:
            run_cancel(run_id=run_id, actor=_actor_label(actor), reason=reason, emit_signal=True)
        except InvalidTransition:
            continue  # it finished between the query and its row lock
        cancelled.append(run_id)
    return cancelled


# --- vault -----------------------------------------------------------------------------------


def credential_set(
    *, agent: Agent, name: str, value: str, actor: AbstractBaseUser | str | None
) -> Credential:
    """Store (or replace) the agent's credential `name`; a VAULT_ prefix is dropped.

    The value is encrypted before it reaches the database; logs carry the name only.
    """
    name = vault.normalize_name(name)
    value = vault.validate_value(value, name=name)
    with transaction.atomic():
        Agent.objects.select_for_update().get(pk=agent.pk)
        # Names match in any case: setting `api_key` replaces a stored `API_KEY` (kept so).
        credential = Credential.objects.filter(agent=agent, name__iexact=name).first()
        created = credential is None
        if credential is None:
            credential = Credential(agent=agent, name=name)
        credential.value = vault.seal(name=credential.name, value=value)
        credential.save()
        agent_id, label = agent.pk, _actor_label(actor)
        transaction.on_commit(lambda: resume_runs_waiting_for_credentials(agent_id, actor=label))
        transaction.on_commit(lambda: flows_credentials_set(agent_id))
    logger.info(
        "credential %s: agent=%s name=%s value=%s actor=%s",
        "created" if created else "replaced",
        agent.name,
        credential.name,
        vault.REDACTED,
        _actor_label(actor),
    )
    return credential


def credential_delete(*, agent: Agent, name: str, actor: AbstractBaseUser | str | None) -> None:
    """Remove the agent's credential `name`; `CredentialNotFound` when there is none."""
    name = vault.normalize_name(name)
    with transaction.atomic():
        deleted, _ = Credential.objects.filter(agent=agent, name__iexact=name).delete()
    if not deleted:
        raise CredentialNotFound(
            f"Agent {agent.name!r} has no credential named {name!r}.", details={"name": name}
        )
    logger.info(
        "credential deleted: agent=%s name=%s actor=%s", agent.name, name, _actor_label(actor)
    )


def resume_runs_waiting_for_credentials(agent_id: int, *, actor: str) -> list[str]:
    """Resume the agent's runs that wait for credentials now all set; the ids resumed.

    Called after a credential is committed. A run still missing another credential keeps
    waiting (its question already names every missing one).
    """
    from runs.errors import CredentialResolverFailed, CredentialsStillMissing, InvalidTransition
    from runs.models import MotorRun, RunStatus
    from runs.services import run_credentials_provided

    waiting = (
        MotorRun.objects.filter(agent_id=agent_id, status=RunStatus.AWAITING_INPUT)
        .exclude(missing_credentials=[])
        .values_list("id", flat=True)
    )
    resumed: list[str] = []
    for run_id in waiting:
        try:
            run_credentials_provided(run_id=run_id, actor=actor)
        except (CredentialsStillMissing, InvalidTransition):
            continue
        except CredentialResolverFailed:
            # Runs after the credential's commit: never fail the caller. The run keeps waiting
            # and its next step reports the resolver's failure.
            logger.warning("credentials set: run %s could not be resumed", run_id)
            continue
        resumed.append(run_id)
    if resumed:
        logger.info("credentials set: resumed runs %s", ",".join(resumed))
    return resumed


def _actor_label(actor: AbstractBaseUser | str | None) -> str:
    if actor is None:
        return "system"
    if isinstance(actor, str):
        return actor
    return actor.get_username()


# --- personal access tokens of human users ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class IssuedPersonalToken:
    """A new personal token; `raw` is shown once and never stored."""

    token: PersonalToken
    raw: str


def personal_token_create(
    *, user: AbstractBaseUser, name: str, actor: AbstractBaseUser | None
) -> IssuedPersonalToken:
    """Issue a personal API token for `user` (only its sha256 is stored)."""
    raw = PERSONAL_TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = PersonalToken(user=user, name=name, token_hash=hash_token(raw), token_prefix=raw[:10])
    token.full_clean()
    token.save()
    return IssuedPersonalToken(token=token, raw=raw)


def personal_token_revoke(*, token: PersonalToken, actor: AbstractBaseUser | None) -> PersonalToken:
    """Revoke a personal token: it stops authenticating at once."""
    with transaction.atomic():
        locked = PersonalToken.objects.select_for_update().get(pk=token.pk)
        if locked.revoked_at is None:
            locked.revoked_at = timezone.now()
            locked.save(update_fields=["revoked_at"])
    return locked


def agent_set_relayed_consent(
    *, agent: Agent, trusted: bool, actor: AbstractBaseUser | None
) -> Agent:
    """Let (or stop letting) the agent's token pass the consent gate on user_message triggers."""
    with transaction.atomic():
        locked = Agent.objects.select_for_update().get(pk=agent.pk)
        if locked.trusted_for_relayed_consent != trusted:
            locked.trusted_for_relayed_consent = trusted
            locked.save(update_fields=["trusted_for_relayed_consent"])
    logger.info(
        "relayed consent %s: agent=%s actor=%s",
        "granted" if trusted else "withdrawn",
        locked.name,
        _actor_label(actor),
    )
    return locked


# --- idempotency records -------------------------------------------------------------------


def idempotency_ttl() -> timedelta:
    """How long an Idempotency-Key replays its first response (MOTOR_IDEMPOTENCY_TTL_SECONDS)."""
    return timedelta(seconds=getattr(settings, "MOTOR_IDEMPOTENCY_TTL_SECONDS", IDEMPOTENCY_TTL_S))


def idempotency_purge(*, now: datetime | None = None) -> int:
    """Delete the Idempotency-Key records past their TTL (their keys are free again anyway).

    Returns how many were deleted. Run by celery-beat (cognition.records_purge).
    """
    cutoff = (now or timezone.now()) - idempotency_ttl()
    deleted, _ = IdempotencyRecord.objects.filter(created_at__lt=cutoff).delete()
    if deleted:
        logger.info("idempotency records purged: %d older than %s", deleted, cutoff.isoformat())
    return deleted
