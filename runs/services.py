"""State changes of the Motor Cortex runtime. Keyword-only, typed, `<entity>_<action>`.

The loop is advanced one slice at a time by `run_step`: claim the lease, then iteration after
iteration — one LLM call (outside any transaction), the requested tool calls one by one (Step row
written as `intent` and committed, the call run outside a transaction, the result recorded under
the fencing check) — until the run pauses or ends or the slice's time (MOTOR_SLICE_SECONDS) is up;
then release the lease and enqueue the next slice on commit. Every write checks the fencing token
first; the frequent ones are single statements (`runs.ledger`).
"""

from __future__ import annotations

import enum
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypedDict

import openai
from django.apps import apps
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.module_loading import import_string

from runs.artifacts import artifacts_gather, artifacts_record
from runs.compaction import compact_messages, roll_up
from runs.crashpoints import crash_point
from runs.credentials import (
    intercept_save_call,
    placeholder,
    redact,
    saved_values,
    scrub_unparsable_save_call,
    store_saved,
)
from runs.db import release_db_connection
from runs.db_outage import DATABASE_UNAVAILABLE, slice_after_database_loss
from runs.domains import check_allowed_domains
from runs.errors import (
    CredentialResolverFailed,
    CredentialsStillMissing,
    InvalidRunParams,
    InvalidTransition,
    LeaseLost,
    LLMUnavailable,
    MotorBusy,
)
from runs.failures import bailout_failure, execute_retrying_transient, failure_hint_enqueue
from runs.lease import (
    Lease,
    default_owner,
    lease_fence,
    lease_release,
    owner_is_dead,
)
from runs.ledger import (
    ledger_add_intent,
    ledger_claim,
    ledger_insert,
    ledger_record_reply,
    ledger_record_result,
    ledger_take_over,
)
from runs.llm import LLMReply, ModelRole, llm_chat, llm_client
from runs.models import (
    ACTIVE_STATUSES,
    DEFAULT_MAX_ITERATIONS,
    MAX_ITERATIONS_CEILING,
    MAX_RUN_TIMEOUT_S,
    RETRY_MAX_ITERATIONS,
    REVIEW_MAX_ITERATIONS,
    REVIEW_TOOLS,
    ApprovalRequest,
    ApprovalStatus,
    Attempt,
    AttemptStatus,
    FailureCategory,
    MotorRun,
    RunEvent,
    RunStatus,
    Signal,
    SignalKind,
    SignalPriority,
    Step,
    StepState,
    Trigger,
    new_run_id,
)
from runs.mutex import mutex_hold, mutex_release, mutex_reserve
from runs.outbox import signal_emit
from runs.prompts import WRITING_TOOLS, build_system_prompt
from runs.sessions import CallWatch, open_run_sessions, run_session_close
from runs.tools import (
    ASK_USER,
    INTERRUPTED,
    REQUEST_APPROVAL,
    SAVE_CREDENTIAL,
    SYNTHETIC_TOOLS,
    SandboxSlot,
    action_hash,
    envelope,
    expand_granted,
    needs_approval,
    offered_schemas,
    parse_arguments,
    tool_message_content,
)
from runs.wakeups import wake_up
from runs.workspaces import RULE as WORKSPACE_RULE
from runs.workspaces import NotAProjectWorkspace, check_run_workspace

logger = logging.getLogger(__name__)

#: a tool failing this many times in a row with the same error_code fails the run (seed 001)
BAILOUT_STREAK = 3
_CREDENTIAL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_ACTIVE_CONSTRAINT = "motorrun_one_active_per_agent"
#: names save_credential accepts: the skill store's credential-name rule (an env variable name)
_SAVED_CREDENTIAL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")


class RunStarted(TypedDict):
    run_id: str
    status: str


class RunTransitioned(TypedDict):
    run_id: str
    previous_status: str
    new_status: str


class SliceOutcome(enum.StrEnum):
    """What one `run_step` call did."""

    CONTINUED = "continued"  # progress recorded, next slice enqueued
    PAUSED = "paused"  # waiting for the user (or an approval)
    FINISHED = "finished"  # the run reached a terminal status in this slice
    NOT_RUNNABLE = "not_runnable"  # the run is paused, terminal or missing: nothing to do
    LEASE_BUSY = "lease_busy"  # another slice holds a live lease on the run
    LEASE_LOST = "lease_lost"  # a newer slice took over; this one wrote nothing further
    DATABASE_LOST = "database_lost"  # the connection failed; lease released, run woken again


# --- helpers -------------------------------------------------------------------------------------


def _enqueue_step(run_id: str, token: int) -> None:
    """Wake a worker for the run; `token` is the lease token the message is meant for. An
    unreachable broker leaves the message in the outbox (runs.wakeups)."""
    wake_up(run_id, token)


def _event(run: MotorRun, *, from_status: str, actor: str, **detail: object) -> None:
    RunEvent.objects.create(
        run=run, from_status=from_status, to_status=run.status, actor=actor, detail=detail
    )


def _signal(run: MotorRun, payload: dict[str, Any]) -> Signal:
    return signal_emit(
        agent_id=run.agent_id,
        kind=SignalKind.MOTOR_RESULT,
        payload=payload,
        run_id=run.id,
        priority=SignalPriority.HIGH,
    )


def _current_attempt(run: MotorRun) -> Attempt:
    return Attempt.objects.select_for_update().get(run=run, index=run.current_attempt_index)


def _stats(run: MotorRun, attempt: Attempt) -> dict[str, Any]:
    started = run.started_at or run.created_at
    errors = sum(
        1
        for result in Step.objects.filter(attempt=attempt, state=StepState.DONE).values_list(
            "result", flat=True
        )
        if result and not result.get("ok")
    )
    return {
        "iterations": attempt.iteration,
        "duration_ms": int((timezone.now() - started).total_seconds() * 1000),
        "energy_cost": 0.0,
        "errors": errors,
    }


def _last_step_label(attempt: Attempt) -> str:
    step = Step.objects.filter(attempt=attempt).order_by("-iteration", "-call_index").first()
    return f"{step.tool} (iteration {step.iteration})" if step else ""


def _finish_failed(
    run: MotorRun,
    attempt: Attempt,
    *,
    category: FailureCategory,
    message: str,
    retryable: bool,
    actor: str,
    partial: str = "",
) -> None:
    """Fail attempt and run, emit the signal, release the mutex on commit. Caller holds locks."""
    now = timezone.now()
    failure = {
        "category": category.value,
        "retryable": retryable,
        "message": message,
        "last_step": _last_step_label(attempt),
        "hint": "",
    }
    attempt.fail(failure=failure, at=now)
    attempt.save(
        update_fields=[
            "status",
            "failure",
            "completed_at",
            "pending_question",
            "pending_tool_call_id",
        ]
    )
    result = {"ok": False, "summary": partial, "stats": _stats(run, attempt), "failure": failure}
    previous = run.status
    run.fail(result=result, at=now)
    fields = ["status", "result", "completed_at", "lease_expires_at", "updated_at"]
    if run.current_attempt_index + 1 >= run.max_attempts:
        # No retry can use them any more: the run keeps no credential value.
        run.saved_credentials = ""
        fields.append("saved_credentials")
    run.save(update_fields=fields)
    _event(run, from_status=previous, actor=actor, category=category.value, message=message)
    _signal(
        run,
        {
            "run_id": run.id,
            "status": RunStatus.FAILED,
            "error": {"message": message, "last_step": failure["last_step"]},
            "failure": failure,
            "result": result,
        },
    )
    agent_id, run_id = run.agent_id, run.id
    transaction.on_commit(lambda: mutex_release(agent_id=agent_id, run_id=run_id))
    failure_hint_enqueue(run_id=run.id, attempt_index=attempt.index, category=category.value)


def _pending_calls(attempt: Attempt) -> list[tuple[int, dict[str, Any]]]:
    """(call index, tool call) of the last assistant message that have no tool result yet."""
    messages = attempt.messages
    for position in range(len(messages) - 1, -1, -1):
        message = messages[position]
        if message.get("role") != "assistant":
            continue
        answered = {
            later.get("tool_call_id")
            for later in messages[position + 1 :]
            if later.get("role") == "tool"
        }
        return [
            (index, call)
            for index, call in enumerate(message.get("tool_calls") or [])
            if call["id"] not in answered
        ]
    return []


# --- start ---------------------------------------------------------------------------------------


def _validate_start(
    *,
    task: str,
    tools: Sequence[str],
    allowed_domains: Sequence[str],
    credential_names: Sequence[str],
    max_iterations: int,
    timeout_s: int,
    max_attempts: int,
    trigger: str,
) -> list[str]:
    if not task or not task.strip():
        raise InvalidRunParams("task: must not be empty", field="task")
    if not 1 <= max_iterations <= MAX_ITERATIONS_CEILING:
        raise InvalidRunParams(
            f"max_iterations: {max_iterations} is outside 1..{MAX_ITERATIONS_CEILING}",
            field="max_iterations",
        )
    if not 1 <= timeout_s <= MAX_RUN_TIMEOUT_S:
        raise InvalidRunParams(
            f"timeout_s: {timeout_s} is outside 1..{MAX_RUN_TIMEOUT_S} seconds", field="timeout_s"
        )
    if max_attempts < 1:
        raise InvalidRunParams("max_attempts: must be at least 1", field="max_attempts")
    if trigger not in Trigger.values:
        raise InvalidRunParams(
            f"trigger: {trigger!r} is not one of {', '.join(Trigger.values)}", field="trigger"
        )
    check_allowed_domains(allowed_domains)
    for name in credential_names:
        # Any case is accepted; the run keeps the lower-case form (see run_start).
        if not isinstance(name, str) or not _CREDENTIAL_NAME.match(name.lower()):
            raise InvalidRunParams(
                f"credential_names: {name!r} must match {_CREDENTIAL_NAME.pattern}",
                field="credential_names",
            )
    synthetic = [name for name in tools if name in SYNTHETIC_TOOLS]
    if synthetic:
        raise InvalidRunParams(
            f"tools: {', '.join(synthetic)} is host-side and always available; do not grant it",
            field="tools",
        )
    return expand_granted(list(tools))


def run_start(
    *,
    agent_id: int,
    task: str,
    actor: str,
    tools: Sequence[str] = (),
    allowed_domains: Sequence[str] = (),
    credential_names: Sequence[str] = (),
    workspace: str = "",
    skill_id: int | None = None,
    skill_version_id: int | None = None,
    skill_instructions: str = "",
    max_iterations: int = DEFAULT_MAX_ITERATIONS,
    timeout_s: int = MAX_RUN_TIMEOUT_S,
    approval_required: bool = False,
    trigger: str = Trigger.API,
    parent_run_id: str | None = None,
    max_attempts: int = 3,
    review: bool = False,
) -> RunStarted:
    """Create a run in `created` and enqueue its first slice on commit.

    `review=True` starts a skill review run: only read, list, glob and grep (the default when no
    tools are given), no domains, no credentials, no host-side tools, at most 10 iterations and
    a single attempt.

    Raises MotorBusy (naming the active run) when the agent already has an active run,
    InvalidRunParams for a parameter that breaks a rule. Either way nothing is created.
    """
    granted = _validate_start(
        task=task,
        tools=tools,
        allowed_domains=allowed_domains,
        credential_names=credential_names,
        max_iterations=max_iterations,
        timeout_s=timeout_s,
        max_attempts=max_attempts,
        trigger=trigger,
    )
    try:
        workspace = check_run_workspace(workspace)
    except NotAProjectWorkspace as exc:
        raise InvalidRunParams(str(exc), field="workspace", rule=WORKSPACE_RULE) from None
    if review:
        granted = granted or list(REVIEW_TOOLS)
        extra = [name for name in granted if name not in REVIEW_TOOLS]
        if extra:
            raise InvalidRunParams(
                f"tools: a review run may use only {', '.join(REVIEW_TOOLS)}, not "
                f"{', '.join(extra)}",
                field="tools",
            )
        if allowed_domains or credential_names:
            raise InvalidRunParams(
                "allowed_domains/credential_names: a review run has no network and no credentials",
                field="allowed_domains",
            )
        if max_iterations > REVIEW_MAX_ITERATIONS:
            max_iterations = REVIEW_MAX_ITERATIONS
        max_attempts = 1
    agents = apps.get_model("cognition", "Agent").objects
    if transaction.get_connection().in_atomic_block and not agents.filter(pk=agent_id).exists():
        # In a caller's transaction the agent's foreign key is only checked at its commit.
        raise InvalidRunParams(f"agent_id: no agent with id {agent_id}", field="agent_id")
    run_id = new_run_id()
    reserved = mutex_reserve(agent_id=agent_id, run_id=run_id)  # raises MotorBusy
    try:
        run = MotorRun(
            id=run_id,
            agent_id=agent_id,
            task=task,
            tools=granted,
            allowed_domains=list(allowed_domains),
            credential_names=list(dict.fromkeys(n.lower() for n in credential_names)),
            workspace=workspace,
            skill_id=skill_id,
            skill_version_id=skill_version_id,
            skill_instructions=skill_instructions,
            max_iterations=max_iterations,
            timeout_s=timeout_s,
            approval_required=approval_required,
            trigger=trigger,
            parent_run_id=parent_run_id,
            max_attempts=max_attempts,
            review=review,
            idle_since=timezone.now(),
        )
        attempt = Attempt(
            run=run,
            index=0,
            max_iterations=max_iterations,
            messages=[{"role": "user", "content": task}],
        )
        event = RunEvent(run=run, from_status="", to_status=run.status, actor=actor, detail={})
        ahead = FirstCallAhead.inputs(run)
        # The first message goes out with the insert (see ledger_insert), whose foreign key
        # checks that the agent exists; the fast-path key is extended once it committed.
        ledger_insert(
            run, attempt, event, announce=lambda: wake_up(run_id, 0, ahead, remember=False)
        )
        transaction.on_commit(lambda: mutex_hold(agent_id=agent_id, run_id=run_id))
    except IntegrityError as exc:
        if reserved:
            mutex_release(agent_id=agent_id, run_id=run_id)
        if _ACTIVE_CONSTRAINT not in str(exc):
            if not agents.filter(pk=agent_id).exists():
                raise InvalidRunParams(
                    f"agent_id: no agent with id {agent_id}", field="agent_id"
                ) from None
            raise
        # The database is the authority: name the run it holds, and repair the fast path.
        active = (
            MotorRun.objects.filter(agent_id=agent_id, status__in=ACTIVE_STATUSES)
            .values_list("id", flat=True)
            .first()
        )
        if active is None:  # it finished in the meantime; the caller may simply try again
            raise MotorBusy(run_id="(finished just now)") from None
        mutex_hold(agent_id=agent_id, run_id=active)
        raise MotorBusy(run_id=active) from None
    except BaseException:
        if reserved:
            mutex_release(agent_id=agent_id, run_id=run_id)
        raise
    return {"run_id": run_id, "status": RunStatus.CREATED}


# --- one slice of the loop -----------------------------------------------------------------------


def run_step(
    *,
    run_id: str,
    expected_token: int | None = None,
    owner: str | None = None,
    client: openai.OpenAI | None = None,
    credentials: Callable[[MotorRun], dict[str, str]] | None = None,
    ahead: dict[str, Any] | None = None,
) -> SliceOutcome:
    """Advance `run_id` by one slice: iterations (one LLM call and the tool calls it asks for)
    until the run pauses or ends, or MOTOR_SLICE_SECONDS have passed.

    `ahead` (a new run's first message carries it, see `FirstCallAhead`) lets the first LLM
    request go out while the run is claimed; its answer is used only if the claimed run asks
    exactly that request.

    Safe to call any number of times for the same run (redelivery, duplicates): the lease lets
    one slice write, and the Step ledger means a recorded tool call never runs again.
    `expected_token` is the lease token a wake-up message was sent for; a message that was
    already served (the token moved on and was released) is dropped, so duplicates never fork
    the chain of slices.

    No database connection is held while the LLM answers or a tool runs: the slice returns its
    connection (to the pool, see settings.DATABASES) before each wait and takes one again for
    its next fenced write.
    """
    owner = owner or default_owner()
    early = FirstCallAhead.start(ahead, client) if ahead and expected_token == 0 else None
    actor = f"worker:{owner}"
    try:
        _close_sessions_of_finished_runs(current=run_id)
        # The claim, for a new run its start, and the reads of the run and its attempt: one write.
        claimed = ledger_claim(
            run_id=run_id, owner=owner, expected_token=expected_token, actor=actor
        ) or ledger_take_over(
            run_id=run_id, owner=owner, expected_token=expected_token, actor=actor
        )
        exists = claimed is not None or MotorRun.objects.filter(pk=run_id).exists()
    except DATABASE_UNAVAILABLE as exc:
        if early is not None:
            early.drop()
        slice_after_database_loss(run_id=run_id, owner=owner, error=exc)
        return SliceOutcome.DATABASE_LOST
    if claimed is None:
        if early is not None:
            early.drop()
        return SliceOutcome.LEASE_BUSY if exists else SliceOutcome.NOT_RUNNABLE
    lease, run, attempt = claimed
    outcome: SliceOutcome | None = None
    try:
        # one resolution per slice: the missing-credential check, the reply's redaction and each
        # tool call all need the same values
        resolve = _resolved_once(credentials or _resolve_credentials)
        outcome = _run_slice(
            lease, run, attempt, owner=owner, client=client, credentials=resolve, early=early
        )
        return outcome
    except DATABASE_UNAVAILABLE as exc:
        # Transient: end the slice cleanly, the run goes on (runs.db_outage).
        slice_after_database_loss(run_id=run_id, owner=owner, error=exc)
        return SliceOutcome.DATABASE_LOST
    finally:
        if early is not None:
            early.drop()
        # The session stays warm while the run goes on (or waits for an answer); it ends with
        # the run, when this slice lost the lease, and when the slice failed unexpectedly.
        if outcome not in (SliceOutcome.CONTINUED, SliceOutcome.PAUSED):
            run_session_close(run_id)
        else:
            # Keep (or, after a Redis flush, re-create) the fast-path key of the active run.
            mutex_hold(agent_id=run.agent_id, run_id=run_id)


#: seconds between two sweeps of this process's sessions for runs that ended elsewhere
_SESSION_SWEEP_INTERVAL_S = 5.0
_last_session_sweep = 0.0


def _close_sessions_of_finished_runs(*, current: str) -> None:
    """Close this process's sessions of runs that ended elsewhere (cancelled, timed out).

    The session of `current` is judged by its own slice; the others at most every few seconds
    (and by the registry's idle timeout in any case), so a busy worker does not pay a query on
    every slice.
    """
    global _last_session_sweep
    open_ids = [run_id for run_id in open_run_sessions() if run_id != current]
    now = time.monotonic()
    if not open_ids or now - _last_session_sweep < _SESSION_SWEEP_INTERVAL_S:
        return
    _last_session_sweep = now
    ended = MotorRun.objects.filter(pk__in=open_ids).exclude(status__in=ACTIVE_STATUSES)
    for ended_id in ended.values_list("id", flat=True):
        run_session_close(ended_id)


def _run_slice(
    lease: Lease,
    run: MotorRun,
    attempt: Attempt,
    *,
    owner: str,
    client: openai.OpenAI | None,
    credentials: Callable[[MotorRun], dict[str, str]] | None,
    early: FirstCallAhead | None = None,
) -> SliceOutcome:
    """One slice on the claimed `run` and its current `attempt` (as the claim returned them).

    The run and its attempt are read once; every later write goes through `lease_fence`, so the
    in-memory copies stay what the database holds: whoever else changes them (cancel, time-out,
    take-over) moves the token first, and this slice then writes nothing more.
    """
    actor = f"worker:{owner}"
    run_id = run.id
    slot: SandboxSlot | None = None
    try:
        if run.status != RunStatus.RUNNING:
            lease_release(lease)
            return SliceOutcome.NOT_RUNNABLE
        limit = int(getattr(settings, "MOTOR_MAX_REDELIVERIES", 3))
        # The claim counted this slice; the count before it is how many slices never ended.
        unfinished = run.redelivery_count - 1
        if unfinished >= limit:
            return _fail_locked(
                lease,
                run,
                attempt,
                category=FailureCategory.TOOL_FAILURE,
                message=f"a step ended its worker {unfinished} times in a row",
                retryable=False,
                actor=actor,
            )
        # time paused for a human (waited_s) is not part of the run's budget
        deadline = (run.started_at or run.created_at).timestamp() + run.timeout_s + run.waited_s
        if time.time() > deadline:
            return _fail_timeout(lease, run, attempt, actor=actor)
        if run.credential_names:
            missing = _missing_credentials(run, credentials)
            if missing:
                with transaction.atomic():
                    lease_fence(lease)
                    return _pause_for_credentials(run, attempt, lease, missing, actor=actor)

        slot = SandboxSlot(
            run_id=run.id, workspace=run.workspace, allowed_domains=run.allowed_domains
        )
        # The slice goes on, iteration after iteration, while its time budget lasts, so one run
        # does not hold a worker thread from the runs queued behind it.
        slice_ends_at = time.monotonic() + slice_seconds()
        # Bounded: every pass records an LLM reply (capped by max_iterations) or returns.
        for _ in range(MAX_ITERATIONS_CEILING + 2):
            outcome = _run_iteration(
                lease,
                run,
                attempt,
                slot=slot,
                client=client,
                credentials=credentials,
                actor=actor,
                slice_ends_at=slice_ends_at,
                early=early,
            )
            early = None  # only ever the slice's first LLM call
            if outcome is not None:
                return outcome
            if time.time() > deadline:
                return _fail_timeout(lease, run, attempt, actor=actor)
        with transaction.atomic():
            _end_slice(lease)
        return SliceOutcome.CONTINUED
    except LeaseLost:
        logger.info("run %s: lease lost by %s; stopping this slice", run_id, owner)
        return SliceOutcome.LEASE_LOST
    except CredentialResolverFailed as exc:
        try:
            return _fail_locked(
                lease,
                run,
                attempt,
                category=FailureCategory.TOOL_FAILURE,
                message=exc.message,
                retryable=True,
                actor=actor,
            )
        except LeaseLost:
            return SliceOutcome.LEASE_LOST
    finally:
        if slot is not None:
            slot.close()


def _fail_timeout(lease: Lease, run: MotorRun, attempt: Attempt, *, actor: str) -> SliceOutcome:
    return _fail_locked(
        lease,
        run,
        attempt,
        category=FailureCategory.TIMEOUT,
        message=f"the run exceeded its timeout of {run.timeout_s} s",
        retryable=True,
        actor=actor,
    )


def slice_seconds() -> float:
    """How long one slice may keep advancing its run before it hands over (MOTOR_SLICE_SECONDS).

    Checked before each further iteration: a slice always makes one, and starts another only
    while it has been running for less than this. 0 makes every slice one iteration.
    """
    return float(getattr(settings, "MOTOR_SLICE_SECONDS", 10.0))


def _run_iteration(
    lease: Lease,
    run: MotorRun,
    attempt: Attempt,
    *,
    slot: SandboxSlot,
    client: openai.OpenAI | None,
    credentials: Callable[[MotorRun], dict[str, str]] | None,
    actor: str,
    slice_ends_at: float,
    early: FirstCallAhead | None = None,
) -> SliceOutcome | None:
    """One iteration of the loop: the LLM call when no requested call is pending, then the
    pending tool calls in order. None: the iteration is recorded and the slice may go on.
    `early`: that LLM call, made ahead of the claim, used if it is the one this run asks.

    Once the slice's time is up (`slice_ends_at`, time.monotonic()) when the iteration's last
    result is recorded, that same commit releases the lease and queues the next slice, and the
    outcome is CONTINUED.
    """
    pending = _pending_calls(attempt)
    # Model and reasoning are known for calls requested in this iteration; calls resumed from
    # an earlier slice keep what their intent row already says.
    model, reasoning = "", ""
    fresh = False
    recorded: Step | None = None  # the first call's intent, written with the reply
    if _final_reply(attempt) is not None:
        # The model already answered; a crash hit the finishing steps. Finish again.
        return _finish_completed(lease, run, attempt, actor=actor)
    if not pending:
        if attempt.iteration >= attempt.max_iterations:
            return _fail_budget(lease, run, attempt, actor=actor)
        # A run granted sandbox tools gets its session while the model thinks: the first call
        # then finds it open instead of waiting for the sandbox to start. It starts once the
        # request is out: starting a sandbox forks this process, which would otherwise hold up
        # the request's own work (the interpreter lock) by milliseconds.
        release_db_connection()
        reply = early.take(run, attempt) if early is not None else None
        if reply is not None:
            if run.tools:
                slot.prewarm()
        else:
            reply = _call_llm(run, attempt, client, on_sent=slot.prewarm if run.tools else None)
        if isinstance(reply, LLMUnavailable):
            return _fail_locked(
                lease,
                run,
                attempt,
                category=FailureCategory.MODEL_FAILURE,
                message=reply.message,
                retryable=True,
                actor=actor,
            )
        outcome, recorded = _record_reply(
            lease, run, attempt, reply, actor=actor, credentials=credentials
        )
        if outcome is not None:
            return outcome
        # The stored message, with any credential value already replaced by its placeholder.
        model, reasoning = reply.model, str(attempt.messages[-1].get("content") or "")
        pending = _pending_calls(attempt)
        fresh = True  # this iteration is new: none of its calls has a Step row yet

    for position, (call_index, call) in enumerate(pending):
        outcome = _perform_call(
            lease,
            run,
            attempt,
            call_index=call_index,
            call=call,
            fresh=fresh,
            recorded=recorded if position == 0 else None,
            last=position == len(pending) - 1,
            slice_ends_at=slice_ends_at,
            slot=slot,
            credentials=credentials,
            actor=actor,
            model=model,
            reasoning=reasoning,
        )
        if outcome is not None:
            return outcome
    if time.monotonic() >= slice_ends_at:
        with transaction.atomic():
            _end_slice(lease)
        return SliceOutcome.CONTINUED
    return None


def _llm_request(
    run: MotorRun, attempt: Attempt
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The messages and tool schemas of the run's next LLM call."""
    # The oldest iterations of a long attempt go to the system prompt as a digest, older tool
    # results are shortened; the attempt keeps every message in full.
    progress, recent = roll_up(attempt.messages)
    system = build_system_prompt(
        task=run.task,
        granted_tools=run.tools,
        skill_instructions=run.skill_instructions,
        recovery_context=attempt.recovery_context,
        progress_summary=progress,
        may_write_skill=_save_offered(run) and not WRITING_TOOLS.isdisjoint(run.tools),
    )
    messages = [{"role": "system", "content": system}, *compact_messages(recent)]
    tools = offered_schemas(run.tools, synthetic=not run.review, save_credential=_save_offered(run))
    return messages, tools


def _call_llm(
    run: MotorRun,
    attempt: Attempt,
    client: openai.OpenAI | None,
    *,
    on_sent: Callable[[], None] | None = None,
) -> LLMReply | LLMUnavailable:
    messages, tools = _llm_request(run, attempt)
    return _chat(messages, tools, client, on_sent=on_sent)


def _chat(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    client: openai.OpenAI | None,
    *,
    on_sent: Callable[[], None] | None = None,
) -> LLMReply | LLMUnavailable:
    try:
        return llm_chat(
            client=client or _default_client(),
            messages=messages,
            tools=tools,
            role=ModelRole.MOTOR,
            on_sent=on_sent,
        )
    except LLMUnavailable as exc:
        return exc


#: characters of task and skill instructions above which a new run's first message does not
#: carry them (its first LLM request then waits for the claim)
FIRST_CALL_AHEAD_MAX_CHARS = 32_000
#: helper threads per worker process sending first requests ahead (one waits out a request)
FIRST_CALL_AHEAD_THREADS = 16


class FirstCallAhead:
    """A new run's first LLM request, sent while the worker claims the run.

    The first message of a run (token 0) carries what that request is made of — the task, the
    granted tools, the skill instructions and what decides the offered tools; never a credential,
    and not at all for runs with credentials, whose first step may be to ask for them. The
    worker sends the request from a helper thread and claims the run meanwhile; the slice then
    uses the answer only if the claimed run's next request is exactly that one (a run that was
    cancelled, or whose message came again after it moved on, asks something else or nothing),
    and otherwise drops it and asks the model itself. The cost of a drop is one unused LLM call.
    """

    _pool: ThreadPoolExecutor | None = None
    _pool_lock = threading.Lock()

    def __init__(self, request: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> None:
        self.request = request
        self.future: Future[LLMReply | LLMUnavailable] | None = None

    @staticmethod
    def inputs(run: MotorRun) -> dict[str, Any] | None:
        """What the first message of the new `run` carries, or None (see the class)."""
        if (
            run.credential_names
            or len(run.task) + len(run.skill_instructions) > FIRST_CALL_AHEAD_MAX_CHARS
        ):
            return None
        return {
            "task": run.task,
            "tools": list(run.tools),
            "skill_instructions": run.skill_instructions,
            "review": run.review,
            "skill_id": run.skill_id,
            "workspace": run.workspace,
        }

    @classmethod
    def start(cls, ahead: dict[str, Any], client: openai.OpenAI | None) -> FirstCallAhead | None:
        """Send the request `ahead` describes from a helper thread; None if it is malformed."""
        try:
            run = MotorRun(
                task=str(ahead["task"]),
                tools=[str(name) for name in ahead["tools"]],
                skill_instructions=str(ahead["skill_instructions"]),
                review=bool(ahead["review"]),
                skill_id=ahead["skill_id"],
                workspace=str(ahead["workspace"]),
            )
        except (KeyError, TypeError):
            logger.warning("a run's first message carried a malformed first request; ignored")
            return None
        attempt = Attempt(messages=[{"role": "user", "content": run.task}])
        early = cls(_llm_request(run, attempt))
        early.future = cls._executor().submit(_chat, *early.request, client)
        return early

    @classmethod
    def _executor(cls) -> ThreadPoolExecutor:
        with cls._pool_lock:
            if cls._pool is None:
                cls._pool = ThreadPoolExecutor(
                    max_workers=FIRST_CALL_AHEAD_THREADS, thread_name_prefix="motor-first-call"
                )
            return cls._pool

    @classmethod
    def warm(cls) -> None:
        """Start a helper thread now, not on the first run's time."""
        cls._executor().submit(int)

    @classmethod
    def _forget_pool(cls) -> None:
        """In a forked child (a prefork pool process): the parent's helper threads do not exist
        here, and its executor would count them as idle and never start one."""
        cls._pool = None
        cls._pool_lock = threading.Lock()

    def take(self, run: MotorRun, attempt: Attempt) -> LLMReply | LLMUnavailable | None:
        """The answer, if the request sent ahead is the one `run` asks now; else None (dropped)."""
        future, self.future = self.future, None
        if future is None:
            return None
        if future.cancel():  # its thread had not even started: asking now is no slower
            return None
        if _llm_request(run, attempt) != self.request:
            return None
        return future.result()

    def drop(self) -> None:
        """Give the request up: one not started yet is cancelled; one already sent finishes in
        its thread (a worker's shutdown waits for it, as for the slice that sent it) and its
        answer is lost."""
        future, self.future = self.future, None
        if future is not None:
            future.cancel()


_client_cache: dict[str, openai.OpenAI] = {}


def _end_slice(lease: Lease) -> None:
    """Release the lease (the slice reached its end) and queue the next slice on commit.

    Inside `transaction.atomic()`; raises LeaseLost when the lease is no longer this slice's.
    """
    if not lease_release(lease, slice_done=True):
        raise LeaseLost(
            f"run {lease.run_id}: fencing token {lease.token} is stale; the slice ends",
            run_id=lease.run_id,
            token=lease.token,
        )
    run_id, token = lease.run_id, lease.token
    transaction.on_commit(lambda: _enqueue_step(run_id, token))


def runtime_warm() -> None:
    """Load now what a worker process's first slice would otherwise load on a run's time: the
    sandbox's tool registry with its shell parser, and the LLM client with its HTTP stack and
    TLS context (about a quarter of a second of CPU per process, measured in bench part 3)."""
    import sandbox.tools as sandbox_tools

    sandbox_tools.tool_schemas(list(sandbox_tools.TOOL_NAMES))
    _default_client()
    FirstCallAhead.warm()


os.register_at_fork(after_in_child=FirstCallAhead._forget_pool)


def _default_client() -> openai.OpenAI:
    key = f"{settings.LLM_BASE_URL}|{settings.LLM_API_KEY}"
    if key not in _client_cache:
        _client_cache.clear()
        _client_cache[key] = llm_client()
    return _client_cache[key]


def _fail_budget(lease: Lease, run: MotorRun, attempt: Attempt, *, actor: str) -> SliceOutcome:
    with transaction.atomic():
        lease_fence(lease)
        partial = next(
            (
                str(message.get("content") or "")
                for message in reversed(attempt.messages)
                if message.get("role") == "assistant" and message.get("content")
            ),
            "",
        )
        _finish_failed(
            run,
            attempt,
            category=FailureCategory.BUDGET_EXHAUSTED,
            message=f"the iteration cap of {attempt.max_iterations} was reached",
            retryable=True,
            actor=actor,
            partial=partial,
        )
    return SliceOutcome.FINISHED


def _fail_locked(
    lease: Lease,
    run: MotorRun,
    attempt: Attempt,
    *,
    category: FailureCategory,
    message: str,
    retryable: bool,
    actor: str,
) -> SliceOutcome:
    with transaction.atomic():
        lease_fence(lease)
        _finish_failed(
            run, attempt, category=category, message=message, retryable=retryable, actor=actor
        )
    return SliceOutcome.FINISHED


def _record_reply(
    lease: Lease,
    run: MotorRun,
    attempt: Attempt,
    reply: LLMReply,
    *,
    actor: str,
    credentials: Callable[[MotorRun], dict[str, str]] | None = None,
) -> tuple[SliceOutcome | None, Step | None]:
    """Store the assistant message; finish the run when it asked for no tool call.

    When its first call can run at once (`_runs_at_once`), that call's intent is written with
    the message, and returned: the call may start.

    Credential values never reach the stored message: the value of a save_credential call is
    moved into the run's encrypted store (when its name is in scope) and replaced by its
    placeholder, and every value the run knows is replaced wherever the model repeated it.
    """
    message = reply.as_message()
    known = {**(credentials or _resolve_credentials)(run), **saved_values(run)}
    intercepted: dict[str, str] = {}
    for call in message.get("tool_calls") or []:
        function = call["function"]
        if function["name"] != SAVE_CREDENTIAL:
            continue
        parsed = intercept_save_call(str(function.get("arguments") or ""))
        if parsed is None:
            function["arguments"] = scrub_unparsable_save_call(str(function.get("arguments") or ""))
            continue
        name, value, redacted = parsed
        function["arguments"] = redacted
        # Out of scope: the value is dropped here; the call is answered "denied" later.
        if _save_offered(run) and _save_denial(run, name) is None:
            intercepted[name] = value
        else:
            known.setdefault(name, value)
    if intercepted:
        with transaction.atomic():
            lease_fence(lease)
            store_saved(run, intercepted)
            MotorRun.objects.filter(pk=run.pk).update(saved_credentials=run.saved_credentials)
            known.update(intercepted)
            attempt.iteration += 1
            attempt.messages = [*attempt.messages, redact(message, known)]
            attempt.save(update_fields=["iteration", "messages"])
        intent = None
    else:
        stored = redact(message, known)
        intent = _first_intent(lease, run, attempt, stored, model=reply.model)
        if intent is not None:
            # the reply and this intent are written together: there is no moment between them
            crash_point("before_step")
        ledger_record_reply(lease, attempt, stored, intent=intent)
    if reply.tool_calls:
        return None, intent
    return _finish_completed(lease, run, attempt, actor=actor), None


def _runs_at_once(run: MotorRun, name: str, arguments: dict[str, Any] | None) -> bool:
    """A granted call with arguments that parse, and nothing to decide before it runs."""
    return (
        arguments is not None
        and name in run.tools
        and not (
            run.approval_required
            and needs_approval(name, arguments, network_enabled=bool(run.allowed_domains))
        )
    )


def _first_intent(
    lease: Lease, run: MotorRun, attempt: Attempt, stored: dict[str, Any], *, model: str
) -> Step | None:
    """The intent of the first call of the reply `stored` (as it will be stored), when that call
    can run at once; None otherwise (it then goes through `_perform_call`'s general path)."""
    calls = stored.get("tool_calls") or []
    if not calls:
        return None
    call = calls[0]
    name = str(call["function"]["name"])
    raw_arguments = str(call["function"].get("arguments") or "{}")
    arguments = parse_arguments(raw_arguments)
    if not _runs_at_once(run, name, arguments):
        return None
    reasoning = str(stored.get("content") or "")
    return _intent_step(
        lease,
        attempt,
        0,
        call,
        name,
        arguments,
        raw_arguments,
        model,
        reasoning,
        next_iteration=True,
    )


def _save_offered(run: MotorRun) -> bool:
    """save_credential is offered to skill runs and to runs that may create a skill."""
    return not run.review and (run.skill_id is not None or bool(run.workspace))


def _skill_policy(run: MotorRun) -> Any:
    from skills.models import Policy

    return Policy.objects.filter(skill_id=run.skill_id, agent_id=run.agent_id).first()


def _save_denial(run: MotorRun, name: str) -> str | None:
    """Why `name` may not be saved by this run (seed 001 scope rules), or None when it may."""
    if not _SAVED_CREDENTIAL_NAME.match(name):
        return (
            f"credential name {name!r} must be an environment variable name "
            f"({_SAVED_CREDENTIAL_NAME.pattern})"
        )
    if run.skill_id is None:
        return None  # a new skill: kept as pending until extraction
    policy = _skill_policy(run)
    required = list(policy.required_credentials) if policy is not None else []
    if not required:
        return "this skill declares no required credentials, so it may not save any"
    if name not in required:
        return f"{name!r} is not among this skill's required credentials ({', '.join(required)})"
    return None


def _final_reply(attempt: Attempt) -> str | None:
    """The closing text when the attempt's last message is an answer without tool calls."""
    if attempt.status != AttemptStatus.RUNNING or len(attempt.messages) < 2:
        return None
    last = attempt.messages[-1]
    if last.get("role") != "assistant" or last.get("tool_calls"):
        return None
    return str(last.get("content") or "")


def _finish_completed(lease: Lease, run: MotorRun, attempt: Attempt, *, actor: str) -> SliceOutcome:
    """After the final answer: extract skills, keep artifacts, then complete and signal.

    Each stage is recorded before the next starts, so a crash between any two of them resumes
    at the first unfinished one: the extraction result is stored on the run (still running)
    before completion; completion, the signal and the Redis release (on commit) come last, and
    a lost release is repaired by the next start (the key names a finished run).
    """
    stored = (run.result or {}).get("skills")
    if stored is None:
        skills = _extract_skills(run)
        with transaction.atomic():
            lease_fence(lease, result={"skills": skills})
    else:
        skills = stored
    files, omitted = artifacts_gather(run)  # copies files: outside the transaction
    with transaction.atomic():
        lease_fence(lease)
        now = timezone.now()
        attempt.complete(at=now)
        attempt.save(update_fields=["status", "completed_at"])
        result = {
            "ok": True,
            "summary": _final_reply_text(attempt),
            "stats": _stats(run, attempt),
            "skills": skills,
            "artifacts": artifacts_record(run, files),
            "artifacts_omitted": omitted,
        }
        previous = run.status
        run.complete(result=result, at=now)
        # Extraction took what it needed; the run keeps no credential value once it is over.
        run.saved_credentials = ""
        run.redelivery_count = 0
        run.save(
            update_fields=[
                "status",
                "result",
                "completed_at",
                "lease_expires_at",
                "saved_credentials",
                "redelivery_count",
                "updated_at",
            ]
        )
        _event(run, from_status=previous, actor=actor)
        _signal(run, {"run_id": run.id, "status": RunStatus.COMPLETED, "result": result})
        agent_id, run_id = run.agent_id, run.id
        transaction.on_commit(lambda: mutex_release(agent_id=agent_id, run_id=run_id))
    return SliceOutcome.FINISHED


def _final_reply_text(attempt: Attempt) -> str:
    last = attempt.messages[-1] if attempt.messages else {}
    return str(last.get("content") or "") if last.get("role") == "assistant" else ""


def _extract_skills(run: MotorRun) -> dict[str, Any]:
    """Post-run extraction of created or changed skills in the workspace into the skill store."""
    empty: dict[str, Any] = {"created": [], "updated": [], "unchanged": [], "failed": []}
    if not run.workspace or run.review or not Path(run.workspace).is_dir():
        return empty
    if not getattr(settings, "MOTOR_EXTRACT_SKILLS", True):
        return empty
    from skills.errors import SkillError
    from skills.services import skills_extract_from_workspace

    try:
        pending = saved_values(run) if run.skill_id is None else {}
        return dict(
            skills_extract_from_workspace(
                workspace=Path(run.workspace),
                run_id=run.id,
                agent=run.agent,
                pending_credentials=pending or None,
            )
        )
    except SkillError as exc:
        return {**empty, "failed": [{"name": ".", "reason": exc.message}]}


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


def _save_credential(run: MotorRun, arguments: dict[str, Any]) -> dict[str, Any]:
    """Apply a save_credential call whose value was moved to the run's store. Caller holds locks.

    For a skill run the value goes into that skill policy's credential values (in this
    transaction); for any other run it stays in the run's encrypted store until extraction.
    """
    if not _save_offered(run):
        return envelope(
            ok=False,
            output="save_credential is only available to skill runs and runs that create a skill",
            error_code="denied",
        )
    name = arguments.get("name")
    if not isinstance(name, str) or arguments.get("value") != placeholder(name):
        return envelope(
            ok=False,
            output="save_credential needs 'name' (string) and a non-empty 'value' (string)",
            error_code="invalid_args",
        )
    denial = _save_denial(run, name)
    if denial is not None:
        return envelope(ok=False, output=f"save_credential denied: {denial}", error_code="denied")
    values = saved_values(run)
    if name not in values:  # pragma: no cover - the value is stored when the reply is recorded
        return envelope(ok=False, output="the value was not received", error_code="invalid_args")
    if run.skill_id is not None:
        from skills.errors import SkillError
        from skills.services import Actor, policy_update

        try:
            policy_update(
                policy=_skill_policy(run).pk,
                actor=Actor.system(f"run {run.id}"),
                set_credentials={name: values[name]},
                reason=f"saved by motor run {run.id}",
            )
        except SkillError as exc:
            return envelope(ok=False, output=f"save_credential failed: {exc}", error_code="denied")
        where = "in the skill's policy"
    else:
        where = "for the skill this run creates (stored when it is extracted)"
    return envelope(
        ok=True,
        output=(
            f"Saved {placeholder(name)} {where}. Use the placeholder {placeholder(name)}; "
            f"code, bash and fetch also get it as the environment variable {name}."
        ),
    )


def _execute_and_record(
    lease: Lease,
    run: MotorRun,
    attempt: Attempt,
    step: Step,
    name: str,
    arguments: dict[str, Any],
    slot: SandboxSlot,
    credentials: Callable[[MotorRun], dict[str, str]] | None,
    actor: str,
    *,
    last: bool = False,
    slice_ends_at: float = 0.0,
) -> SliceOutcome | None:
    """The side effect itself (outside any transaction), then its fenced record.

    When the call is the iteration's `last`, the run goes on and the slice's time is up
    (`slice_ends_at`), the same commit also ends the slice: the lease is released and the next
    slice is queued once it is durable.
    """
    crash_point("after_intent")
    started = time.monotonic()
    values = {**(credentials or _resolve_credentials)(run), **saved_values(run)}
    release_db_connection()
    # A cancel (or any newer claim) moves the token; the watch then kills the running call.
    with CallWatch(run_id=lease.run_id, token=lease.token):
        # a transient failure of an idempotent call is retried once before the model sees it
        result = execute_retrying_transient(
            lambda: slot.execute(name=name, arguments=arguments, credentials=values),
            name=name,
            arguments=arguments,
            network_enabled=bool(run.allowed_domains),
        )
    # The sandbox already redacts what it was given; this also covers the file tools.
    result = redact(result, values)
    result["duration_ms"] = result.get("duration_ms") or int((time.monotonic() - started) * 1000)
    crash_point("after_execution")

    ends_slice = last and time.monotonic() >= slice_ends_at
    outcome: SliceOutcome | None = None
    if result.get("ok"):
        # No bailout to weigh: the result (and, at the slice's end, the release) is one write.
        ledger_record_result(
            lease, attempt, step, result, _tool_message(step, result), release=ends_slice
        )
        if ends_slice:
            outcome = SliceOutcome.CONTINUED
            run_id, token = lease.run_id, lease.token
            transaction.on_commit(lambda: _enqueue_step(run_id, token))
    else:
        with transaction.atomic():
            # A recorded result is progress: the slices counted as unfinished start again at 0.
            lease_fence(lease, redelivery_count=0)
            _complete_step(run, attempt, step, result)
            outcome = _after_result(run, attempt, name, result, actor=actor)
            if outcome is None and ends_slice:
                _end_slice(lease)
                outcome = SliceOutcome.CONTINUED
    crash_point("after_commit")
    return outcome


def _is_sandbox_call(run: MotorRun, name: str, arguments: dict[str, Any] | None) -> bool:
    return name in run.tools and arguments is not None


def _usable_approval(run: MotorRun, step: Step) -> ApprovalRequest | None:
    """The consumed, not yet used approval bound to this step and its exact call, if any."""
    approval = (
        ApprovalRequest.objects.select_for_update()
        .filter(run=run, step=step, status=ApprovalStatus.CONSUMED, used_at__isnull=True)
        .first()
    )
    if approval is None or step.tool == REQUEST_APPROVAL:
        return None
    if approval.action_hash != action_hash(step.tool, step.arguments):
        return None
    return approval


def _unused_approval(run: MotorRun, hash_: str) -> ApprovalRequest | None:
    return (
        ApprovalRequest.objects.select_for_update()
        .filter(run=run, status=ApprovalStatus.CONSUMED, used_at__isnull=True, action_hash=hash_)
        .order_by("id")
        .first()
    )


def _approval_proposal(run: MotorRun, arguments: dict[str, Any] | None) -> dict[str, Any]:
    """{tool, arguments, summary} of a request_approval call, or an error envelope."""
    arguments = arguments or {}
    tool, proposed, reason = (
        arguments.get("tool"),
        arguments.get("arguments"),
        arguments.get("reason"),
    )
    if not isinstance(tool, str) or not isinstance(proposed, dict) or not reason:
        return envelope(
            ok=False,
            output="request_approval needs 'tool' (string), 'arguments' (object) and 'reason'",
            error_code="invalid_args",
        )
    if tool not in run.tools:
        return envelope(
            ok=False,
            output=f"tool {tool!r} is not granted to this run; there is nothing to approve",
            error_code="denied",
        )
    return {"tool": tool, "arguments": proposed, "summary": str(reason)}


def _pause_for_approval(
    run: MotorRun,
    attempt: Attempt,
    lease: Lease,
    *,
    step: Step,
    tool: str,
    arguments: dict[str, Any],
    summary: str,
    actor: str,
) -> SliceOutcome:
    """Write the approval request, pause run and attempt, signal the owner. Caller holds locks."""
    ttl = int(getattr(settings, "MOTOR_APPROVAL_TTL_SECONDS", 15 * 60))
    approval = ApprovalRequest.objects.create(
        run=run,
        step=step,
        action_hash=action_hash(tool, arguments),
        action={"tool": tool, "arguments": arguments},
        summary=summary,
        expires_at=timezone.now() + timedelta(seconds=ttl),
    )
    previous = run.status
    attempt.await_approval(tool_call_id=step.tool_call_id)
    attempt.save(update_fields=["status", "pending_tool_call_id"])
    run.await_approval()
    run.save(update_fields=["status", "updated_at"])
    lease_release(lease, slice_done=True)
    _event(run, from_status=previous, actor=actor, approval=approval.pk)
    _signal(
        run,
        {
            "run_id": run.id,
            "status": RunStatus.AWAITING_APPROVAL,
            "approval": {
                "id": approval.pk,
                "tool": tool,
                "arguments": arguments,
                "summary": summary,
                "action_hash": approval.action_hash,
                "expires_at": approval.expires_at.isoformat(),
            },
        },
    )
    return SliceOutcome.PAUSED


def _resolve_credentials(run: MotorRun) -> dict[str, str]:
    """Values of the run's credential names, from the resolver named in settings.

    The runtime knows no vault: the brain side registers a callable
    ``resolver(*, agent_id: int, run_id: str, names: list[str]) -> dict[str, str]`` as
    MOTOR_CREDENTIAL_RESOLVER (a dotted path). A name it has no value for is left out (the run
    then waits for it, see `_missing_credentials`). Values live only in this process's memory
    for the one call; they are never stored, logged or sent to the model.

    Raises CredentialResolverFailed (naming the resolver and the error type, never a value)
    when the resolver cannot be imported, raises, or returns something else than a mapping of
    strings.
    """
    path = getattr(settings, "MOTOR_CREDENTIAL_RESOLVER", "")
    if not run.credential_names or not path:
        return {}
    try:
        resolver = import_string(path)
        values = resolver(agent_id=run.agent_id, run_id=run.id, names=list(run.credential_names))
        values = dict(values)
    except DATABASE_UNAVAILABLE:
        raise  # the database, not the resolver, failed: the slice ends and the run goes on
    except Exception as exc:
        # The exception's text could quote what the resolver read; log and report its type only.
        logger.warning("run %s: credential resolver %s raised %s", run.id, path, type(exc).__name__)
        raise CredentialResolverFailed(
            f"the credential resolver {path} failed ({type(exc).__name__}); the run's "
            f"credentials ({', '.join(run.credential_names)}) could not be read",
            run_id=run.id,
        ) from None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in values.items()):
        raise CredentialResolverFailed(
            f"the credential resolver {path} returned something else than names and string values",
            run_id=run.id,
        )
    return values


def _resolved_once(
    resolve: Callable[[MotorRun], dict[str, str]],
) -> Callable[[MotorRun], dict[str, str]]:
    """`resolve`, asked at most once per run (a failure is not remembered)."""
    known: dict[str, dict[str, str]] = {}

    def resolved(run: MotorRun) -> dict[str, str]:
        if run.id not in known:
            known[run.id] = resolve(run)
        return known[run.id]

    return resolved


def _missing_credentials(
    run: MotorRun, credentials: Callable[[MotorRun], dict[str, str]] | None = None
) -> list[str]:
    """The run's credential names that have no value (nobody has set them)."""
    values = (credentials or _resolve_credentials)(run)
    return [name for name in run.credential_names if not values.get(name)]


def _credentials_question(missing: Sequence[str]) -> str:
    names = ", ".join(missing)
    plural = len(missing) > 1
    return (
        f"This run needs the credential{'s' if plural else ''} {names}, which nobody has set. "
        f"Set {'them' if plural else 'it'} in the admin (Credentials) or through the API "
        f"(PUT /api/v1/credentials/<name>/); never send a credential's value in a chat or as "
        f"the answer to this question. The run resumes by itself once "
        f"{'they are' if plural else 'it is'} set."
    )


def _pause_for_credentials(
    run: MotorRun, attempt: Attempt, lease: Lease, missing: list[str], *, actor: str
) -> SliceOutcome:
    """Pause the run in awaiting_input, asking for `missing` to be set. Caller holds locks."""
    question = _credentials_question(missing)
    previous = run.status
    attempt.await_input(question=question, tool_call_id="")
    attempt.save(update_fields=["status", "pending_question", "pending_tool_call_id"])
    run.await_input()
    run.missing_credentials = list(missing)
    run.save(update_fields=["status", "missing_credentials", "updated_at"])
    lease_release(lease, slice_done=True)
    _event(run, from_status=previous, actor=actor, missing_credentials=list(missing))
    _signal(
        run,
        {
            "run_id": run.id,
            "status": RunStatus.AWAITING_INPUT,
            "question": question,
            "missing_credentials": list(missing),
        },
    )
    return SliceOutcome.PAUSED


def _resume_with_credentials(
    run: MotorRun,
    *,
    actor: str,
    credentials: Callable[[MotorRun], dict[str, str]] | None = None,
) -> RunTransitioned:
    """Resume a run waiting for credentials once all are set. Caller holds the run's lock.

    Raises CredentialsStillMissing (nothing changed) naming the ones still not set.
    """
    still = _missing_credentials(run, credentials)
    if still:
        raise CredentialsStillMissing(
            f"run {run.id} still needs the credential{'s' if len(still) > 1 else ''} "
            f"{', '.join(still)}: set {'them' if len(still) > 1 else 'it'} in the admin or "
            "through the API (PUT /api/v1/credentials/<name>/), never as an answer",
            run_id=run.id,
            missing=", ".join(still),
        )
    attempt = _current_attempt(run)
    attempt.resume()
    attempt.save(update_fields=["status", "pending_question", "pending_tool_call_id"])
    previous = run.status
    run.resume()
    run.missing_credentials = []
    fields = ["status", "missing_credentials", "waited_s", "updated_at"]
    if attempt.index == 0 and attempt.iteration == 0 and not attempt.steps.exists():
        # It waited before doing anything: its time budget starts now, not before the wait.
        run.started_at = timezone.now()
        run.waited_s = 0
        fields.append("started_at")
    run.save(update_fields=fields)
    _event(run, from_status=previous, actor=actor, credentials_provided=True)
    token, run_id = run.lease_token, run.id
    transaction.on_commit(lambda: _enqueue_step(run_id, token))
    return {"run_id": run_id, "previous_status": previous, "new_status": run.status}


def run_credentials_provided(
    *,
    run_id: str,
    actor: str,
    credentials: Callable[[MotorRun], dict[str, str]] | None = None,
) -> RunTransitioned:
    """Resume a run that waits for credentials, now that they are set (the vault calls this).

    Raises InvalidTransition (nothing changed) unless the run is awaiting input for missing
    credentials, and CredentialsStillMissing when some are still not set.
    """
    with transaction.atomic():
        run = _lock_run(run_id)
        if run.status != RunStatus.AWAITING_INPUT or not run.missing_credentials:
            raise InvalidTransition(
                f"run {run_id} is {run.status} and waits for no credential",
                run_id=run_id,
                status=run.status,
            )
        return _resume_with_credentials(run, actor=actor, credentials=credentials)


def _refusal(run: MotorRun, name: str, arguments: dict[str, Any] | None) -> dict[str, Any] | None:
    if name not in run.tools:
        granted = ", ".join(run.tools) or "none"
        return envelope(
            ok=False,
            output=f"tool {name!r} is not granted to this run (granted: {granted})",
            error_code="denied",
        )
    if arguments is None:
        return envelope(
            ok=False, output="the arguments are not a JSON object", error_code="invalid_args"
        )
    return None


def _complete_step(run: MotorRun, attempt: Attempt, step: Step, result: dict[str, Any]) -> None:
    step.state = StepState.DONE
    step.result = result
    step.duration_ms = int(result.get("duration_ms") or 0)
    step.completed_at = timezone.now()
    step.save(update_fields=["state", "result", "duration_ms", "completed_at"])
    attempt.messages = [*attempt.messages, _tool_message(step, result)]
    attempt.save(update_fields=["messages"])


def _tool_message(step: Step, result: dict[str, Any]) -> dict[str, Any]:
    """The tool message that answers `step`'s call in the conversation."""
    return {
        "role": "tool",
        "tool_call_id": step.tool_call_id,
        "content": tool_message_content(result),
    }


def _after_result(
    run: MotorRun, attempt: Attempt, name: str, result: dict[str, Any], *, actor: str
) -> SliceOutcome | None:
    """Apply the consecutive-failure bailout after a recorded result."""
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
            _finish_failed(
                run,
                attempt,
                category=category,
                message=message,
                retryable=retryable,
                actor=actor,
            )
            return SliceOutcome.FINISHED
    return None


# --- control -------------------------------------------------------------------------------------


def run_respond(*, run_id: str, answer: str, actor: str) -> RunTransitioned:
    """Answer the pending ask_user question: it becomes that call's result; the loop resumes.

    A run waiting for missing credentials takes no answer (it is dropped, never stored): it
    resumes when they are all set now, otherwise CredentialsStillMissing names them.
    Raises InvalidTransition (nothing changed) unless the run is awaiting input.
    """
    if not answer or not answer.strip():
        raise InvalidRunParams("answer: must not be empty", field="answer")
    with transaction.atomic():
        run = _lock_run(run_id)
        if run.status != RunStatus.AWAITING_INPUT:
            raise InvalidTransition(
                f"run {run_id} is {run.status}; only a run awaiting input takes an answer",
                run_id=run_id,
                status=run.status,
            )
        if run.missing_credentials:
            # The answer is never stored: it may be the very value that must not be in a chat.
            # The run goes on when every credential is now set, and refuses otherwise.
            return _resume_with_credentials(run, actor=actor)
        attempt = _current_attempt(run)
        step = Step.objects.select_for_update().get(
            attempt=attempt, tool_call_id=attempt.pending_tool_call_id, tool=ASK_USER
        )
        result = envelope(ok=True, output=answer, provenance="user")
        _complete_step(run, attempt, step, result)
        attempt.resume()
        attempt.save(update_fields=["status", "pending_question", "pending_tool_call_id"])
        previous = run.status
        run.resume()
        run.save(update_fields=["status", "waited_s", "updated_at"])
        _event(run, from_status=previous, actor=actor)
        token = run.lease_token
        transaction.on_commit(lambda: _enqueue_step(run_id, token))
    return {"run_id": run_id, "previous_status": previous, "new_status": run.status}


def run_cancel(
    *, run_id: str, actor: str, reason: str = "cancelled by request", emit_signal: bool = False
) -> RunTransitioned:
    """Cancel a non-terminal run. Fences any slice in progress and releases the mutex.

    `emit_signal=True` (a cancel the brain did not ask for, e.g. its token was revoked) also
    emits a motor_result signal: status cancelled, `reason` as the error message.

    Raises InvalidTransition (nothing changed) for a terminal run.
    """
    with transaction.atomic():
        run = _lock_run(run_id)
        if run.status not in ACTIVE_STATUSES:
            raise InvalidTransition(
                f"run {run_id} is {run.status}; only an active run can be cancelled",
                run_id=run_id,
                status=run.status,
            )
        attempt = _current_attempt(run)
        now = timezone.now()
        failure = {
            "category": FailureCategory.CANCELLED.value,
            "retryable": False,
            "message": reason,
            "last_step": _last_step_label(attempt),
            "hint": "",
        }
        if attempt.status in (AttemptStatus.COMPLETED, AttemptStatus.FAILED):
            pass  # a run that is `created` after a retry race keeps its finished attempt
        else:
            attempt.fail(failure=failure, at=now)
            attempt.save(
                update_fields=[
                    "status",
                    "failure",
                    "completed_at",
                    "pending_question",
                    "pending_tool_call_id",
                ]
            )
        previous = run.status
        run.cancel(result={"ok": False, "summary": "", "failure": failure}, at=now)
        # A new token fences any slice still working on the run: its next write is refused.
        run.lease_token += 1
        run.lease_owner = ""
        run.saved_credentials = ""
        run.save(
            update_fields=[
                "saved_credentials",
                "status",
                "result",
                "completed_at",
                "lease_expires_at",
                "lease_token",
                "lease_owner",
                "updated_at",
            ]
        )
        _event(run, from_status=previous, actor=actor, reason=reason)
        if emit_signal:
            _signal(
                run,
                {
                    "run_id": run.id,
                    "status": RunStatus.CANCELLED,
                    "error": {"message": reason, "last_step": failure["last_step"]},
                    "failure": failure,
                    "result": run.result,
                },
            )
        agent_id, token = run.agent_id, run.lease_token
        transaction.on_commit(lambda: mutex_release(agent_id=agent_id, run_id=run_id))
        # A slice in progress is killed by its call watch; an idle run's session is closed by the
        # worker that takes this message (or by the idle timeout in any other process).
        transaction.on_commit(lambda: _enqueue_step(run_id, token))
    return {"run_id": run_id, "previous_status": previous, "new_status": run.status}


def _lock_run(run_id: str) -> MotorRun:
    from runs.errors import RunNotFound

    try:
        return MotorRun.objects.select_for_update().get(pk=run_id)
    except MotorRun.DoesNotExist:
        raise RunNotFound(f"no run with id {run_id!r}", run_id=run_id) from None


def run_retry(*, run_id: str, guidance: str, actor: str) -> RunTransitioned:
    """Start a new attempt of a failed run: clean messages, the guidance as recovery context.

    The new attempt gets at most 15 iterations (never more than the run's cap). Raises
    InvalidTransition (nothing changed) unless the run failed and has attempts left, and
    MotorBusy when the agent started another run meanwhile.
    """
    with transaction.atomic():
        run = _lock_run(run_id)
        if run.status != RunStatus.FAILED:
            raise InvalidTransition(
                f"run {run_id} is {run.status}; only a failed run can be retried",
                run_id=run_id,
                status=run.status,
            )
        if run.current_attempt_index + 1 >= run.max_attempts:
            raise InvalidTransition(
                f"run {run_id} has used all {run.max_attempts} attempts",
                run_id=run_id,
                status=run.status,
            )
        previous_attempt = _current_attempt(run)
        previous = run.status
        run.retry()
        try:
            with transaction.atomic():
                run.save(
                    update_fields=[
                        "status",
                        "current_attempt_index",
                        "completed_at",
                        "result",
                        "updated_at",
                    ]
                )
        except IntegrityError as exc:
            if _ACTIVE_CONSTRAINT not in str(exc):
                raise
            active = (
                MotorRun.objects.filter(agent_id=run.agent_id, status__in=ACTIVE_STATUSES)
                .values_list("id", flat=True)
                .first()
            )
            raise MotorBusy(run_id=active or "(finished just now)") from None
        Attempt.objects.create(
            run=run,
            index=run.current_attempt_index,
            max_iterations=min(RETRY_MAX_ITERATIONS, run.max_iterations),
            messages=[{"role": "user", "content": run.task}],
            recovery_context={
                "previous_attempt": previous_attempt.index,
                "failure": previous_attempt.failure,
                "guidance": guidance,
            },
        )
        MotorRun.objects.filter(pk=run.pk).update(redelivery_count=0, idle_since=timezone.now())
        _event(run, from_status=previous, actor=actor, attempt=run.current_attempt_index)
        token, agent_id = run.lease_token, run.agent_id
        transaction.on_commit(lambda: mutex_hold(agent_id=agent_id, run_id=run_id))
        transaction.on_commit(lambda: _enqueue_step(run_id, token))
    return {"run_id": run_id, "previous_status": previous, "new_status": run.status}


class ReapReport(TypedDict):
    woken: list[str]
    timed_out: list[str]


def run_reap(*, actor: str = "reaper") -> ReapReport:
    """Periodic repair: wake runs whose wake-up message was lost, time out unanswered questions.

    A run in created/running with no holder for MOTOR_REAPER_GRACE_SECONDS, with an expired
    lease, or with a lease held by a dead process of this host, gets a new message for its
    current token (a duplicate of a merely queued message is
    dropped by the token check). A run awaiting input longer than
    MOTOR_AWAITING_INPUT_TIMEOUT_SECONDS fails with "User response timeout"; a pending approval
    past its expiry is expired and its run fails with "Approval timeout".
    """
    now = timezone.now()
    grace = timedelta(seconds=int(getattr(settings, "MOTOR_REAPER_GRACE_SECONDS", 120)))
    runnable = MotorRun.objects.filter(status__in=[RunStatus.CREATED, RunStatus.RUNNING])
    stalled = runnable.filter(
        Q(lease_expires_at__isnull=True, idle_since__lt=now - grace) | Q(lease_expires_at__lt=now)
    )
    woken: list[str] = []
    for run_id, token in stalled.values_list("id", "lease_token"):
        _enqueue_step(run_id, token)
        woken.append(run_id)
    # A live lease held by a process of this host that no longer exists (a threads worker killed
    # with all its slices: no parent process is left to hand their messages back): wake the run
    # now rather than after the lease's expiry; the slice takes over from the dead owner.
    held_here = runnable.filter(
        lease_expires_at__gte=now, lease_owner__startswith=f"{socket.gethostname()}:"
    )
    for run_id, token, holder in held_here.values_list("id", "lease_token", "lease_owner"):
        if owner_is_dead(holder):
            _enqueue_step(run_id, token)
            woken.append(run_id)

    timeout = timedelta(
        seconds=int(getattr(settings, "MOTOR_AWAITING_INPUT_TIMEOUT_SECONDS", 30 * 60))
    )
    timed_out: list[str] = []
    waiting = MotorRun.objects.filter(
        status=RunStatus.AWAITING_INPUT, updated_at__lt=now - timeout
    ).values_list("id", flat=True)
    for run_id in waiting:
        with transaction.atomic():
            run = _lock_run(run_id)
            if run.status != RunStatus.AWAITING_INPUT or run.updated_at >= now - timeout:
                continue  # answered meanwhile
            _finish_failed(
                run,
                _current_attempt(run),
                category=FailureCategory.TIMEOUT,
                message="User response timeout",
                retryable=True,
                actor=actor,
            )
            # Fence anything that might still hold an old token for this run.
            MotorRun.objects.filter(pk=run.pk).update(lease_token=F("lease_token") + 1)
        timed_out.append(run_id)
    for approval_id, run_id in ApprovalRequest.objects.filter(
        status=ApprovalStatus.PENDING, expires_at__lt=now
    ).values_list("id", "run_id"):
        with transaction.atomic():
            run = _lock_run(run_id)
            approval = ApprovalRequest.objects.select_for_update().get(pk=approval_id)
            if approval.status != ApprovalStatus.PENDING:
                continue  # decided meanwhile
            approval.expire(at=now)
            approval.save(update_fields=["status", "decided_at"])
            if run.status == RunStatus.AWAITING_APPROVAL:
                _finish_failed(
                    run,
                    _current_attempt(run),
                    category=FailureCategory.TIMEOUT,
                    message="Approval timeout",
                    retryable=True,
                    actor=actor,
                )
        timed_out.append(run_id)
    return {"woken": woken, "timed_out": timed_out}


def run_reemit_pending_questions(
    *, actor: str = "startup", asked_before: datetime | None = None
) -> list[int]:
    """Write a fresh awaiting_input signal for every run still waiting for an answer.

    Called when the service starts, so a brain that missed the first signal asks again; with
    `asked_before`, only for runs that have been waiting since before that time (a question
    asked later was signalled by the running service). Returns the new signal ids.
    """
    ids: list[int] = []
    waiting = MotorRun.objects.filter(status=RunStatus.AWAITING_INPUT)
    if asked_before is not None:
        # a run's updated_at is stamped when it starts waiting, and not again until it resumes
        waiting = waiting.filter(updated_at__lt=asked_before)
    for run in waiting.order_by("created_at"):
        attempt = Attempt.objects.get(run=run, index=run.current_attempt_index)
        payload: dict[str, Any] = {
            "run_id": run.id,
            "status": RunStatus.AWAITING_INPUT,
            "question": attempt.pending_question,
        }
        if run.missing_credentials:
            payload["missing_credentials"] = list(run.missing_credentials)
        with transaction.atomic():
            signal = _signal(run, payload)
        ids.append(signal.id)
    return ids


def _pending_approval(run_id: str, approval_id: int) -> tuple[MotorRun, Attempt, ApprovalRequest]:
    run = _lock_run(run_id)
    if run.status != RunStatus.AWAITING_APPROVAL:
        raise InvalidTransition(
            f"run {run_id} is {run.status}; only a run awaiting approval takes a decision",
            run_id=run_id,
            status=run.status,
        )
    approval = (
        ApprovalRequest.objects.select_for_update(of=("self",))
        .filter(run=run, pk=approval_id, status=ApprovalStatus.PENDING)
        .select_related("step")
        .first()
    )
    if approval is None:
        raise InvalidTransition(
            f"approval {approval_id} is not the pending approval of run {run_id}",
            run_id=run_id,
            approval_id=approval_id,
        )
    return run, _current_attempt(run), approval


def _resume_after_decision(run: MotorRun, attempt: Attempt, *, actor: str, **detail: object) -> str:
    attempt.resume()
    attempt.save(update_fields=["status", "pending_question", "pending_tool_call_id"])
    previous = run.status
    run.resume()
    run.save(update_fields=["status", "waited_s", "updated_at"])
    _event(run, from_status=previous, actor=actor, **detail)
    token, run_id = run.lease_token, run.id
    transaction.on_commit(lambda: _enqueue_step(run_id, token))
    return previous


def run_approve(*, run_id: str, approval_id: int, actor: str) -> RunTransitioned:
    """Approve the pending action: exactly that call (same hash) may run once; the loop resumes.

    An approval given after its expiry fails the run instead. Raises InvalidTransition (nothing
    changed) unless `approval_id` is the run's pending approval.
    """
    with transaction.atomic():
        run, attempt, approval = _pending_approval(run_id, approval_id)
        now = timezone.now()
        if approval.expires_at <= now:
            approval.expire(at=now)
            approval.save(update_fields=["status", "decided_at"])
            _finish_failed(
                run,
                attempt,
                category=FailureCategory.TIMEOUT,
                message="the approval expired before it was given",
                retryable=True,
                actor=actor,
            )
            return {
                "run_id": run_id,
                "previous_status": "awaiting_approval",
                "new_status": "failed",
            }
        approval.consume(at=now)
        approval.save(update_fields=["status", "decided_at"])
        step = approval.step
        if step is not None and step.tool == REQUEST_APPROVAL:
            tool = approval.action.get("tool")
            _complete_step(
                run,
                attempt,
                step,
                envelope(
                    ok=True,
                    output=(
                        f"Approved: you may call {tool} with exactly the arguments you proposed, "
                        "once."
                    ),
                    provenance="user",
                ),
            )
        previous = _resume_after_decision(run, attempt, actor=actor, approval=approval.pk)
    return {"run_id": run_id, "previous_status": previous, "new_status": RunStatus.RUNNING}


def run_reject(*, run_id: str, approval_id: int, actor: str, note: str = "") -> RunTransitioned:
    """Refuse the pending action: it never runs, the model is told why, the loop resumes."""
    with transaction.atomic():
        run, attempt, approval = _pending_approval(run_id, approval_id)
        approval.reject(at=timezone.now())
        approval.save(update_fields=["status", "decided_at"])
        if approval.step is not None:
            _complete_step(
                run,
                attempt,
                approval.step,
                envelope(
                    ok=False,
                    output="The owner rejected this action" + (f": {note}" if note else "."),
                    error_code="rejected",
                    provenance="user",
                ),
            )
        previous = _resume_after_decision(run, attempt, actor=actor, approval=approval.pk)
    return {"run_id": run_id, "previous_status": previous, "new_status": RunStatus.RUNNING}
