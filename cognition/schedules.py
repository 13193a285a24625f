"""Recurring skill runs: the services that create, change and delete a `Schedule`.

A Schedule and its django-celery-beat `PeriodicTask` are written together: every service here
changes both in one transaction, so beat (and django-celery-beat's own admin pages) always see
what the schedule says. Validation is in `cognition.schedule_validation`, reads in
`cognition.schedule_selectors`, and what happens when beat fires one in
`cognition.schedule_firing`.

Consent: creating a schedule, changing it and enabling it set up runs that happen later without
anyone watching, with the skill's policy (tools, domains, credentials). They are gated like
approving a skill (`schedule.create`, `schedule.update`, `schedule.enable` in
cognition.consent). Disabling and deleting only take authority away and are not gated.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

from .models import Agent, Schedule
from .principals import Principal
from .schedule_validation import _CRON_FIELDS, ScheduleSpec, _check_agent, schedule_validate

logger = logging.getLogger(__name__)

#: the Celery task name beat sends (cognition.tasks.schedule_fire_task)
FIRE_TASK = "cognition.schedule_fire"
#: PeriodicTask.name of schedule N
PERIODIC_TASK_PREFIX = "motor-schedule-"
_UNSET: Any = object()


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
