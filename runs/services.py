"""State changes of the Motor Cortex runtime: the commands on a run. Keyword-only, typed,
`<entity>_<action>`.

`run_start` (runs.start) creates a run; `run_respond`, `run_approve`, `run_reject`,
`run_credentials_provided` and `run_retry` wake it again; `run_cancel` ends it. The loop that
advances a run is in `runs.loop` (`run_step`), one tool call's path in `runs.pipeline`, the reaper
in `runs.reaper`; their entry points are importable from here as well.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypedDict

from django.db import IntegrityError, transaction
from django.utils import timezone

from runs.credentials import run_credentials_missing
from runs.errors import (
    CredentialsStillMissing,
    InvalidRunParams,
    InvalidTransition,
    MotorBusy,
)
from runs.finishing import run_finish_failed, step_last_label
from runs.llm_request import runtime_warm
from runs.loop import run_step
from runs.models import (
    ACTIVE_STATUSES,
    RETRY_MAX_ITERATIONS,
    ApprovalRequest,
    ApprovalStatus,
    Attempt,
    AttemptStatus,
    FailureCategory,
    MotorRun,
    RunStatus,
    Step,
)
from runs.mutex import mutex_hold, mutex_release
from runs.pipeline.record import step_complete
from runs.reaper import ReapReport, run_reap, run_reemit_pending_questions
from runs.records import (
    SliceOutcome,
    attempt_lock_current,
    event_record,
    motor_result_emit,
    run_lock,
    run_wake,
)
from runs.start import _ACTIVE_CONSTRAINT, RunStarted, run_start
from runs.tools import (
    ASK_USER,
    REQUEST_APPROVAL,
    envelope,
)


class RunTransitioned(TypedDict):
    run_id: str
    previous_status: str
    new_status: str


def _resume_with_credentials(
    run: MotorRun,
    *,
    actor: str,
    credentials: Callable[[MotorRun], dict[str, str]] | None = None,
) -> RunTransitioned:
    """Resume a run waiting for credentials once all are set. Caller holds the run's lock.

    Raises CredentialsStillMissing (nothing changed) naming the ones still not set.
    """
    still = run_credentials_missing(run, credentials)
    if still:
        raise CredentialsStillMissing(
            f"run {run.id} still needs the credential{'s' if len(still) > 1 else ''} "
            f"{', '.join(still)}: set {'them' if len(still) > 1 else 'it'} in the admin or "
            "through the API (PUT /api/v1/credentials/<name>/), never as an answer",
            run_id=run.id,
            missing=", ".join(still),
        )
    attempt = attempt_lock_current(run)
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
    event_record(run, from_status=previous, actor=actor, credentials_provided=True)
    token, run_id = run.lease_token, run.id
    transaction.on_commit(lambda: run_wake(run_id, token))
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
        run = run_lock(run_id)
        if run.status != RunStatus.AWAITING_INPUT or not run.missing_credentials:
            raise InvalidTransition(
                f"run {run_id} is {run.status} and waits for no credential",
                run_id=run_id,
                status=run.status,
            )
        return _resume_with_credentials(run, actor=actor, credentials=credentials)


def run_respond(*, run_id: str, answer: str, actor: str) -> RunTransitioned:
    """Answer the pending ask_user question: it becomes that call's result; the loop resumes.

    A run waiting for missing credentials takes no answer (it is dropped, never stored): it
    resumes when they are all set now, otherwise CredentialsStillMissing names them.
    Raises InvalidTransition (nothing changed) unless the run is awaiting input.
    """
    if not answer or not answer.strip():
        raise InvalidRunParams("answer: must not be empty", field="answer")
    with transaction.atomic():
        run = run_lock(run_id)
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
        attempt = attempt_lock_current(run)
        step = Step.objects.select_for_update().get(
            attempt=attempt, tool_call_id=attempt.pending_tool_call_id, tool=ASK_USER
        )
        result = envelope(ok=True, output=answer, provenance="user")
        step_complete(run, attempt, step, result)
        attempt.resume()
        attempt.save(update_fields=["status", "pending_question", "pending_tool_call_id"])
        previous = run.status
        run.resume()
        run.save(update_fields=["status", "waited_s", "updated_at"])
        event_record(run, from_status=previous, actor=actor)
        token = run.lease_token
        transaction.on_commit(lambda: run_wake(run_id, token))
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
        run = run_lock(run_id)
        if run.status not in ACTIVE_STATUSES:
            raise InvalidTransition(
                f"run {run_id} is {run.status}; only an active run can be cancelled",
                run_id=run_id,
                status=run.status,
            )
        attempt = attempt_lock_current(run)
        now = timezone.now()
        failure = {
            "category": FailureCategory.CANCELLED.value,
            "retryable": False,
            "message": reason,
            "last_step": step_last_label(attempt),
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
        event_record(run, from_status=previous, actor=actor, reason=reason)
        if emit_signal:
            motor_result_emit(
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
        transaction.on_commit(lambda: run_wake(run_id, token))
    return {"run_id": run_id, "previous_status": previous, "new_status": run.status}


def run_retry(
    *, run_id: str, guidance: str, actor: str, detail: dict[str, object] | None = None
) -> RunTransitioned:
    """Start a new attempt of a failed run: clean messages, the guidance as recovery context.
    `detail` is added to the retry's RunEvent (the trace says why the retry happened).

    The new attempt gets at most 15 iterations (never more than the run's cap). Raises
    InvalidTransition (nothing changed) unless the run failed and has attempts left, and
    MotorBusy when the agent started another run meanwhile.
    """
    with transaction.atomic():
        run = run_lock(run_id)
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
        previous_attempt = attempt_lock_current(run)
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
        event_record(
            run,
            from_status=previous,
            actor=actor,
            **{**(detail or {}), "attempt": run.current_attempt_index},
        )
        token, agent_id = run.lease_token, run.agent_id
        transaction.on_commit(lambda: mutex_hold(agent_id=agent_id, run_id=run_id))
        transaction.on_commit(lambda: run_wake(run_id, token))
    return {"run_id": run_id, "previous_status": previous, "new_status": run.status}


def _pending_approval(run_id: str, approval_id: int) -> tuple[MotorRun, Attempt, ApprovalRequest]:
    run = run_lock(run_id)
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
    return run, attempt_lock_current(run), approval


def _resume_after_decision(run: MotorRun, attempt: Attempt, *, actor: str, **detail: object) -> str:
    attempt.resume()
    attempt.save(update_fields=["status", "pending_question", "pending_tool_call_id"])
    previous = run.status
    run.resume()
    run.save(update_fields=["status", "waited_s", "updated_at"])
    event_record(run, from_status=previous, actor=actor, **detail)
    token, run_id = run.lease_token, run.id
    transaction.on_commit(lambda: run_wake(run_id, token))
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
            approval.expire(at=now, by=actor)
            approval.save(update_fields=["status", "decided_at", "decided_by"])
            run_finish_failed(
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
        approval.consume(at=now, by=actor)
        approval.save(update_fields=["status", "decided_at", "decided_by"])
        step = approval.step
        if step is not None and step.tool == REQUEST_APPROVAL:
            tool = approval.action.get("tool")
            step_complete(
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
        approval.reject(at=timezone.now(), by=actor)
        approval.save(update_fields=["status", "decided_at", "decided_by"])
        if approval.step is not None:
            step_complete(
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


# Entry points that live in their own modules, importable from the app's command surface.
__all__ = [
    "ReapReport",
    "RunStarted",
    "RunTransitioned",
    "SliceOutcome",
    "run_approve",
    "run_cancel",
    "run_credentials_provided",
    "run_reap",
    "run_reemit_pending_questions",
    "run_reject",
    "run_respond",
    "run_retry",
    "run_start",
    "run_step",
    "runtime_warm",
]
