"""The audit row of each tool call (runs.audit_models.ToolCallAudit), written with its result:
in the same transaction for refusals, host-side tools and failures, and as one more guarded
statement of the fenced write that records a successful call's result (runs.ledger)."""

from __future__ import annotations

from typing import Any

from runs.audit import tool_audit_row
from runs.audit_models import ToolCallAudit
from runs.models import ApprovalStatus, Attempt, MotorRun, Step
from runs.policy_gate import call_facts, decide_call, standing_of
from skills.toolpolicy.decide import Verdict


def audit_call(
    run: MotorRun, attempt: Attempt, step: Step, result: dict[str, Any], *, actor: str = ""
) -> None:
    """Insert the audit row of `step`'s call with `result` (redacted by runs.audit)."""
    audit_row(run, attempt, step, result, actor=actor).save(force_insert=True)


def audit_row(
    run: MotorRun, attempt: Attempt, step: Step, result: dict[str, Any], *, actor: str = ""
) -> ToolCallAudit:
    """The unsaved audit row of `step`'s call with `result` (redacted by runs.audit)."""
    standing = standing_of(run)
    arguments = step.arguments if isinstance(step.arguments, dict) else None
    decision = decide_call(standing, step.tool, arguments)
    approval = (
        step.approvals.filter(status=ApprovalStatus.CONSUMED).order_by("-id").first()
        if step.pk is not None and decision.verdict is not Verdict.RUNS
        else None
    )
    # who decided, as the approval recorded it (older approvals name no one: the owner did)
    approved_by = (
        f"{approval.decided_by or 'owner'} (approval {approval.pk})" if approval is not None else ""
    )
    return tool_audit_row(
        call_facts(
            standing,
            run_id=run.pk,
            attempt=attempt.index + 1,  # Attempt.index counts from 0
            iteration=step.iteration,
            call_index=step.call_index,
            actor=actor or run.lease_owner or "runtime",
        ),
        tool=step.tool,
        arguments=arguments,
        result=result,
        decision=decision.rule,
        approval_required=decision.verdict is Verdict.NEEDS_APPROVAL,
        approved_by=approved_by,
    )
