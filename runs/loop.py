"""The slice loop of the Motor Cortex runtime.

The loop is advanced one slice at a time by `run_step`: claim the lease, then iteration after
iteration — one LLM call (outside any transaction), the requested tool calls one by one (Step row
written as `intent` and committed, the call run outside a transaction, the result recorded under
the fencing check) — until the run pauses or ends or the slice's time (MOTOR_SLICE_SECONDS) is up;
then release the lease and enqueue the next slice on commit. Every write checks the fencing token
first; the frequent ones are single statements (`runs.ledger`, `runs.fenced_write`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import openai
from django.conf import settings
from django.db import transaction

from runs.accounting import run_rates
from runs.crashpoints import crash_point
from runs.credentials import (
    credentials_gate,
    reply_secure,
    run_credentials_once,
    run_credentials_read,
)
from runs.db import release_db_connection
from runs.db_outage import DATABASE_UNAVAILABLE, slice_after_database_loss
from runs.errors import (
    CredentialResolverFailed,
    LeaseLost,
    LLMUnavailable,
)
from runs.finishing import (
    reply_final,
    run_fail_budget,
    run_fail_fenced,
    run_fail_out_of_energy,
    run_fail_timeout,
    run_finish_completed,
    slice_end,
)
from runs.layer_step import run_layer_prepare
from runs.lease import (
    Lease,
    default_owner,
    lease_release,
)
from runs.ledger import ledger_energy_level, ledger_record_reply
from runs.ledger_start import ledger_claim, ledger_take_over
from runs.llm import LLMReply
from runs.llm_request import _call_llm
from runs.logcontext import (
    log_context_bind,
    log_context_bind_claimed,
    log_context_bind_run,
    log_context_unbind,
)
from runs.metrics import ITERATIONS
from runs.models import (
    ACTIVE_STATUSES,
    MAX_ITERATIONS_CEILING,
    Attempt,
    FailureCategory,
    MotorRun,
    RunStatus,
    Step,
)
from runs.mutex import mutex_hold
from runs.pipeline import call_perform, executors_prewarm, intent_ahead
from runs.placement import workspace_arrive, workspace_pause, workspace_snapshot
from runs.policy_gate import standing_of
from runs.records import SliceOutcome
from runs.sessions import open_run_sessions, run_session_close
from runs.snapshots import SnapshotTooLarge, StorageUnavailable
from runs.tools import SandboxSlot

logger = logging.getLogger(__name__)


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


def run_step(
    *,
    run_id: str,
    expected_token: int | None = None,
    owner: str | None = None,
    client: openai.OpenAI | None = None,
    credentials: Callable[[MotorRun], dict[str, str]] | None = None,
) -> SliceOutcome:
    """Advance `run_id` by one slice: iterations (one LLM call and the tool calls it asks for)
    until the run pauses or ends, or MOTOR_SLICE_SECONDS have passed.

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
        slice_after_database_loss(run_id=run_id, owner=owner, error=exc)
        return SliceOutcome.DATABASE_LOST
    if claimed is None:
        # rare (a duplicate or late message): the log lines still name the run's agent
        log_context_bind_run(run_id)
        return SliceOutcome.LEASE_BUSY if exists else SliceOutcome.NOT_RUNNABLE
    lease, run, attempt = claimed
    log_context_bind_claimed(run, attempt)
    outcome: SliceOutcome | None = None
    try:
        # one resolution per slice: the missing-credential check, the reply's redaction and each
        # tool call all need the same values
        resolve = run_credentials_once(credentials or run_credentials_read)
        outcome = _run_slice(lease, run, attempt, owner=owner, client=client, credentials=resolve)
        return outcome
    except DATABASE_UNAVAILABLE as exc:
        # Transient: end the slice cleanly, the run goes on (runs.db_outage).
        slice_after_database_loss(run_id=run_id, owner=owner, error=exc)
        return SliceOutcome.DATABASE_LOST
    finally:
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
            return run_fail_fenced(
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
            return run_fail_timeout(lease, run, attempt, actor=actor)
        paused = credentials_gate(
            lease, run, attempt, credentials or run_credentials_read, actor=actor
        )
        if paused is not None:
            return paused

        # the workspace comes here first when another host held it (runs.placement)
        workspace_arrive(lease, run)
        # and what a call left unsnapshotted (its store was down) is stored before more changes
        workspace_snapshot(lease, run)
        # the skill's declared dependencies: installed once into a layer, mounted read-only
        layer = run_layer_prepare(lease, run, attempt, owner=owner, actor=actor)
        if isinstance(layer, SliceOutcome):
            return layer
        slot = SandboxSlot(
            run_id=run.id,
            workspace=run.workspace,
            allowed_domains=run.allowed_domains,
            # the skill policy's shell allowlist, enforced by the sandbox's bash validator
            bash_allowlist=standing_of(run).bash_allowlist,
            layer=layer,
            tools=run.tools,
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
            )
            if outcome is not None:
                return outcome
            if time.time() > deadline:
                return run_fail_timeout(lease, run, attempt, actor=actor)
        with transaction.atomic():
            slice_end(lease)
        return SliceOutcome.CONTINUED
    except LeaseLost:
        logger.info("run %s: lease lost by %s; stopping this slice", run_id, owner)
        return SliceOutcome.LEASE_LOST
    except StorageUnavailable as exc:
        # The call's result was not recorded: the run pauses, and once a host finds the store
        # reachable again it is woken and its next slice takes the step again (runs.placement).
        logger.warning("run %s: workspace snapshot storage unavailable (%s)", run_id, exc)
        try:
            workspace_pause(lease, run, exc)
        except LeaseLost:
            return SliceOutcome.LEASE_LOST
        return SliceOutcome.PAUSED
    except SnapshotTooLarge as exc:
        try:
            return run_fail_fenced(
                lease,
                run,
                attempt,
                category=FailureCategory.TOOL_FAILURE,
                message=f"workspace snapshot refused: {exc}",
                retryable=False,
                actor=actor,
            )
        except LeaseLost:
            return SliceOutcome.LEASE_LOST
    except CredentialResolverFailed as exc:
        try:
            return run_fail_fenced(
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
) -> SliceOutcome | None:
    """One iteration of the loop: the LLM call when no requested call is pending, then the
    pending tool calls in order. None: the iteration is recorded and the slice may go on.

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
    if reply_final(attempt) is not None:
        # The model already answered; a crash hit the finishing steps. Finish again.
        return run_finish_completed(lease, run, attempt, actor=actor)
    if not pending:
        if attempt.iteration >= attempt.max_iterations:
            return run_fail_budget(lease, run, attempt, actor=actor)
        # An iteration past the free ones is paid when its reply is recorded; an agent that
        # cannot pay it stops here, before the model is asked.
        charge = run_rates(run).iteration_cost(run.iterations + 1)
        if charge > 0:
            level = ledger_energy_level(run.agent_id, run=run)
            if level < charge:
                return run_fail_out_of_energy(
                    lease, run, attempt, level=level, charge=charge, actor=actor
                )
        # The granted tools' executors get ready while the model thinks: a run granted sandbox
        # tools gets its session, so the first call finds it open instead of waiting for the
        # sandbox to start (a run granted none opens none). It starts once the request is out:
        # starting a sandbox forks this process, which would otherwise hold up the request's
        # own work (the interpreter lock) by milliseconds.
        # the request's lines belong to the next iteration, not to the last tool call
        log_context_unbind("step", "tool")
        release_db_connection()
        reply = _call_llm(
            run,
            attempt,
            client,
            on_sent=(lambda: executors_prewarm(run.tools, slot)) if run.tools else None,
        )
        if isinstance(reply, LLMUnavailable):
            return run_fail_fenced(
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
        outcome = call_perform(
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
            slice_end(lease)
        return SliceOutcome.CONTINUED
    return None


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

    When its first call can run at once (`runs.pipeline.intent_ahead`), that call's intent is
    written with the message, and returned: the call may start.

    Credential values never reach the stored message (`runs.credentials.reply_secure`).
    """
    stored = reply_secure(
        lease, run, attempt, reply.as_message(), credentials or run_credentials_read
    )
    intent = None
    if stored is not None:
        intent = intent_ahead(lease, run, attempt, stored, model=reply.model)
        if intent is not None:
            # the reply and this intent are written together: there is no moment between them
            crash_point("before_step")
        ledger_record_reply(
            lease,
            attempt,
            stored,
            intent=intent,
            run=run,
            charge=run_rates(run).iteration_cost(run.iterations + 1),
            tokens=(reply.prompt_tokens, reply.completion_tokens),
        )
    ITERATIONS.inc()
    log_context_bind(iteration=attempt.iteration)
    if reply.tool_calls:
        return None, intent
    return run_finish_completed(lease, run, attempt, actor=actor), None
