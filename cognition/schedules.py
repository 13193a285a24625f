"""Recurring skill runs: services, reads and the fire-time checks of a `Schedule`.

A Schedule and its django-celery-beat `PeriodicTask` are written together: every service here
changes both in one transaction, so beat (and django-celery-beat's own admin pages) always see
what the schedule says. Beat sends `cognition.schedule_fire` with the schedule's id; the task
calls `schedule_fire`, which re-checks the skill at that moment and either starts a run through
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

Consent: creating a schedule, changing it and enabling it set up runs that happen later without
anyone watching, with the skill's policy (tools, domains, credentials). They are gated like
approving a skill (`schedule.create`, `schedule.update`, `schedule.enable` in
cognition.consent). Disabling and deleting only take authority away and are not gated.
"""

from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from celery.schedules import crontab as celery_crontab
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone as dj_timezone
from django_celery_beat.models import (
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
)

from runs import selectors as run_selectors
from runs.errors import InvalidRunParams, MotorBusy
from runs.models import SignalKind, Trigger
from runs.outbox import signal_emit
from runs.tools import expand_granted
from sandbox import egress
from skills import bundle as bundle_lib
from skills.errors import SkillDisabled, SkillHashMismatch, SkillNotFound
from skills.loading import skill_load_for_execution
from skills.models import Policy, PolicyStatus, Skill

from . import energy
from .errors import CognitionError, CredentialsMissing, EnergyTooLow
from .models import (
    Agent,
    Schedule,
    ScheduleOccurrence,
    ScheduleOutcome,
    ScheduleSkipReason,
)
from .principals import Principal
from .selectors import credentials_resolve

logger = logging.getLogger(__name__)

#: the Celery task name beat sends (cognition.tasks.schedule_fire_task)
FIRE_TASK = "cognition.schedule_fire"
#: PeriodicTask.name of schedule N
PERIODIC_TASK_PREFIX = "motor-schedule-"
#: largest interval, seconds (the PositiveIntegerField's range)
MAX_INTERVAL_S = 2**31 - 1
#: largest task text and serialized inputs, characters
MAX_TASK_CHARS = 20_000
MAX_INPUTS_CHARS = 16_384
_SKILL_NAME = re.compile(r"[a-z](?:[a-z0-9-]{0,62}[a-z0-9])?")
# (field name, CrontabSchedule column length) in crontab order
_CRON_FIELDS = (
    ("minute", 240),
    ("hour", 96),
    ("day_of_month", 124),
    ("month_of_year", 64),
    ("day_of_week", 64),
)
_UNSET: Any = object()


class ScheduleInvalid(CognitionError):
    """Bad schedule input (`details`: field, rule); nothing was written."""

    code = "schedule_invalid"


class ScheduleNotFound(CognitionError):
    code = "schedule_not_found"
    http_status = 404


def _invalid(field: str, rule: str, message: str, **extra: Any) -> ScheduleInvalid:
    return ScheduleInvalid(f"{field}: {message}", details={"field": field, "rule": rule, **extra})


# --- validation ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScheduleSpec:
    """Validated fields of a schedule."""

    skill_name: str
    task: str
    inputs: dict[str, Any]
    crontab: str
    interval_seconds: int | None
    timezone: str
    enabled: bool


def _check_agent(agent: Any) -> Agent:
    if isinstance(agent, Agent) and agent.pk is not None:
        found = Agent.objects.filter(pk=agent.pk).first()
    elif isinstance(agent, int) and not isinstance(agent, bool) and 0 < agent < 2**63:
        found = Agent.objects.filter(pk=agent).first()
    elif isinstance(agent, str) and agent and "\x00" not in agent and len(agent) <= 100:
        found = Agent.objects.filter(name=agent).first()
    else:
        found = None
    if found is None:
        shown = str(getattr(agent, "pk", agent))[:100]
        raise _invalid("agent", "known_agent", f"no agent {shown!r} exists", agent=shown)
    return found


def parse_crontab(expression: Any) -> dict[str, str]:
    """The five fields of a crontab expression, each checked by celery's own parser."""
    if not isinstance(expression, str) or not expression.strip():
        raise _invalid("crontab", "crontab_syntax", "must be a non-empty crontab expression")
    parts = expression.split()
    if len(parts) != len(_CRON_FIELDS):
        raise _invalid(
            "crontab",
            "crontab_five_fields",
            f"{expression[:200]!r} has {len(parts)} fields; a crontab has 5: "
            "minute hour day-of-month month day-of-week",
        )
    fields: dict[str, str] = {}
    for (name, max_length), value in zip(_CRON_FIELDS, parts, strict=True):
        if len(value) > max_length:
            raise _invalid(
                "crontab",
                "crontab_syntax",
                f"the {name} field is longer than {max_length} characters",
                crontab_field=name,
            )
        try:
            celery_crontab(**{name: value})
        except Exception as exc:  # celery raises ValueError, IndexError, … on bad fields
            raise _invalid(
                "crontab",
                "crontab_syntax",
                f"the {name} field {value!r} is invalid: {exc}",
                crontab_field=name,
            ) from None
        fields[name] = value
    return fields


def _check_timezone(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > 64 or "\x00" in value:
        raise _invalid("timezone", "known_timezone", "must be an IANA time zone name like UTC")
    try:
        ZoneInfo(value)
    except Exception:  # ZoneInfoNotFoundError, or ValueError for path-like names
        raise _invalid(
            "timezone", "known_timezone", f"{value[:64]!r} is not a known IANA time zone"
        ) from None
    return value


def _check_interval(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _invalid("interval_seconds", "positive_integer", "must be a whole number of seconds")
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise _invalid("interval_seconds", "positive_integer", "must be a whole number of seconds")
    seconds = int(value)
    if seconds <= 0:
        raise _invalid(
            "interval_seconds", "positive_integer", f"{seconds} is not > 0; it must be at least 1"
        )
    if seconds > MAX_INTERVAL_S:
        raise _invalid(
            "interval_seconds",
            "positive_integer",
            f"{seconds} is over the maximum {MAX_INTERVAL_S}",
        )
    return seconds


def _check_skill(agent: Agent, value: Any) -> str:
    if not isinstance(value, str) or not _SKILL_NAME.fullmatch(value):
        raise _invalid(
            "skill",
            "known_skill",
            f"{str(value)[:80]!r} is not a skill name (lowercase letters, digits, hyphens)",
        )
    policy = Policy.objects.filter(skill__name=value, agent=agent).first()
    if policy is None:
        raise _invalid(
            "skill",
            "known_skill",
            f"agent {agent.name!r} has no skill named {value!r}",
            skill=value,
        )
    try:
        # its runs would get these domains: an entry the egress policy refuses fails every fire
        egress.validate_domains(policy.allowed_domains)
    except egress.PolicyError as exc:
        raise _invalid(
            "skill",
            "allowed_domains",
            f"the policy of {value!r} for agent {agent.name!r} allows {exc.entry!r}, which the "
            f"egress policy refuses ({exc}); correct the policy first",
            skill=value,
            egress_rule=exc.rule,
            value=exc.entry,
        ) from None
    return value


def _check_task(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _invalid("task", "not_empty", "the task text must not be empty")
    if len(value) > MAX_TASK_CHARS:
        raise _invalid("task", "max_length", f"longer than {MAX_TASK_CHARS} characters")
    if bundle_lib.unstorable_text(value, "task") is not None:
        raise _invalid("task", "storable_text", "holds a NUL or an unpaired surrogate character")
    return value


def _check_inputs(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _invalid("inputs", "json_object", "must be a JSON object")
    where = bundle_lib.unstorable_text(value, "inputs")
    if where is not None:
        raise _invalid("inputs", "storable_text", f"{where} holds a NUL or an unpaired surrogate")
    try:
        size = len(json.dumps(value))
    except (TypeError, ValueError):
        raise _invalid("inputs", "json_object", "must be a JSON object") from None
    if size > MAX_INPUTS_CHARS:
        raise _invalid("inputs", "max_size", f"over {MAX_INPUTS_CHARS} characters as JSON")
    return value


def schedule_validate(
    *,
    agent: Agent,
    skill: Any,
    task: Any,
    inputs: Any = None,
    crontab: Any = None,
    interval_seconds: Any = None,
    timezone: Any = "UTC",
    enabled: Any = True,
) -> ScheduleSpec:
    """Check every field's rule; raise `ScheduleInvalid` naming the first that breaks one."""
    skill_name = _check_skill(agent, skill)
    task_text = _check_task(task)
    clean_inputs = _check_inputs(inputs)
    has_cron = crontab not in (None, "")
    has_interval = interval_seconds is not None
    if has_cron == has_interval:
        raise _invalid(
            "crontab" if has_cron else "interval_seconds",
            "crontab_xor_interval",
            "give exactly one of crontab and interval_seconds",
        )
    cron_text = ""
    seconds: int | None = None
    if has_cron:
        cron_text = " ".join(parse_crontab(crontab).values())
    else:
        seconds = _check_interval(interval_seconds)
    tz = _check_timezone(timezone)
    if not isinstance(enabled, bool):
        raise _invalid("enabled", "boolean", "must be true or false")
    return ScheduleSpec(
        skill_name=skill_name,
        task=task_text,
        inputs=clean_inputs,
        crontab=cron_text,
        interval_seconds=seconds,
        timezone=tz,
        enabled=enabled,
    )


# --- the beat row --------------------------------------------------------------------------------


def _beat_schedule(spec: ScheduleSpec) -> dict[str, Any]:
    """The PeriodicTask's schedule fields: an existing crontab/interval row or a new one."""
    if spec.crontab:
        fields = dict(zip((n for n, _ in _CRON_FIELDS), spec.crontab.split(), strict=True))
        row = CrontabSchedule.objects.filter(**fields, timezone=spec.timezone).first()
        if row is None:
            row = CrontabSchedule.objects.create(**fields, timezone=spec.timezone)
        return {"crontab": row, "interval": None}
    assert spec.interval_seconds is not None
    row = IntervalSchedule.objects.filter(
        every=spec.interval_seconds, period=IntervalSchedule.SECONDS
    ).first()
    if row is None:
        row = IntervalSchedule.objects.create(
            every=spec.interval_seconds, period=IntervalSchedule.SECONDS
        )
    return {"interval": row, "crontab": None}


def _write_periodic_task(schedule: Schedule, spec: ScheduleSpec) -> PeriodicTask:
    timing = _beat_schedule(spec)
    task = schedule.periodic_task
    if task is None:
        task = PeriodicTask(name=f"{PERIODIC_TASK_PREFIX}{schedule.pk}", task=FIRE_TASK)
    task.task = FIRE_TASK
    task.args = json.dumps([schedule.pk])
    task.kwargs = "{}"
    task.crontab = timing["crontab"]
    task.interval = timing["interval"]
    task.solar = None
    task.clocked = None
    task.enabled = spec.enabled
    task.description = f"Motor Cortex schedule {schedule.pk}: skill {spec.skill_name}"
    # PeriodicTask.save() bumps django-celery-beat's change marker, so a running beat reloads.
    task.save()
    return task


def _apply(schedule: Schedule, spec: ScheduleSpec) -> None:
    schedule.skill_name = spec.skill_name
    schedule.task = spec.task
    schedule.inputs = spec.inputs
    schedule.crontab = spec.crontab
    schedule.interval_seconds = spec.interval_seconds
    schedule.timezone = spec.timezone
    schedule.enabled = spec.enabled


def _actor_parts(actor: Any) -> tuple[AbstractBaseUser | None, str]:
    """(user, label) of whoever changes a schedule: a Principal, a user, or a label."""
    if isinstance(actor, Principal):
        return (actor.user if actor.is_human else None), actor.label
    if isinstance(actor, AbstractBaseUser):
        return actor, f"admin:{actor.get_username()}"
    return None, str(actor or "system")


# --- services ------------------------------------------------------------------------------------


def schedule_create(
    *,
    agent: Agent | int | str,
    skill: str,
    task: str,
    inputs: dict[str, Any] | None = None,
    crontab: str | None = None,
    interval_seconds: int | None = None,
    timezone: str = "UTC",
    enabled: bool = True,
    actor: Any,
) -> Schedule:
    """Create a schedule and its PeriodicTask together; `ScheduleInvalid` writes nothing."""
    found = _check_agent(agent)
    spec = schedule_validate(
        agent=found,
        skill=skill,
        task=task,
        inputs=inputs,
        crontab=crontab,
        interval_seconds=interval_seconds,
        timezone=timezone,
        enabled=enabled,
    )
    user, label = _actor_parts(actor)
    with transaction.atomic():
        schedule = Schedule(agent=found, created_by=user, created_by_label=label[:200])
        _apply(schedule, spec)
        schedule.save()
        schedule.periodic_task = _write_periodic_task(schedule, spec)
        schedule.save(update_fields=["periodic_task"])
    logger.info(
        "schedule created: id=%s agent=%s skill=%s when=%s by=%s",
        schedule.pk,
        found.name,
        spec.skill_name,
        schedule.when,
        label,
    )
    return schedule


def schedule_update(
    *,
    schedule: Schedule,
    actor: Any,
    skill: Any = _UNSET,
    task: Any = _UNSET,
    inputs: Any = _UNSET,
    crontab: Any = _UNSET,
    interval_seconds: Any = _UNSET,
    timezone: Any = _UNSET,
    enabled: Any = _UNSET,
) -> Schedule:
    """Change the given fields (others keep their value); schedule and beat row change together.

    Switching between crontab and interval: pass the new one and the other as None/"".
    """
    with transaction.atomic():
        locked = Schedule.objects.select_for_update().select_related("agent").get(pk=schedule.pk)

        def pick(value: Any, current: Any) -> Any:
            return current if value is _UNSET else value

        new_cron = pick(crontab, locked.crontab)
        new_interval = pick(interval_seconds, locked.interval_seconds)
        # Giving one kind of timing replaces the other unless the caller also gave it.
        if crontab is not _UNSET and crontab not in (None, "") and interval_seconds is _UNSET:
            new_interval = None
        if interval_seconds is not _UNSET and interval_seconds is not None and crontab is _UNSET:
            new_cron = ""
        spec = schedule_validate(
            agent=locked.agent,
            skill=pick(skill, locked.skill_name),
            task=pick(task, locked.task),
            inputs=pick(inputs, locked.inputs),
            crontab=new_cron,
            interval_seconds=new_interval,
            timezone=pick(timezone, locked.timezone),
            enabled=pick(enabled, locked.enabled),
        )
        _apply(locked, spec)
        locked.save()
        locked.periodic_task = _write_periodic_task(locked, spec)
        locked.save(update_fields=["periodic_task"])
    logger.info(
        "schedule updated: id=%s when=%s enabled=%s by=%s",
        locked.pk,
        locked.when,
        locked.enabled,
        _actor_parts(actor)[1],
    )
    return locked


def schedule_set_enabled(*, schedule: Schedule, enabled: bool, actor: Any) -> Schedule:
    """Enable or disable a schedule and its beat row in one transaction."""
    with transaction.atomic():
        locked = Schedule.objects.select_for_update().get(pk=schedule.pk)
        locked.enabled = bool(enabled)
        locked.save(update_fields=["enabled", "updated_at"])
        task = locked.periodic_task
        if task is not None:
            task.enabled = locked.enabled
            task.save()
    logger.info(
        "schedule %s: id=%s by=%s",
        "enabled" if locked.enabled else "disabled",
        locked.pk,
        _actor_parts(actor)[1],
    )
    return locked


def schedule_enable(*, schedule: Schedule, actor: Any) -> Schedule:
    return schedule_set_enabled(schedule=schedule, enabled=True, actor=actor)


def schedule_disable(*, schedule: Schedule, actor: Any) -> Schedule:
    return schedule_set_enabled(schedule=schedule, enabled=False, actor=actor)


def schedule_delete(*, schedule: Schedule, actor: Any) -> None:
    """Delete the schedule, its occurrences and its PeriodicTask in one transaction."""
    with transaction.atomic():
        locked = Schedule.objects.select_for_update().filter(pk=schedule.pk).first()
        if locked is None:
            return
        task_id = locked.periodic_task_id
        pk = locked.pk
        locked.delete()
        if task_id is not None:
            # PeriodicTask.delete() bumps the change marker, so a running beat drops the entry.
            for task in PeriodicTask.objects.filter(pk=task_id):
                task.delete()
    logger.info("schedule deleted: id=%s by=%s", pk, _actor_parts(actor)[1])


# --- reads ---------------------------------------------------------------------------------------


def schedules_for_agent(*, agent: Agent) -> QuerySet[Schedule]:
    return Schedule.objects.filter(agent=agent).select_related(
        "periodic_task", "periodic_task__crontab", "agent"
    )


def schedule_for_agent(*, agent: Agent, schedule_id: Any) -> Schedule:
    """The agent's schedule `schedule_id`; another agent's schedule is not found (404)."""
    found = None
    if isinstance(schedule_id, int) and not isinstance(schedule_id, bool):
        if 0 < schedule_id < 2**63:
            found = schedules_for_agent(agent=agent).filter(pk=schedule_id).first()
    if found is None:
        raise ScheduleNotFound(
            f"No schedule {str(schedule_id)[:40]} for agent {agent.name!r}.",
            details={"id": str(schedule_id)[:40]},
        )
    return found


def schedule_last_occurrence(*, schedule: Schedule) -> ScheduleOccurrence | None:
    """The schedule's latest occurrence; taken from schedules_attach_last_occurrences when a list
    was prepared with it (no query per row)."""
    attached = getattr(schedule, "_last_occurrence", _NOT_ATTACHED)
    if attached is not _NOT_ATTACHED:
        return attached  # type: ignore[no-any-return]
    return schedule.occurrences.order_by("-fired_at", "-id").first()


_NOT_ATTACHED = object()


def last_occurrence_subquery(field: str = "pk") -> Subquery:
    """`field` of each schedule's latest occurrence, for annotating a schedule queryset."""
    latest = ScheduleOccurrence.objects.filter(schedule=OuterRef("pk")).order_by("-fired_at", "-id")
    return Subquery(latest.values(field)[:1])


def schedules_attach_last_occurrences(schedules: list[Schedule]) -> list[Schedule]:
    """Load the latest occurrence of every schedule of a page in two queries, for
    schedule_data / schedule_last_occurrence to use instead of one query per schedule."""
    if not schedules:
        return schedules
    last_ids = dict(
        Schedule.objects.filter(pk__in=[s.pk for s in schedules])
        .annotate(last_pk=last_occurrence_subquery())
        .values_list("pk", "last_pk")
    )
    found = ScheduleOccurrence.objects.in_bulk([pk for pk in last_ids.values() if pk is not None])
    for schedule in schedules:
        last_pk = last_ids.get(schedule.pk)
        schedule._last_occurrence = found.get(last_pk) if last_pk is not None else None  # type: ignore[attr-defined]
    return schedules


def schedule_next_fire(*, schedule: Schedule, now: datetime | None = None) -> datetime | None:
    """When beat will fire the schedule next (None while disabled).

    Computed with celery's schedule objects the way django-celery-beat's entry does: from the
    last run (or, before the first, the time the beat row last changed), in the crontab's time
    zone. A time already past means "due": beat fires it at its next tick, so `now` is returned.
    """
    task = schedule.periodic_task
    if not schedule.enabled or task is None or not task.enabled:
        return None
    now = now or dj_timezone.now()
    last = task.last_run_at or task.date_changed or now
    if schedule.crontab:
        cron = task.crontab.schedule  # TzAwareCrontab in the schedule's time zone
        start, delta, _ = cron.remaining_delta(last)
        upcoming = start + delta
    else:
        upcoming = last + timedelta(seconds=int(schedule.interval_seconds or 0))
    upcoming = upcoming.astimezone(ZoneInfo("UTC"))
    return max(upcoming, now)


# --- firing --------------------------------------------------------------------------------------


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


# --- serialization -------------------------------------------------------------------------------


def occurrence_data(occurrence: ScheduleOccurrence) -> dict[str, Any]:
    return {
        "id": occurrence.pk,
        "fired_at": occurrence.fired_at.isoformat(),
        "outcome": occurrence.outcome,
        "reason": occurrence.reason or None,
        "detail": occurrence.detail,
        "run_id": occurrence.run_id,
        "signal_id": occurrence.signal_id,
    }


def schedule_data(schedule: Schedule, *, now: datetime | None = None) -> dict[str, Any]:
    """The JSON shape of a schedule in the API (and the core.* tools)."""
    last = schedule_last_occurrence(schedule=schedule)
    upcoming = schedule_next_fire(schedule=schedule, now=now)
    return {
        "id": schedule.pk,
        "agent": schedule.agent.name,
        "skill": schedule.skill_name,
        "task": schedule.task,
        "inputs": schedule.inputs,
        "crontab": schedule.crontab or None,
        "interval_seconds": schedule.interval_seconds,
        "timezone": schedule.timezone,
        "enabled": schedule.enabled,
        "periodic_task": schedule.periodic_task.name if schedule.periodic_task else None,
        "created_by": schedule.created_by_label,
        "created_at": schedule.created_at.isoformat(),
        "updated_at": schedule.updated_at.isoformat(),
        "last_occurrence": occurrence_data(last) if last is not None else None,
        "next_fire_at": upcoming.isoformat() if upcoming is not None else None,
    }
