"""Celery tasks of the built-in brain (thin: they take ids and call one service)."""

from __future__ import annotations

from celery import shared_task

#: seconds between attempts when the conversation is busy with another turn
BUSY_RETRY_S = 5
#: attempts before a wake-up that keeps finding the conversation busy is left queued
BUSY_MAX_RETRIES = 60


# acks_late + reject_on_worker_lost: a worker killed mid-turn gets the message redelivered, and
# brain_wake_handle resumes the wake (never a second event or review) once the dead turn's lock
# has expired; a wake already DONE is a no-op, so redelivery is safe.
@shared_task(
    bind=True,
    name="cognition.brain.brain_wake_task",
    max_retries=BUSY_MAX_RETRIES,
    acks_late=True,
    reject_on_worker_lost=True,
)
def brain_wake_task(self, signal_id: int) -> str:  # noqa: ANN001 - Celery's bound task
    """Wake the brain for one signal; a signal already handled is a no-op."""
    from .waking import brain_wake_handle

    outcome = brain_wake_handle(signal_id=signal_id)
    if outcome == "busy":
        raise self.retry(countdown=BUSY_RETRY_S, priority=0)
    return outcome
