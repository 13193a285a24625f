"""core.skill's SkillForge actions: create, edit or improve a skill; follow, answer, approve,
reject or cancel its flow.

Starting a flow, answering its questions and deciding its approval pass the consent gate: a
human does them, or an agent relaying its user's own words when trusted to. So the built-in
brain can offer to build a tool on any turn, but the flow starts only on the user's yes.
"""

from __future__ import annotations

from typing import Any

from forge.approving import flow_approve, flow_reject
from forge.errors import FlowNotFound
from forge.flow_services import flow_cancel, flow_respond, flow_start
from forge.models import FlowEvent, FlowMode, ForgeFlow
from runs.errors import InvalidRunParams

from .core import actor_label, gate
from .models import Agent
from .principals import Principal

FORGE_ACTIONS = (
    "create",
    "edit",
    "improve",
    "flows",
    "flow",
    "answer",
    "deploy",
    "decline",
    "cancel",
)
#: most flows one list returns
MAX_LISTED = 50


def flow_view(flow: ForgeFlow, *, events: bool = False) -> dict[str, Any]:
    """A flow as the API and the brain see it (no file contents: those are in the review)."""
    data: dict[str, Any] = {
        "flow_id": flow.id,
        "mode": flow.mode,
        "state": flow.state,
        "skill": flow.skill_name or None,
        "request": flow.request,
        "allowed_domains": flow.allowed_domains,
        "credentials": flow.credentials,
        "question": flow.pending_question or None,
        "attempt": flow.attempt,
        "message": flow.message,
        "error": flow.error or None,
        "approval": flow.approval or None,
        "version": flow.skill_version.number if flow.skill_version_id else None,
        "tools": [
            {"name": t.get("name"), "description": t.get("description")}
            for t in (flow.test_report or {}).get("tools", [])
        ],
        "tests_passed": (flow.test_report or {}).get("passed"),
        "created_at": flow.created_at.isoformat(),
        "updated_at": flow.updated_at.isoformat(),
        "finished_at": flow.finished_at.isoformat() if flow.finished_at else None,
    }
    if events:
        data["events"] = [
            {
                "from": e.from_state or None,
                "to": e.to_state,
                "actor": e.actor,
                "reason": e.reason,
                "detail": e.detail,
                "at": e.created_at.isoformat(),
            }
            for e in FlowEvent.objects.filter(flow=flow).order_by("id")
        ]
    return data


def own_flow(*, agent: Agent, flow_id: Any) -> ForgeFlow:
    """The agent's flow `flow_id`; another agent's flow is not found."""
    flow = (
        ForgeFlow.objects.select_related("skill_version")
        .filter(pk=str(flow_id), agent=agent)
        .first()
        if isinstance(flow_id, str)
        else None
    )
    if flow is None:
        shown = str(flow_id)[:80]
        raise FlowNotFound(
            f"No SkillForge flow {shown!r} for agent {agent.name!r}.", details={"flow_id": shown}
        )
    return flow


def _list(value: Any, field: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise InvalidRunParams(f"{field}: must be a list of strings", field=field)
    return value


def core_forge(
    *,
    principal: Principal,
    agent: Agent,
    action: str,
    trigger: str | None,
    name: str | None = None,
    request: str | None = None,
    flow_id: str | None = None,
    answer: str | None = None,
    domains: list[str] | None = None,
    credentials: list[str] | None = None,
    confirm_domains: list[str] | None = None,
    note: str = "",
) -> dict[str, Any]:
    """One SkillForge action of core.skill (see the module docstring for which are gated)."""
    if action == "flows":
        flows = ForgeFlow.objects.select_related("skill_version").filter(agent=agent)
        return {"flows": [flow_view(f) for f in flows.order_by("-created_at")[:MAX_LISTED]]}
    if action == "flow":
        return flow_view(own_flow(agent=agent, flow_id=flow_id), events=True)
    if action in ("create", "edit", "improve"):
        gate(principal=principal, action=f"skill.{action}", trigger=trigger)
        mode = {"create": FlowMode.CREATE, "edit": FlowMode.EDIT, "improve": FlowMode.IMPROVE}
        flow = flow_start(
            agent=agent,
            request=request,
            actor=actor_label(principal, relayed=principal.is_agent),
            mode=mode[action],
            skill_name=name or "",
            allowed_domains=_list(domains, "domains"),
            credentials=_list(credentials, "credentials"),
        )
        return flow_view(flow)
    if action == "cancel":
        flow = own_flow(agent=agent, flow_id=flow_id)
        return flow_view(flow_cancel(flow_id=flow.id, actor=actor_label(principal)))
    flow = own_flow(agent=agent, flow_id=flow_id)
    actor = gate(principal=principal, action=f"skill.forge_{action}", trigger=trigger)
    if action == "answer":
        # The answer is read for host names or vault entry names; it is never stored whole.
        return flow_view(flow_respond(flow_id=flow.id, answer=answer, actor=actor.label))
    if action == "deploy":
        return flow_view(
            flow_approve(
                flow_id=flow.id,
                actor=actor,
                confirm_domains=_list(confirm_domains, "confirm_domains"),
                note=note or "",
            )
        )
    return flow_view(flow_reject(flow_id=flow.id, actor=actor, note=note or ""))
