"""core.task: list an agent's runs, read one, and act on it (cancel, respond, approve, reject,
retry). Another agent's run is not found, like a missing one.
"""

from __future__ import annotations

from typing import Any

from runs import selectors as run_selectors
from runs.errors import InvalidRunParams, RunNotFound
from runs.models import ApprovalRequest, ApprovalStatus, MotorRun
from runs.services import run_approve, run_cancel, run_reject, run_respond, run_retry

from .consent import consent_check
from .core import _require_storable, actor_label
from .models import Agent
from .principals import Principal

TASK_ACTIONS = ("list", "status", "cancel", "respond", "approve", "reject", "log", "retry")
#: most runs core.task list returns at once (seed 001 `limit`)
TASK_LIST_MAX = 100


def own_run(*, agent: Agent, run_id: Any) -> MotorRun:
    """The agent's run `run_id`; another agent's run is not found (404), like a missing one."""
    if not isinstance(run_id, str) or not run_id or len(run_id) > 32 or "\x00" in run_id:
        raise RunNotFound(f"no run with id {str(run_id)[:40]!r}", run_id=str(run_id)[:40])
    run = MotorRun.objects.filter(pk=run_id, agent=agent).first()
    if run is None:
        raise RunNotFound(f"no run with id {run_id!r}", run_id=run_id)
    return run


def pending_approval(*, run: MotorRun) -> dict[str, Any] | None:
    approval = (
        ApprovalRequest.objects.filter(run=run, status=ApprovalStatus.PENDING)
        .order_by("-id")
        .first()
    )
    if approval is None:
        return None
    return {
        "id": approval.pk,
        "tool": approval.action.get("tool"),
        "arguments": approval.action.get("arguments"),
        "summary": approval.summary,
        "action_hash": approval.action_hash,
        "expires_at": approval.expires_at.isoformat(),
    }


def run_detail(*, run: MotorRun) -> dict[str, Any]:
    """Status, steps, pending question and pending approval of one run (JSON-safe)."""
    data = run_selectors.run_status(run_id=run.pk)
    assert data is not None
    data["pending_approval"] = pending_approval(run=run)
    data["skill"] = run.skill.name if run.skill_id and run.skill else None
    data["review"] = run.review
    data["trigger"] = run.trigger
    for key in ("created_at", "started_at", "completed_at"):
        data[key] = data[key].isoformat() if data[key] else None
    return data


def core_task(
    *,
    principal: Principal,
    agent: Agent,
    action: str,
    trigger: str | None,
    run_id: str | None = None,
    status: str | None = None,
    limit: int | None = None,
    answer: str | None = None,
    approval_id: int | None = None,
    note: str = "",
    guidance: str = "",
) -> dict[str, Any]:
    """core.task: list, status, cancel, respond, approve, reject, log, retry.

    respond, approve and reject pass the consent gate first; a refusal changes nothing.
    """
    if action not in TASK_ACTIONS:
        raise InvalidRunParams(
            f"action: {action!r} is not one of {', '.join(TASK_ACTIONS)}", field="action"
        )
    if action == "list":
        from runs.models import RunStatus

        if status is not None and status not in RunStatus.values:
            raise InvalidRunParams(
                f"status: {status!r} is not one of {', '.join(RunStatus.values)}", field="status"
            )
        count = 20 if limit is None else limit
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 100:
            raise InvalidRunParams("limit: must be an integer in 1..100", field="limit")
        rows, total = run_selectors.run_list(agent_id=agent.pk, status=status, limit=count)
        for row in rows:
            for key in ("started_at", "completed_at"):
                row[key] = row[key].isoformat() if row[key] else None
        return {"runs": rows, "total": total}
    run = own_run(agent=agent, run_id=run_id)
    if action == "status":
        return run_detail(run=run)
    if action == "log":
        return {"run_id": run.pk, "log": run_selectors.run_log(run_id=run.pk) or ""}
    if action == "cancel":
        return dict(run_cancel(run_id=run.pk, actor=actor_label(principal)))
    if action == "retry":
        if not isinstance(guidance, str):
            raise InvalidRunParams("guidance: must be a string", field="guidance")
        changed = run_retry(run_id=run.pk, guidance=guidance, actor=actor_label(principal))
        run.refresh_from_db()
        return {**changed, "attempt_index": run.current_attempt_index}
    _require_storable(answer=answer, note=note, guidance=guidance)
    gated = {"respond": "task.respond", "approve": "task.approve", "reject": "task.reject"}
    consent_check(principal=principal, action=gated[action], trigger=trigger)
    label = actor_label(principal, relayed=True)
    if action == "respond":
        if not isinstance(answer, str):
            raise InvalidRunParams("answer: must be a non-empty string", field="answer")
        return dict(run_respond(run_id=run.pk, answer=answer, actor=label))
    chosen = approval_id
    if chosen is None:
        current = pending_approval(run=run)
        if current is None:
            from runs.errors import InvalidTransition

            raise InvalidTransition(
                f"run {run.pk} is {run.status}; it has no pending approval",
                run_id=run.pk,
                status=run.status,
            )
        chosen = current["id"]
    if isinstance(chosen, bool) or not isinstance(chosen, int) or not 0 < chosen < 2**63:
        raise InvalidRunParams("approval_id: must be a positive integer", field="approval_id")
    if action == "approve":
        return dict(run_approve(run_id=run.pk, approval_id=chosen, actor=label))
    if not isinstance(note, str):
        raise InvalidRunParams("note: must be a string", field="note")
    return dict(run_reject(run_id=run.pk, approval_id=chosen, actor=label, note=note))
