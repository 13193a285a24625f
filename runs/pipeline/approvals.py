"""Approvals of tool calls: the approval a call may use, a request_approval proposal, and pausing
a run for the owner's decision.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from runs.lease import (
    Lease,
    lease_release,
)
from runs.models import (
    ApprovalRequest,
    ApprovalStatus,
    Attempt,
    MotorRun,
    RunStatus,
    Step,
)
from runs.records import SliceOutcome, _event, _signal
from runs.tools import (
    REQUEST_APPROVAL,
    action_hash,
    envelope,
)


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
