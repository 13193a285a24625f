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
    from cognition.schedule_firing import schedule_fire

    occurrence = schedule_fire(schedule_id=schedule_id)
    return occurrence.pk if occurrence is not None else None


@shared_task(
    name="cognition.signal_dispatch",
    acks_late=True,
    # Safe: dispatch plans a signal's deliveries once, under the signal's row lock.
    reject_on_worker_lost=True,
    ignore_result=True,
)
def signal_dispatch_task(signal_id: int) -> list[int]:
    """Plan the deliveries of one committed signal, make the brain hooks' first attempts, and
    queue the webhook's. A redelivered message finds the plan made and does nothing more: a
    hook attempt its worker died in is the sweeper's (its claim expires)."""
    from cognition.delivery import signal_dispatch

    return signal_dispatch(signal_id=signal_id)


@shared_task(name="cognition.signal_delivery_attempt", ignore_result=True)
def signal_delivery_attempt_task(delivery_id: int) -> str:
    """One attempt of one delivery (webhook POST or brain hook); a missing row is a no-op.

    Not acks_late: an attempt whose worker dies mid-call is found by the sweeper (its claim
    expires), recorded as lost and retried, so the broker need not redeliver it.
    """
    from cognition.delivery import signal_delivery_attempt

    return signal_delivery_attempt(delivery_id=delivery_id)


@shared_task(name="cognition.signal_delivery_sweep", ignore_result=True)
def signal_delivery_sweep_task() -> dict[str, list[int]]:
    """Periodic (celery-beat): re-queue signals never dispatched and attempts that were lost."""
    from cognition.delivery import signal_delivery_sweep

    return signal_delivery_sweep()


@shared_task(name="cognition.records_purge", ignore_result=True)
def records_purge_task() -> dict[str, int]:
    """Periodic (celery-beat): delete expired Idempotency-Key records and old finished signal
    deliveries with their attempts."""
    from cognition.delivery import signal_delivery_purge
    from cognition.services import idempotency_purge

    return {
        "idempotency_records": idempotency_purge(),
        "signal_deliveries": signal_delivery_purge(),
    }


@shared_task(name="cognition.cortex_follow_up", ignore_result=True)
def cortex_follow_up_task(follow_up_id: int) -> str | None:
    """Carry out one skill-cortex follow-up (a release, a retry after its wait) if it is due
    and still pending; queued with the wait as countdown. A lost message is the sweep's."""
    from cognition.cortex.follow_ups import follow_up_carry_out

    return follow_up_carry_out(follow_up_id)


@shared_task(name="cognition.cortex_follow_ups_sweep", ignore_result=True)
def cortex_follow_ups_sweep_task() -> dict[str, object]:
    """Periodic (celery-beat): carry out every due skill-cortex follow-up still pending (one
    whose worker died after the learning committed, or whose task message was lost)."""
    from cognition.cortex.follow_ups import follow_ups_sweep

    return follow_ups_sweep()
