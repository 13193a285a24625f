"""Approvals of tool calls: the approval a call may use and its use, and a request_approval
proposal. The pause that asks the owner is in `runs.pipeline.pauses`.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from runs.models import (
    ApprovalRequest,
    ApprovalStatus,
    MotorRun,
    Step,
)
from runs.tools import (
    REQUEST_APPROVAL,
    action_hash,
    envelope,
)


def approval_for_step(run: MotorRun, step: Step) -> ApprovalRequest | None:
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


def approval_for_action(run: MotorRun, hash_: str) -> ApprovalRequest | None:
    """The oldest consumed, not yet used approval of the action with hash `hash_`, if any."""
    return (
        ApprovalRequest.objects.select_for_update()
        .filter(run=run, status=ApprovalStatus.CONSUMED, used_at__isnull=True, action_hash=hash_)
        .order_by("id")
        .first()
    )


def approval_proposal(run: MotorRun, arguments: dict[str, Any] | None) -> dict[str, Any]:
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


def approval_use(approval: ApprovalRequest) -> None:
    """Spend `approval`: exactly its action runs, once (after this transaction commits)."""
    approval.used_at = timezone.now()
    approval.save(update_fields=["used_at"])
