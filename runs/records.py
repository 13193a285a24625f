"""What every change of a run writes besides the row itself: its audit row (`RunEvent`), the
motor_result signal, and the wake-up of its next slice; the row lock commands take, and the
outcome type one slice reports.
"""

from __future__ import annotations

import enum
from typing import Any

from runs.models import (
    Attempt,
    MotorRun,
    RunEvent,
    Signal,
    SignalKind,
    SignalPriority,
)
from runs.outbox import signal_emit
from runs.wakeups import wake_up


class SliceOutcome(enum.StrEnum):
    """What one `run_step` call did."""

    CONTINUED = "continued"  # progress recorded, next slice enqueued
    PAUSED = "paused"  # waiting for the user (or an approval)
    FINISHED = "finished"  # the run reached a terminal status in this slice
    NOT_RUNNABLE = "not_runnable"  # the run is paused, terminal or missing: nothing to do
    LEASE_BUSY = "lease_busy"  # another slice holds a live lease on the run
    LEASE_LOST = "lease_lost"  # a newer slice took over; this one wrote nothing further
    DATABASE_LOST = "database_lost"  # the connection failed; lease released, run woken again


def run_wake(run_id: str, token: int) -> None:
    """Wake a worker for the run; `token` is the lease token the message is meant for. An
    unreachable broker leaves the message in the outbox (runs.wakeups)."""
    wake_up(run_id, token)


def event_record(run: MotorRun, *, from_status: str, actor: str, **detail: object) -> None:
    """Write the audit row of the run's move from `from_status` to its current status."""
    RunEvent.objects.create(
        run=run, from_status=from_status, to_status=run.status, actor=actor, detail=detail
    )


def motor_result_emit(run: MotorRun, payload: dict[str, Any]) -> Signal:
    """Emit the run's motor_result signal (high priority) in the caller's transaction."""
    return signal_emit(
        agent_id=run.agent_id,
        kind=SignalKind.MOTOR_RESULT,
        payload=payload,
        run_id=run.id,
        priority=SignalPriority.HIGH,
    )


def attempt_lock_current(run: MotorRun) -> Attempt:
    """The run's current attempt, locked for the caller's transaction."""
    return Attempt.objects.select_for_update().get(run=run, index=run.current_attempt_index)


def run_lock(run_id: str) -> MotorRun:
    """The run, locked for the caller's transaction; RunNotFound when there is none."""
    from runs.errors import RunNotFound

    try:
        return MotorRun.objects.select_for_update().get(pk=run_id)
    except MotorRun.DoesNotExist:
        raise RunNotFound(f"no run with id {run_id!r}", run_id=run_id) from None
