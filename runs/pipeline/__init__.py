"""The path of one tool call: intent, decision, execution, record, aftermath."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.utils import timezone

from runs.crashpoints import crash_point
from runs.lease import (
    Lease,
    lease_fence,
    lease_release,
)
from runs.ledger import ledger_add_intent
from runs.logcontext import log_context_bind
from runs.models import (
    Attempt,
    MotorRun,
    RunStatus,
    Step,
    StepState,
)
from runs.pipeline.after import _after_result
from runs.pipeline.approvals import (
    _approval_proposal,
    _pause_for_approval,
    _unused_approval,
    _usable_approval,
)
from runs.pipeline.decide import _is_sandbox_call, _refusal, _runs_at_once
from runs.pipeline.executors import _execute_and_record, _save_credential
from runs.pipeline.intent import _intent_step
from runs.pipeline.record import _complete_step
from runs.records import SliceOutcome, _event, _signal
from runs.tools import (
    ASK_USER,
    INTERRUPTED,
    REQUEST_APPROVAL,
    SAVE_CREDENTIAL,
    SYNTHETIC_TOOLS,
    SandboxSlot,
    action_hash,
    envelope,
    needs_approval,
    parse_arguments,
)


def _perform_call(
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
    """Run one requested tool call under the intent → done protocol. None means "go on".

    `fresh`: the call was requested in this slice, so it cannot have a Step row yet. `last`:
    no call of this iteration follows, so a call that ends well also ends the slice when its
    time is up (`slice_ends_at`). `recorded`: the call's intent, already written with the reply.
    """
    name = str(call["function"]["name"])
    raw_arguments = str(call["function"].get("arguments") or "{}")
    arguments = parse_arguments(raw_arguments)
    if recorded is None:
        crash_point("before_step")

    iteration = attempt.iteration
    # the call's log lines name it (iteration and step, as the run console counts them)
    log_context_bind(iteration=iteration, step=call_index + 1, tool=name)
    if recorded is not None or (fresh and _runs_at_once(run, name, arguments)):
        # The common case, a granted call with nothing to decide before it runs: its intent
        # is one fenced write, or part of the reply's (the general path below does the rest).
        step = recorded or _intent_step(
            lease, attempt, call_index, call, name, arguments, raw_arguments, model, reasoning
        )
        if recorded is None:
            ledger_add_intent(lease, step)
    else:
        with transaction.atomic():
            lease_fence(lease)
            step = (
                None
                if fresh
                else Step.objects.filter(
                    attempt=attempt, iteration=iteration, call_index=call_index
                ).first()
            )
            if step is not None and step.state == StepState.DONE:
                return None  # recorded already; its result is in the messages
            approval = _usable_approval(run, step) if step is not None else None
            if approval is not None:
                # Approved while paused: start exactly this action, once (after this commit).
                approval.used_at = timezone.now()
                approval.save(update_fields=["used_at"])
            elif step is not None:
                if (
                    _is_sandbox_call(run, name, arguments)
                    and needs_approval(
                        name, arguments or {}, network_enabled=bool(run.allowed_domains)
                    )
                    and not step.approvals.exists()
                ):
                    # A non-idempotent call caught in flight: only the owner may decide to rerun it.
                    return _pause_for_approval(
                        run,
                        attempt,
                        lease,
                        step=step,
                        tool=name,
                        arguments=arguments or {},
                        summary="outcome unknown — run again?",
                        actor=actor,
                    )
                # In flight when its worker died: the outcome is unknown, so it is not run again.
                # The model sees that and decides whether to repeat it.
                result = envelope(
                    ok=False,
                    output=(
                        "This call was interrupted before its result was recorded; its outcome is "
                        "unknown. Check the current state before repeating it."
                    ),
                    error_code=INTERRUPTED,
                    retryable=True,
                )
                _complete_step(run, attempt, step, result)
                return _after_result(run, attempt, name, result, actor=actor)
            else:
                step = _intent_step(
                    lease,
                    attempt,
                    call_index,
                    call,
                    name,
                    arguments,
                    raw_arguments,
                    model,
                    reasoning,
                )
                step.save(force_insert=True)
                if run.review and name in SYNTHETIC_TOOLS:
                    result = envelope(
                        ok=False,
                        output=f"{name} is not available in a review run",
                        error_code="denied",
                    )
                    _complete_step(run, attempt, step, result)
                    return _after_result(run, attempt, name, result, actor=actor)
                if name == ASK_USER:
                    question = str((arguments or {}).get("question") or "").strip()
                    if question:
                        previous = run.status
                        attempt.await_input(question=question, tool_call_id=str(call["id"]))
                        attempt.save(
                            update_fields=["status", "pending_question", "pending_tool_call_id"]
                        )
                        run.await_input()
                        run.save(update_fields=["status", "updated_at"])
                        lease_release(lease, slice_done=True)
                        _event(run, from_status=previous, actor=actor, question=question)
                        _signal(
                            run,
                            {
                                "run_id": run.id,
                                "status": RunStatus.AWAITING_INPUT,
                                "question": question,
                            },
                        )
                        return SliceOutcome.PAUSED
                    result = envelope(
                        ok=False,
                        output="ask_user needs a non-empty 'question'",
                        error_code="invalid_args",
                    )
                    _complete_step(run, attempt, step, result)
                    return _after_result(run, attempt, name, result, actor=actor)
                if name == REQUEST_APPROVAL:
                    proposal = _approval_proposal(run, arguments)
                    if isinstance(proposal, dict) and "ok" in proposal:
                        _complete_step(run, attempt, step, proposal)
                        return _after_result(run, attempt, name, proposal, actor=actor)
                    return _pause_for_approval(
                        run, attempt, lease, step=step, actor=actor, **proposal
                    )
                if name == SAVE_CREDENTIAL:
                    result = _save_credential(run, arguments or {})
                    _complete_step(run, attempt, step, result)
                    return _after_result(run, attempt, name, result, actor=actor)
                refusal = _refusal(run, name, arguments)
                if refusal is not None:
                    _complete_step(run, attempt, step, refusal)
                    return _after_result(run, attempt, name, refusal, actor=actor)
                if run.approval_required and needs_approval(
                    name, arguments or {}, network_enabled=bool(run.allowed_domains)
                ):
                    granted = _unused_approval(run, action_hash(name, arguments or {}))
                    if granted is None:
                        return _pause_for_approval(
                            run,
                            attempt,
                            lease,
                            step=step,
                            tool=name,
                            arguments=arguments or {},
                            summary="approval required before this action",
                            actor=actor,
                        )
                    granted.used_at = timezone.now()
                    granted.save(update_fields=["used_at"])
    return _execute_and_record(
        lease,
        run,
        attempt,
        step,
        name,
        arguments or {},
        slot,
        credentials,
        actor,
        last=last,
        slice_ends_at=slice_ends_at,
    )
