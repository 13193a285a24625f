"""The intent of a tool call: its Step row, durable before the call starts."""

from __future__ import annotations

from typing import Any

from runs.lease import Lease
from runs.models import (
    Attempt,
    Step,
)


def _intent_step(
    lease: Lease,
    attempt: Attempt,
    call_index: int,
    call: dict[str, Any],
    name: str,
    arguments: dict[str, Any] | None,
    raw_arguments: str,
    model: str,
    reasoning: str,
    *,
    next_iteration: bool = False,
) -> Step:
    """The Step row (unsaved, state intent) of a call about to be decided on or run; with
    `next_iteration`, of a reply not recorded yet (its iteration is the attempt's next)."""
    return Step(
        attempt=attempt,
        iteration=attempt.iteration + 1 if next_iteration else attempt.iteration,
        call_index=call_index,
        tool_call_id=str(call["id"]),
        tool=name[:64],
        arguments=arguments if arguments is not None else {"_raw": raw_arguments[:2000]},
        model=model,
        reasoning=reasoning,
        lease_token=lease.token,
    )
