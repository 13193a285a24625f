"""The path of one tool call, in five stages:

    decide ─▶ intent ─▶ execute ─▶ record ─▶ after

1. decide (`decide.py`): a pure function of a small frozen `CallFacts` (grant, review run, the
   run's approval rule, a call caught in flight) returns a `Decision`: run it, record a result
   instead (refused, interrupted), or pause for the owner.
2. intent (`intent.py`): the call's Step row, durable before anything runs; a Step found again
   without a result is a call caught in flight.
3. execute (`executors.py`): the executor registered for the tool (`executor_for`): the sandbox,
   or a host-side tool (ask_user, request_approval, save_credential) that may pause the run
   (`pauses.py`). World executors run outside any transaction and connection, with credential
   values injected and redacted from the result.
4. record (`record.py`): the redacted result and its tool message, in one fenced write.
5. after (`after.py`): what a recorded result sets off: the consecutive-failure bailout.

`call_perform` is the one entry point of the slice loop (and `intent_ahead` gives it the intent
to write with a reply); the loop knows nothing of approvals, credentials or tool kinds. Adding a
tool kind is one `Executor` and one `ToolManifest`, registered with `tool_kind_register`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import transaction

from runs.crashpoints import crash_point
from runs.lease import Lease, lease_fence
from runs.ledger import ledger_add_intent
from runs.logcontext import log_context_bind
from runs.models import Attempt, MotorRun, Step, StepState
from runs.pipeline.after import call_after
from runs.pipeline.approvals import approval_for_action, approval_for_step, approval_use
from runs.pipeline.decide import CallFacts, Decision, Verdict, call_facts, decide
from runs.pipeline.executors import (
    AwaitApproval,
    AwaitInput,
    CallContext,
    Executor,
    call_execute,
    executor_for,
    executors_prewarm,
    tool_kind_register,
    tool_kind_unregister,
)
from runs.pipeline.intent import ToolRequest, intent_ahead, intent_find, intent_new, runs_at_once
from runs.pipeline.pauses import pause_for_approval, pause_for_question
from runs.pipeline.record import call_record, step_complete, tool_message
from runs.placement import workspace_snapshot
from runs.records import SliceOutcome
from runs.tools import SandboxSlot, ToolManifest, action_hash

__all__ = [
    "AwaitApproval",
    "AwaitInput",
    "CallContext",
    "CallFacts",
    "Decision",
    "Executor",
    "ToolManifest",
    "Verdict",
    "call_perform",
    "decide",
    "executors_prewarm",
    "intent_ahead",
    "step_complete",
    "tool_kind_register",
    "tool_kind_unregister",
    "tool_message",
]


def call_perform(
    lease: Lease,
    run: MotorRun,
    attempt: Attempt,
    *,
    call_index: int,
    call: dict[str, Any],
    fresh: bool,
    last: bool,
    slice_ends_at: float,
    slot: SandboxSlot,
    recorded: Step | None = None,
    credentials: Callable[[MotorRun], dict[str, str]] | None,
    actor: str,
    model: str,
    reasoning: str,
) -> SliceOutcome | None:
    """Take one requested tool call through the stages. None means "go on"; otherwise the
    slice's outcome (the run paused, finished, or the slice ended).

    `fresh`: the call was requested in this slice, so it cannot have a Step row yet. `last`:
    no call of this iteration follows, so a call that ends well also ends the slice when its
    time is up (`slice_ends_at`). `recorded`: the call's intent, already written with the reply.
    A call whose result is recorded is never run again; every write proves the lease first.
    """
    request = ToolRequest.of(call)
    if recorded is None:
        crash_point("before_step")
    # the call's log lines name it (iteration and step, as the run console counts them)
    log_context_bind(iteration=attempt.iteration, step=call_index + 1, tool=request.name)

    if recorded is not None or (fresh and runs_at_once(run, request)):
        # The common case, a granted call with nothing to decide before it runs: its intent
        # is one fenced write, or part of the reply's (the general path below does the rest).
        step = recorded or intent_new(lease, attempt, call_index, request, model, reasoning)
        if recorded is None:
            ledger_add_intent(lease, step)
    else:
        with transaction.atomic():
            lease_fence(lease)
            found = None if fresh else intent_find(attempt, call_index)
            if found is not None and found.state == StepState.DONE:
                return None  # recorded already; its result is in the messages
            step, outcome = _decide_and_apply(
                lease, run, attempt, found, call_index, request, slot, model, reasoning, actor
            )
            if outcome is not None or step is None:
                return outcome
    executor = executor_for(request.name)
    arguments = request.arguments or {}
    result = call_execute(lease, run, step, request.name, arguments, executor, slot, credentials)
    # the files the call wrote are in object storage before its result is recorded
    workspace_snapshot(lease, run)
    return call_record(
        lease,
        run,
        attempt,
        step,
        request.name,
        result,
        actor=actor,
        last=last,
        slice_ends_at=slice_ends_at,
    )


def _decide_and_apply(
    lease: Lease,
    run: MotorRun,
    attempt: Attempt,
    found: Step | None,
    call_index: int,
    request: ToolRequest,
    slot: SandboxSlot,
    model: str,
    reasoning: str,
    actor: str,
) -> tuple[Step | None, SliceOutcome | None]:
    """The general path, in the caller's fenced transaction: decide on the call and act on the
    decision. Returns the Step to execute outside the transaction, or (None, outcome) when the
    call ended here (recorded or paused; outcome None: the run goes on)."""
    name, arguments = request.name, request.arguments
    if found is not None:
        step = found
        approval = approval_for_step(run, step)
        facts = call_facts(
            run,
            name,
            arguments,
            in_flight=True,
            approved=approval is not None,
            asked_before=approval is None and step.approvals.exists(),
        )
    else:
        approval = None
        step = intent_new(lease, attempt, call_index, request, model, reasoning)
        step.save(force_insert=True)
        facts = call_facts(run, name, arguments)
    decision = decide(facts)

    if decision.verdict is Verdict.RECORD:
        assert decision.result is not None
        step_complete(run, attempt, step, decision.result)
        return None, call_after(run, attempt, name, decision.result, actor=actor)
    if decision.verdict is Verdict.ASK_OWNER:
        # A call that could do harm twice, caught in flight: only the owner may rerun it.
        return None, pause_for_approval(
            run,
            attempt,
            lease,
            step=step,
            tool=name,
            arguments=arguments or {},
            summary=decision.summary,
            actor=actor,
        )
    if decision.verdict is Verdict.APPROVAL:
        approval = approval_for_action(run, action_hash(name, arguments or {}))
        if approval is None:
            return None, pause_for_approval(
                run,
                attempt,
                lease,
                step=step,
                tool=name,
                arguments=arguments or {},
                summary=decision.summary,
                actor=actor,
            )
    if approval is not None:
        # Approved: start exactly this action, once (after this commit).
        approval_use(approval)
        return step, None
    executor = executor_for(name)
    if not executor.host:
        return step, None
    return None, _host_execute(lease, run, attempt, step, request, executor, slot, actor)


def _host_execute(
    lease: Lease,
    run: MotorRun,
    attempt: Attempt,
    step: Step,
    request: ToolRequest,
    executor: Executor,
    slot: SandboxSlot,
    actor: str,
) -> SliceOutcome | None:
    """Run a host executor inside the intent's transaction; record its result or pause."""
    context = CallContext(
        run=run,
        step=step,
        name=request.name,
        arguments=request.arguments or {},
        slot=slot,
        credentials={},
    )
    outcome = executor.execute(context)
    if isinstance(outcome, AwaitInput):
        return pause_for_question(
            run,
            attempt,
            lease,
            question=outcome.question,
            tool_call_id=request.call_id,
            actor=actor,
        )
    if isinstance(outcome, AwaitApproval):
        return pause_for_approval(
            run,
            attempt,
            lease,
            step=step,
            tool=outcome.tool,
            arguments=outcome.arguments,
            summary=outcome.summary,
            actor=actor,
        )
    step_complete(run, attempt, step, outcome)
    return call_after(run, attempt, request.name, outcome, actor=actor)
