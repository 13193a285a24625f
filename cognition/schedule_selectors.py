"""Reads of schedules: an agent's schedules, their latest occurrence and next fire time, and
the JSON shape the API gives them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone as dj_timezone

from .errors import CognitionError
from .models import Agent, Schedule, ScheduleOccurrence


class ScheduleNotFound(CognitionError):
    code = "schedule_not_found"
    http_status = 404


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
