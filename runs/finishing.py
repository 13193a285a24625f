"""How a slice and a run end: the slice's lease released with its successor queued, a run failed
(timeout, iteration cap, model or tool failure) or completed (skill extraction, artifacts, the
closing signal). Callers hold the lease or the run's lock, as each function says.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from runs.accounting import run_rates, run_usage
from runs.artifacts import artifacts_gather, artifacts_record
from runs.credentials import saved_values
from runs.errors import LeaseLost
from runs.failures import failure_hint_enqueue
from runs.lease import (
    Lease,
    lease_fence,
    lease_release,
)
from runs.models import (
    Attempt,
    AttemptStatus,
    FailureCategory,
    MotorRun,
    RunStatus,
    Step,
)
from runs.mutex import mutex_release
from runs.records import SliceOutcome, event_record, motor_result_emit, run_wake


def _stats(run: MotorRun) -> dict[str, Any]:
    """The run's totals over all its attempts (runs.accounting), and under `attempts` each
    attempt's own: what the closing signal, the result and the API report."""
    started = run.started_at or run.created_at
    usage = run_usage(run)
    return {
        "iterations": usage["iterations"],
        "duration_ms": int((timezone.now() - started).total_seconds() * 1000),
        "energy_cost": usage["energy_cost"],
        "errors": usage["tool_errors"],
        "llm_calls": usage["llm_calls"],
        "tool_calls": usage["tool_calls"],
        "prompt_tokens": usage["prompt_tokens"],
        "completion_tokens": usage["completion_tokens"],
        "total_tokens": usage["total_tokens"],
        "attempts": usage["attempts"],
    }


def step_last_label(attempt: Attempt) -> str:
    step = Step.objects.filter(attempt=attempt).order_by("-iteration", "-call_index").first()
    return f"{step.tool} (iteration {step.iteration})" if step else ""


def run_finish_failed(
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
        "last_step": step_last_label(attempt),
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
    result = {"ok": False, "summary": partial, "stats": _stats(run), "failure": failure}
    previous = run.status
    run.fail(result=result, at=now)
    fields = ["status", "result", "completed_at", "lease_expires_at", "updated_at"]
    if run.current_attempt_index + 1 >= run.max_attempts:
        # No retry can use them any more: the run keeps no credential value.
        run.saved_credentials = ""
        fields.append("saved_credentials")
    run.save(update_fields=fields)
    event_record(run, from_status=previous, actor=actor, category=category.value, message=message)
    motor_result_emit(
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


def run_fail_timeout(lease: Lease, run: MotorRun, attempt: Attempt, *, actor: str) -> SliceOutcome:
    return run_fail_fenced(
        lease,
        run,
        attempt,
        category=FailureCategory.TIMEOUT,
        message=f"the run exceeded its timeout of {run.timeout_s} s",
        retryable=True,
        actor=actor,
    )


def slice_end(lease: Lease) -> None:
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
    transaction.on_commit(lambda: run_wake(run_id, token))


def run_fail_budget(lease: Lease, run: MotorRun, attempt: Attempt, *, actor: str) -> SliceOutcome:
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
        run_finish_failed(
            run,
            attempt,
            category=FailureCategory.BUDGET_EXHAUSTED,
            message=f"the iteration cap of {attempt.max_iterations} was reached",
            retryable=True,
            actor=actor,
            partial=partial,
        )
    return SliceOutcome.FINISHED


def run_fail_out_of_energy(
    lease: Lease,
    run: MotorRun,
    attempt: Attempt,
    *,
    level: float,
    charge: float,
    actor: str,
) -> SliceOutcome:
    """Fail the run whose agent cannot pay its next iteration (`charge` > `level`)."""
    rates = run_rates(run)
    return run_fail_fenced(
        lease,
        run,
        attempt,
        category=FailureCategory.BUDGET_EXHAUSTED,
        message=(
            f"out of energy: iteration {run.iterations + 1} costs {charge:g} and the agent has "
            f"{level:g} (this run: base {rates.base:g}, {rates.free_iterations} iterations "
            f"included, then {rates.per_iteration:g} each; it took {run.energy_cost:g} so far). "
            "Energy regenerates over time; a staff user can restore it."
        ),
        retryable=True,
        actor=actor,
    )


def run_fail_fenced(
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
        run_finish_failed(
            run, attempt, category=category, message=message, retryable=retryable, actor=actor
        )
    return SliceOutcome.FINISHED


def reply_final(attempt: Attempt) -> str | None:
    """The closing text when the attempt's last message is an answer without tool calls."""
    if attempt.status != AttemptStatus.RUNNING or len(attempt.messages) < 2:
        return None
    last = attempt.messages[-1]
    if last.get("role") != "assistant" or last.get("tool_calls"):
        return None
    return str(last.get("content") or "")


def run_finish_completed(
    lease: Lease, run: MotorRun, attempt: Attempt, *, actor: str
) -> SliceOutcome:
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
            "stats": _stats(run),
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
        event_record(run, from_status=previous, actor=actor)
        motor_result_emit(run, {"run_id": run.id, "status": RunStatus.COMPLETED, "result": result})
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
    from skills.extraction import skills_extract_from_workspace

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
