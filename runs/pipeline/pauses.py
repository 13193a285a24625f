"""How a tool call pauses its run for a person: the owner's decision on one exact call, or the
user's answer to a question. Each writes the pause, releases the lease and signals, in the
caller's fenced transaction; the run resumes through `runs.services` (approve, reject, respond).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from runs.lease import Lease, lease_release
from runs.models import ApprovalRequest, Attempt, MotorRun, RunStatus, Step
from runs.records import SliceOutcome, event_record, motor_result_emit
from runs.tools import action_hash


def pause_for_approval(
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
    event_record(run, from_status=previous, actor=actor, approval=approval.pk)
    motor_result_emit(
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


def pause_for_question(
    run: MotorRun, attempt: Attempt, lease: Lease, *, question: str, tool_call_id: str, actor: str
) -> SliceOutcome:
    """Pause run and attempt in awaiting_input on an ask_user call, signal the question. Caller
    holds locks."""
    previous = run.status
    attempt.await_input(question=question, tool_call_id=tool_call_id)
    attempt.save(update_fields=["status", "pending_question", "pending_tool_call_id"])
    run.await_input()
    run.save(update_fields=["status", "updated_at"])
    lease_release(lease, slice_done=True)
    event_record(run, from_status=previous, actor=actor, question=question)
    motor_result_emit(
        run,
        {
            "run_id": run.id,
            "status": RunStatus.AWAITING_INPUT,
            "question": question,
        },
    )
    return SliceOutcome.PAUSED
