"""State changes of the Motor Cortex runtime: the commands on a run. Keyword-only, typed,
`<entity>_<action>`.

`run_start` creates a run; `run_respond`, `run_approve`, `run_reject`, `run_credentials_provided`
and `run_retry` wake it again; `run_cancel` ends it. The loop that advances a run is in
`runs.loop` (`run_step`), one tool call's path in `runs.pipeline`, the reaper in `runs.reaper`;
their entry points are importable from here as well.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TypedDict

from django.apps import apps
from django.db import IntegrityError, transaction
from django.utils import timezone

from runs.credentials import run_credentials_missing
from runs.domains import check_allowed_domains
from runs.errors import (
    CredentialsStillMissing,
    InvalidRunParams,
    InvalidTransition,
    MotorBusy,
)
from runs.finishing import run_finish_failed, step_last_label
from runs.ledger import ledger_insert
from runs.llm_request import runtime_warm
from runs.loop import run_step
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
    Step,
    Trigger,
    new_run_id,
)
from runs.mutex import mutex_hold, mutex_release, mutex_reserve
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
from runs.tools import (
    ASK_USER,
    REQUEST_APPROVAL,
    SYNTHETIC_TOOLS,
    envelope,
    expand_granted,
)
from runs.wakeups import wake_up
from runs.workspaces import RULE as WORKSPACE_RULE
from runs.workspaces import NotAProjectWorkspace, check_run_workspace

_CREDENTIAL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


_ACTIVE_CONSTRAINT = "motorrun_one_active_per_agent"


class RunStarted(TypedDict):
    run_id: str
    status: str


class RunTransitioned(TypedDict):
    run_id: str
    previous_status: str
    new_status: str


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
    skill_candidates: str = "",
    max_iterations: int = DEFAULT_MAX_ITERATIONS,
    timeout_s: int = MAX_RUN_TIMEOUT_S,
    approval_required: bool = False,
    trigger: str = Trigger.API,
    parent_run_id: str | None = None,
    max_attempts: int = 3,
    review: bool = False,
    energy_cost: float = 0.0,
) -> RunStarted:
    """Create a run in `created` and enqueue its first slice on commit.

    `energy_cost` is what its start took from the agent (the caller drained it in the same
    transaction); the run adds each paid iteration to it.

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
            skill_candidates=skill_candidates,
            max_iterations=max_iterations,
            timeout_s=timeout_s,
            approval_required=approval_required,
            trigger=trigger,
            parent_run_id=parent_run_id,
            max_attempts=max_attempts,
            review=review,
            idle_since=timezone.now(),
            energy_cost=energy_cost,
        )
        attempt = Attempt(
            run=run,
            index=0,
            max_iterations=max_iterations,
            messages=[{"role": "user", "content": task}],
        )
        event = RunEvent(run=run, from_status="", to_status=run.status, actor=actor, detail={})
        # The first message goes out once the insert committed (see ledger_insert), whose
        # foreign key checks that the agent exists; so is the fast-path key extended.
        ledger_insert(run, attempt, event, announce=lambda: wake_up(run_id, 0, remember=False))
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


def run_retry(*, run_id: str, guidance: str, actor: str) -> RunTransitioned:
    """Start a new attempt of a failed run: clean messages, the guidance as recovery context.

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
        event_record(run, from_status=previous, actor=actor, attempt=run.current_attempt_index)
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
