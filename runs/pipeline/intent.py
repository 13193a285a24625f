"""Stage 2, intent: a call's Step row, durable before the call starts.

A Step in state `intent` is the promise the rest of the runtime relies on: whatever happens to
the worker afterwards, the call is known to have been started, so it is never silently run a
second time (a Step found again without a result is a call caught in flight, see `decide`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runs.lease import Lease
from runs.models import Attempt, MotorRun, Step
from runs.pipeline.decide import Verdict, call_facts, decide
from runs.pipeline.executors import executor_for
from runs.tools import parse_arguments


@dataclass(frozen=True)
class ToolRequest:
    """One tool call as the model asked for it: `arguments` is None when `raw_arguments` is
    not a JSON object."""

    call_id: str
    name: str
    raw_arguments: str
    arguments: dict[str, Any] | None

    @classmethod
    def of(cls, call: dict[str, Any]) -> ToolRequest:
        """The request of an assistant message's tool call."""
        raw = str(call["function"].get("arguments") or "{}")
        return cls(
            call_id=str(call["id"]),
            name=str(call["function"]["name"]),
            raw_arguments=raw,
            arguments=parse_arguments(raw),
        )


def intent_new(
    lease: Lease,
    attempt: Attempt,
    call_index: int,
    request: ToolRequest,
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
        tool_call_id=request.call_id,
        tool=request.name[:64],
        arguments=(
            request.arguments
            if request.arguments is not None
            else {"_raw": request.raw_arguments[:2000]}
        ),
        model=model,
        reasoning=reasoning,
        lease_token=lease.token,
    )


def intent_find(attempt: Attempt, call_index: int) -> Step | None:
    """The Step of call `call_index` of the attempt's current iteration, if one was written."""
    return Step.objects.filter(
        attempt=attempt, iteration=attempt.iteration, call_index=call_index
    ).first()


def runs_at_once(run: MotorRun, request: ToolRequest) -> bool:
    """A call with nothing to decide before it runs (a granted world tool, arguments that
    parse, no approval to ask): its intent can be written on its own, or with the reply."""
    return (
        decide(call_facts(run, request.name, request.arguments)).verdict is Verdict.RUN
        and not executor_for(request.name).host
    )


def intent_ahead(
    lease: Lease, run: MotorRun, attempt: Attempt, stored: dict[str, Any], *, model: str
) -> Step | None:
    """The intent of the first call of the reply `stored` (as it will be stored), when that call
    can run at once (`runs_at_once`); None otherwise (it then takes the pipeline's general
    path). The loop writes it together with the reply."""
    calls = stored.get("tool_calls") or []
    if not calls:
        return None
    request = ToolRequest.of(calls[0])
    if not runs_at_once(run, request):
        return None
    reasoning = str(stored.get("content") or "")
    return intent_new(lease, attempt, 0, request, model, reasoning, next_iteration=True)
