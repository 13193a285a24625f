"""Firing a schedule: beat sends `cognition.schedule_fire` with the schedule's id and
`schedule_fire` re-checks the skill at that moment, then either starts a run through
core.act (trigger=schedule, the skill's approved policy) or records a skipped occurrence with
the reason and emits a `schedule_skipped` signal in the same transaction — never silently.

Fire-time checks, in this order (the first that fails is the recorded reason):
  skill_not_found      no skill of that name is installed any more
  not_approved         the agent's policy for the skill is not approved (or there is none)
  hash_changed         the skill's files no longer hash to what was approved (the policy is moved
                       to needs_reapproval by the skills app's load-for-execution check)
  credentials_missing  a required credential is in neither the policy nor the vault
  agent_busy           the agent has an active run (the one-run-per-agent mutex)
  energy_too_low       the agent's energy band forbids an agentic run
A refusal core.act raises after the checks passed (a race) maps to the same reasons; anything
else it refuses is recorded as `failed` with reason act_failed.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone as dj_timezone
from django_celery_beat.models import PeriodicTask

from runs import selectors as run_selectors
from runs.errors import InvalidRunParams, MotorBusy
from runs.models import SignalKind, Trigger
from runs.outbox import signal_emit
from runs.tools import expand_granted
from skills.errors import SkillDisabled, SkillHashMismatch, SkillNotFound
from skills.loading import skill_load_for_execution
from skills.models import Policy, PolicyStatus, Skill

from . import energy
from .errors import CognitionError, CredentialsMissing, EnergyTooLow
from .models import Agent, Schedule, ScheduleOccurrence, ScheduleOutcome, ScheduleSkipReason
from .principals import Principal
from .schedules import PERIODIC_TASK_PREFIX
from .selectors import credentials_resolve

logger = logging.getLogger(__name__)


class _Skip(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def _message(exc: BaseException) -> str:
    return str(getattr(exc, "message", None) or exc)


def _check_fire(schedule: Schedule) -> None:
    """The fire-time checks; raise `_Skip` with the first failing reason."""
    agent = schedule.agent
    name = schedule.skill_name
    if not Skill.objects.filter(name=name, current_version__isnull=False).exists():
        raise _Skip(ScheduleSkipReason.SKILL_NOT_FOUND, f"No skill named {name!r} is installed.")
    policy = Policy.objects.filter(skill__name=name, agent=agent).first()
    if policy is None or policy.status != PolicyStatus.APPROVED:
        status = policy.status if policy is not None else "no policy"
        raise _Skip(
            ScheduleSkipReason.NOT_APPROVED,
            f"Skill {name!r} is {status} for agent {agent.name!r}, not approved; a human "
            "approves it in the admin.",
        )
    try:
        loaded = skill_load_for_execution(name=name, agent=agent)
    except SkillHashMismatch as exc:
        raise _Skip(ScheduleSkipReason.HASH_CHANGED, _message(exc)) from None
    except SkillNotFound as exc:
        raise _Skip(ScheduleSkipReason.SKILL_NOT_FOUND, _message(exc)) from None
    except SkillDisabled as exc:
        raise _Skip(ScheduleSkipReason.NOT_APPROVED, _message(exc)) from None
    if not loaded.approved:
        raise _Skip(
            ScheduleSkipReason.NOT_APPROVED,
            f"Skill {name!r} is {loaded.policy.status} for agent {agent.name!r}, not approved.",
        )
    try:
        # Values are resolved only to prove they exist; they are dropped at once.
        credentials_resolve(
            agent=agent, names=list(loaded.policy.required_credentials), policy=loaded.policy
        )
    except CredentialsMissing as exc:
        raise _Skip(ScheduleSkipReason.CREDENTIALS_MISSING, _message(exc)) from None
    active = run_selectors.run_active_for_agent(agent_id=agent.pk)
    if active is not None:
        raise _Skip(
            ScheduleSkipReason.AGENT_BUSY,
            f"Agent {agent.name!r} is busy with run {active.pk} ({active.status}).",
        )
    try:
        energy.energy_check(
            agent=Agent.objects.get(pk=agent.pk),
            mode=energy.Mode.AGENTIC,
            tools=expand_granted(list(loaded.policy.tools)),
        )
    except EnergyTooLow as exc:
        raise _Skip(ScheduleSkipReason.ENERGY_TOO_LOW, _message(exc)) from None


def _record(
    schedule: Schedule,
    *,
    fired_at: datetime,
    outcome: str,
    reason: str = "",
    detail: str = "",
    run_id: str | None = None,
) -> ScheduleOccurrence:
    """Write the occurrence; a run-less outcome also emits `schedule_skipped` (same transaction)."""
    with transaction.atomic():
        occurrence = ScheduleOccurrence.objects.create(
            schedule=schedule,
            fired_at=fired_at,
            outcome=outcome,
            reason=reason,
            detail=detail,
            run_id=run_id,
        )
        if outcome != ScheduleOutcome.STARTED:
            signal = signal_emit(
                agent_id=schedule.agent_id,
                kind=SignalKind.SCHEDULE_SKIPPED,
                payload={
                    "schedule_id": schedule.pk,
                    "occurrence_id": occurrence.pk,
                    "skill": schedule.skill_name,
                    "outcome": outcome,
                    "reason": reason,
                    "detail": detail,
                    "fired_at": fired_at.isoformat(),
                },
            )
            occurrence.signal = signal
            occurrence.save(update_fields=["signal"])
    return occurrence


# core.act refusals after the checks passed (races), mapped to the check they stand for
_ACT_ERRORS: tuple[tuple[type[BaseException], str], ...] = (
    (SkillHashMismatch, ScheduleSkipReason.HASH_CHANGED),
    (SkillNotFound, ScheduleSkipReason.SKILL_NOT_FOUND),
    (CredentialsMissing, ScheduleSkipReason.CREDENTIALS_MISSING),
    (MotorBusy, ScheduleSkipReason.AGENT_BUSY),
    (EnergyTooLow, ScheduleSkipReason.ENERGY_TOO_LOW),
)


def schedule_fire(*, schedule_id: int) -> ScheduleOccurrence | None:
    """Fire schedule `schedule_id` once: start its run or record why not.

    Returns the occurrence; None when there is nothing to fire (the schedule is gone — its
    orphaned beat row is removed — or disabled while the message was on its way).
    """
    from .core_act import ActRefused, core_act

    fired_at = dj_timezone.now()
    schedule = Schedule.objects.select_related("agent").filter(pk=schedule_id).first()
    if schedule is None:
        for task in PeriodicTask.objects.filter(name=f"{PERIODIC_TASK_PREFIX}{schedule_id}"):
            task.delete()
        logger.warning("schedule fire: schedule %s no longer exists", schedule_id)
        return None
    if not schedule.enabled:
        logger.info("schedule fire: schedule %s is disabled; not firing", schedule_id)
        return None
    try:
        _check_fire(schedule)
    except _Skip as skip:
        return _skipped(schedule, fired_at, skip.reason, skip.detail)

    started: dict[str, ScheduleOccurrence] = {}

    def on_created(result: dict[str, Any]) -> None:
        # Inside the transaction that creates the run: the run and its occurrence commit together.
        started["occurrence"] = _record(
            schedule,
            fired_at=fired_at,
            outcome=ScheduleOutcome.STARTED,
            run_id=result["run_id"],
        )

    try:
        core_act(
            principal=Principal.for_agent(schedule.agent),
            agent=schedule.agent,
            mode="agentic",
            task=schedule.task,
            skill=schedule.skill_name,
            inputs=schedule.inputs or None,
            trigger=Trigger.SCHEDULE,
            on_created=on_created,
        )
    except Exception as exc:
        for error_type, reason in _ACT_ERRORS:
            if isinstance(exc, error_type):
                return _skipped(schedule, fired_at, reason, _message(exc))
        if isinstance(exc, ActRefused | InvalidRunParams | CognitionError):
            logger.warning("schedule fire: core.act refused schedule %s: %s", schedule.pk, exc)
            return _record(
                schedule,
                fired_at=fired_at,
                outcome=ScheduleOutcome.FAILED,
                reason=ScheduleSkipReason.ACT_FAILED,
                detail=_message(exc),
            )
        raise
    occurrence = started["occurrence"]
    logger.info(
        "schedule fired: id=%s run=%s skill=%s", schedule.pk, occurrence.run_id, schedule.skill_name
    )
    return occurrence


def _skipped(
    schedule: Schedule, fired_at: datetime, reason: str, detail: str
) -> ScheduleOccurrence:
    logger.info("schedule skipped: id=%s reason=%s", schedule.pk, reason)
    return _record(
        schedule,
        fired_at=fired_at,
        outcome=ScheduleOutcome.SKIPPED,
        reason=reason,
        detail=detail,
    )
