"""Stage 4, record: a call's result made durable, under the fencing check.

The result reaching this stage is already redacted (`call_execute`); what is stored is the
Step marked done with its result and the tool message that answers the call in the
conversation. Provenance travels in the result envelope (`provenance`: internal, web, user)
and marks web output as untrusted in the message the model reads (`tool_message_content`).
"""

from __future__ import annotations

import time
from typing import Any

from django.db import transaction
from django.utils import timezone

from runs.accounting import run_rates
from runs.crashpoints import crash_point
from runs.finishing import slice_end
from runs.lease import Lease, lease_fence
from runs.ledger import ledger_record_result
from runs.models import Attempt, MotorRun, Step, StepState
from runs.pipeline.after import call_after
from runs.pipeline.audit import audit_call, audit_row
from runs.records import SliceOutcome, run_wake
from runs.tools import tool_message_content


def _next_is_charged(run: MotorRun) -> bool:
    return run_rates(run).iteration_cost(run.iterations + 1) > 0


def call_record(
    lease: Lease,
    run: MotorRun,
    attempt: Attempt,
    step: Step,
    name: str,
    result: dict[str, Any],
    *,
    actor: str,
    last: bool = False,
    slice_ends_at: float = 0.0,
) -> SliceOutcome | None:
    """Record the result of an executed call (fenced); None: the run goes on in this slice.

    A success is one write; a failure is recorded with its aftermath (`call_after`) in one
    transaction. When the call is the iteration's `last`, the run goes on and the slice's time
    is up (`slice_ends_at`, time.monotonic()), the same commit also ends the slice: the lease is
    released and the next slice is queued once it is durable (CONTINUED).
    """
    ends_slice = last and time.monotonic() >= slice_ends_at
    outcome: SliceOutcome | None = None
    if result.get("ok"):
        # No bailout to weigh: the result (and, at the slice's end, the release) is one write.
        ledger_record_result(
            lease,
            attempt,
            step,
            result,
            tool_message(step, result),
            release=ends_slice,
            # the call's audit row is part of the same fenced write
            audit=audit_row(run, attempt, step, result, actor=actor),
            # and so is the energy the next iteration checks, when the run goes on to pay it
            energy_of=run if last and not ends_slice and _next_is_charged(run) else None,
        )
        if ends_slice:
            outcome = SliceOutcome.CONTINUED
            run_id, token = lease.run_id, lease.token
            transaction.on_commit(lambda: run_wake(run_id, token))
    else:
        with transaction.atomic():
            # A recorded result is progress: the slices counted as unfinished start again at 0.
            lease_fence(lease, redelivery_count=0)
            step_complete(run, attempt, step, result)
            outcome = call_after(run, attempt, name, result, actor=actor)
            if outcome is None and ends_slice:
                slice_end(lease)
                outcome = SliceOutcome.CONTINUED
    crash_point("after_commit")
    return outcome


def step_complete(run: MotorRun, attempt: Attempt, step: Step, result: dict[str, Any]) -> None:
    """Mark `step` done with `result` and append its tool message. Caller holds the locks."""
    step.state = StepState.DONE
    step.result = result
    step.duration_ms = int(result.get("duration_ms") or 0)
    step.completed_at = timezone.now()
    step.save(update_fields=["state", "result", "duration_ms", "completed_at"])
    attempt.messages = [*attempt.messages, tool_message(step, result)]
    attempt.save(update_fields=["messages"])
    # the call's audit row, in the same (fenced) transaction as its result
    audit_call(run, attempt, step, result)


def tool_message(step: Step, result: dict[str, Any]) -> dict[str, Any]:
    """The tool message that answers `step`'s call in the conversation."""
    return {
        "role": "tool",
        "tool_call_id": step.tool_call_id,
        "content": tool_message_content(result),
    }
