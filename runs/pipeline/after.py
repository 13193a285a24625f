"""Stage 5, after: what follows a recorded result.

Today that is the consecutive-failure bailout: the same tool failing with the same error code
`BAILOUT_STREAK` times in a row fails the attempt. Signals and learning hooks that react to a
call's result belong here, inside the transaction that recorded it.
"""

from __future__ import annotations

from typing import Any

from runs.failures import bailout_failure
from runs.finishing import run_finish_failed
from runs.models import (
    Attempt,
    MotorRun,
    Step,
    StepState,
)
from runs.records import SliceOutcome
from runs.tools import ASK_USER

#: a tool failing this many times in a row with the same error_code fails the run (seed 001)
BAILOUT_STREAK = 3


def call_after(
    run: MotorRun, attempt: Attempt, name: str, result: dict[str, Any], *, actor: str
) -> SliceOutcome | None:
    """Apply the consecutive-failure bailout after a recorded result; FINISHED when it failed
    the run, else None. Caller holds the locks of the transaction that recorded `result`."""
    if result.get("ok"):
        return None
    recent = list(
        Step.objects.filter(attempt=attempt, state=StepState.DONE)
        .exclude(tool=ASK_USER)
        .order_by("-iteration", "-call_index")
        .values_list("tool", "result")[:BAILOUT_STREAK]
    )
    codes = {(tool, (res or {}).get("error_code")) for tool, res in recent}
    failing = all(not (res or {}).get("ok") for _, res in recent)
    if len(recent) == BAILOUT_STREAK and failing and len(codes) == 1:
        code = next(iter(codes))[1]
        if code:
            category, message, retryable = bailout_failure(
                tool=name, error_code=code, streak=BAILOUT_STREAK
            )
            run_finish_failed(
                run,
                attempt,
                category=category,
                message=message,
                retryable=retryable,
                actor=actor,
            )
            return SliceOutcome.FINISHED
    return None
