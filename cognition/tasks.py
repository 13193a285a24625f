"""Celery entry points of the brain side. Thin: take ids, call one service, return."""

from __future__ import annotations

from celery import shared_task


# Not acks_late: a fire is not idempotent (a redelivered message would record a second
# occurrence or start a second run), so a worker lost mid-fire loses that one occurrence.
@shared_task(name="cognition.schedule_fire", ignore_result=True)
def schedule_fire_task(schedule_id: int) -> int | None:
    """Sent by celery-beat: fire schedule `schedule_id` once. A missing schedule is a no-op.

    Returns the id of the recorded occurrence (None when nothing fired).
    """
    from cognition.schedules import schedule_fire

    occurrence = schedule_fire(schedule_id=schedule_id)
    return occurrence.pk if occurrence is not None else None
