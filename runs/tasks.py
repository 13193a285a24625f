"""Celery entry points of the runtime. Thin: take ids, call one service, return."""

from __future__ import annotations

from celery import shared_task


@shared_task(
    name="runs.run_step",
    acks_late=True,
    # Safe because a slice is idempotent by construction: it reads the ledger in the database,
    # holds a fenced lease, and never re-runs a recorded tool call. Poison slices are capped by
    # the redelivery counter in the database, not by the broker.
    reject_on_worker_lost=True,
    ignore_result=True,
)
def run_step_task(run_id: str) -> str:
    """Advance one run by one iteration. A missing or finished run is a no-op."""
    from runs.services import run_step

    return run_step(run_id=run_id).value
