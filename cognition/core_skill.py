"""core.skill: list, search, describe, review, approve, reject, update, delete and import an
agent's skills, and acquire new ones from the configured skill sources (find, acquire).

list, search, describe, review, import and find need no consent; approve, reject, update,
delete and acquire pass the consent gate first.
"""

from __future__ import annotations

from typing import Any

from runs.errors import InvalidRunParams
from skills import bundle as bundle_lib
from skills.approval import approval_proposal, skill_approve
from skills.errors import PolicyTransitionNotAllowed, SkillNotFound
from skills.imports import skill_import_pasted
from skills.index.disclosure import skill_describe
from skills.index.search import query_normalise, skill_search
from skills.install import skill_delete
from skills.models import Policy, PolicyStatus
from skills.policy_edits import policy_create, policy_update
from skills.reviewing import policy_reject, policy_review
from skills.selectors import policy_detail
from skills.services import Actor

from .core import _SKILL_NAME, gate, skill_actor
from .core_forge import FORGE_ACTIONS, core_forge
from .errors import SkillShared
from .models import Agent
from .principals import Principal
from .selectors import agents_visible_to
from .sources.acquisition import acquisition_install
from .sources.candidates import candidates_find

SKILL_ACTIONS = (
    "list",
    "search",
    "describe",
    "review",
    "approve",
    "reject",
    "update",
    "delete",
    "import",
    "find",
    "acquire",
    "perceive",
    "plan",
    "take_up",
    "retain",
    *FORGE_ACTIONS,
)


def skill_policy(*, agent: Agent, name: Any) -> Policy:
    """The agent's policy for skill `name`; 404 whether the skill or the policy is absent."""
    if not isinstance(name, str) or not _SKILL_NAME.fullmatch(name):
        shown = str(name)[:80]
        raise SkillNotFound(
            f"No skill named {shown!r} for agent {agent.name!r}.", details={"name": shown}
        )
    policy = (
        Policy.objects.select_related("skill", "skill__current_version", "agent", "approved_by")
        .filter(skill__name=name, agent=agent)
        .first()
    )
    if policy is None:
        raise SkillNotFound(
            f"No skill named {name!r} for agent {agent.name!r}.", details={"name": name}
        )
    return policy


def _policy_to_review(*, principal: Principal, agent: Agent, name: Any) -> Policy:
    """The agent's policy for `name`. A skill that another agent of the same owner holds gets a
    policy of this agent's own first (needs_reapproval; seed 000 Scenario 5: each agent approves
    a shared skill itself). Any other skill without a policy is not found."""
    try:
        return skill_policy(agent=agent, name=name)
    except SkillNotFound:
        if not Policy.objects.filter(skill__name=name, agent__owner_id=agent.owner_id).exists():
            raise
    try:
        return policy_create(skill=name, agent=agent, actor=skill_actor(principal))
    except PolicyTransitionNotAllowed:  # created meanwhile
        return skill_policy(agent=agent, name=name)


def skill_detail(*, policy: Policy) -> dict[str, Any]:
    policy = Policy.objects.select_related(
        "skill",
        "skill__current_version",
        "agent",
        "approved_by",
        "approved_version",
        "disabled_by",
    ).get(pk=policy.pk)
    return {
        **policy_detail(policy=policy),
        "description": policy.skill.description,
        # disabled by staff: status and approval are kept, but no run of it starts
        "disabled": policy.disabled_at is not None,
        "disabled_at": policy.disabled_at.isoformat() if policy.disabled_at else None,
        "disabled_by": policy.disabled_by.get_username() if policy.disabled_by else None,
        "disabled_reason": policy.disabled_reason,
    }


def skill_review_facts(*, principal: Principal, policy: Policy) -> dict[str, Any]:
    """Run the deterministic review when due; return the stored facts."""
    if policy.status in (PolicyStatus.PENDING_REVIEW, PolicyStatus.NEEDS_REAPPROVAL):
        policy = policy_review(policy=policy, actor=skill_actor(principal))
    return {
        "skill": policy.skill.name,
        "status": policy.status,
        "reviewed_hash": policy.reviewed_hash,
        "reviewed_at": policy.reviewed_at.isoformat() if policy.reviewed_at else None,
        "facts": policy.review_facts,
        "proposal": approval_proposal(policy=policy).to_dict(),
    }


def skill_import_for(
    *, principal: Principal, agent: Agent, text: str, install_as: str | None = None
) -> Policy:
    """Import a pasted SKILL.md for `agent` (pending_review), under `install_as` when given;
    refuses another agent's name, and a name installed from another source."""
    try:
        name = install_as or bundle_lib.bundle_from_pasted(text).name
    except bundle_lib.BundleError:
        name = None  # the import service reports every problem of the text
    if name is not None:
        # Skills are shared by name; new content becomes everyone's current version, so only
        # the admin may put content under a name other agents hold.
        holders = Policy.objects.filter(skill__name=name)
        if principal.agent is not None:
            holders = holders.exclude(agent=principal.agent)
        else:
            holders = holders.exclude(agent__in=agents_visible_to(user=principal.user))
        if holders.exists():
            raise SkillShared(
                f"A skill named {name!r} is already used by other agents; pick another name, "
                "or have an administrator import the new version in the admin.",
                details={"name": name},
            )
    result = skill_import_pasted(
        text=text, actor=skill_actor(principal), agent=agent, source="api", install_as=install_as
    )
    assert result.policy is not None  # an import with an agent always has its policy
    return result.policy


def skill_delete_for(*, principal: Principal, policy: Policy, actor: Actor) -> None:
    """Delete the skill unless agents the caller does not act for hold a policy for it."""
    others = Policy.objects.filter(skill=policy.skill).exclude(agent=policy.agent)
    if principal.agent is None:
        others = others.exclude(agent__in=agents_visible_to(user=principal.user))
    if others.exists():
        raise SkillShared(
            f"Skill {policy.skill.name!r} is also used by other agents; only a superuser or the "
            "admin can delete it for everyone.",
            details={"name": policy.skill.name},
        )
    skill_delete(skill=policy.skill, actor=actor, reason="deleted through the API")


def core_skill(
    *,
    principal: Principal,
    agent: Agent,
    action: str,
    trigger: str | None,
    name: str | None = None,
    status: str | None = None,
    note: str = "",
    skill_md: str | None = None,
    fields: dict[str, Any] | None = None,
    query: str | None = None,
    acquisition: Any = None,
    keep: Any = None,
    **forge: Any,
) -> dict[str, Any]:
    """core.skill: list, search (ranked by the skill index), describe (the whole SKILL.md),
    review, approve, reject, update, delete, import (mutations gated); find (candidates from
    the skill sources, with their review) and, gated, acquire (install and approve one on the
    user's yes); the cortex's perceive (query: the task), plan (name, query) and, gated, take_up
    (a released skill, for a use the user confirmed) and retain (keep: the user's answer to the
    retention suggestion); and SkillForge's create, edit, improve, flows, flow, answer, deploy,
    decline, cancel (`forge`: request, flow_id, answer, domains, credentials, confirm_domains;
    see cognition.core_forge)."""
    from .selectors import skills_for_agent

    if action not in SKILL_ACTIONS:
        raise InvalidRunParams(
            f"action: {action!r} is not one of {', '.join(SKILL_ACTIONS)}", field="action"
        )
    if action in FORGE_ACTIONS:
        return core_forge(
            principal=principal,
            agent=agent,
            action=action,
            trigger=trigger,
            name=name,
            note=note,
            **forge,
        )
    if action == "list":
        if status is not None and status not in PolicyStatus.values:
            raise InvalidRunParams(
                f"status: {status!r} is not one of {', '.join(PolicyStatus.values)}",
                field="status",
            )
        return {
            "skills": [
                {
                    "name": s.name,
                    "description": s.description,
                    "status": s.policy_status,
                    "version": s.version_number,
                    "content_hash": s.content_hash,
                }
                for s in skills_for_agent(agent=agent, status=status).order_by("name")[:200]
            ]
        }
    if action == "search":
        if not isinstance(query, str):
            raise InvalidRunParams("query: what the skill should do", field="query")
        result = skill_search(query=query, agent=agent)
        return {"mode": result.mode, "skills": [h.as_dict() for h in result.hits]}
    if action == "describe":
        if not isinstance(name, str) or not _SKILL_NAME.fullmatch(name):
            raise InvalidRunParams("name: the skill to describe", field="name")
        return skill_describe(name=name, agent=agent)
    if action == "find":
        if not isinstance(query, str):
            raise InvalidRunParams("query: 3-5 keywords of what the skill should do", field="query")
        return candidates_find(agent=agent, query=query)
    if action == "acquire":
        actor = gate(principal=principal, action="skill.acquire", trigger=trigger)
        narrowed = (fields or {}).get("tools")
        return acquisition_install(
            acquisition_id=acquisition, agent=agent, name=name, actor=actor, tools=narrowed
        )
    if action in ("perceive", "plan", "take_up", "retain"):
        return _cortex_action(
            principal=principal,
            agent=agent,
            action=action,
            trigger=trigger,
            name=name,
            query=query,
            keep=keep,
        )
    if action == "import":
        if not isinstance(skill_md, str) or not skill_md.strip():
            raise InvalidRunParams("skill_md: the SKILL.md text is required", field="skill_md")
        return skill_detail(
            policy=skill_import_for(principal=principal, agent=agent, text=skill_md)
        )
    if action == "review":
        policy = _policy_to_review(principal=principal, agent=agent, name=name)
        return skill_review_facts(principal=principal, policy=policy)
    policy = skill_policy(agent=agent, name=name)
    actor = gate(principal=principal, action=f"skill.{action}", trigger=trigger)
    if action == "approve":
        return skill_detail(policy=skill_approve(policy=policy, actor=actor, note=note or ""))
    if action == "reject":
        if not isinstance(note, str) or not note.strip():
            raise InvalidRunParams("note: a rejection needs a note", field="note")
        return skill_detail(policy=policy_reject(policy=policy, actor=actor, note=note))
    if action == "delete":
        skill_delete_for(principal=principal, policy=policy, actor=actor)
        return {"deleted": policy.skill.name}
    data = dict(fields or {})
    if not set(data) - {"reason"}:
        raise InvalidRunParams("fields: give at least one policy field to update", field="fields")
    return skill_detail(
        policy=policy_update(
            policy=policy,
            actor=actor,
            allowed_domains=data.get("domains"),
            required_credentials=data.get("credentials"),
            tools=data.get("tools"),
            dependencies=data.get("dependencies"),
            inputs=data.get("inputs"),
            set_credentials=data.get("credential_values"),
            clear_credentials=data.get("clear_credential_values"),
            reason=data.get("reason", "") or "",
        )
    )


def _cortex_action(
    *,
    principal: Principal,
    agent: Agent,
    action: str,
    trigger: str | None,
    name: str | None,
    query: str | None,
    keep: Any,
) -> dict[str, Any]:
    """The skill cortex's face in core.skill (cognition.cortex)."""
    from . import cortex
    from .cortex.cleanup import activate, retain

    if action == "perceive":
        if not isinstance(query, str):
            raise InvalidRunParams("query: the task to perceive", field="query")
        query_normalise(query, over_limit="refuse")
        return cortex.perceive(agent=agent, task=query).as_dict()
    if not isinstance(name, str) or not _SKILL_NAME.fullmatch(name):
        raise InvalidRunParams(f"name: the skill to {action.replace('_', ' ')}", field="name")
    if action == "plan":
        if not isinstance(query, str) or not query.strip():
            raise InvalidRunParams("query: the task the skill is to run for", field="query")
        task, _ = query_normalise(query, over_limit="refuse")
        return cortex.execution_plan(agent=agent, skill=name, task=task)
    if action == "retain" and not isinstance(keep, bool):
        raise InvalidRunParams(
            "keep: true keeps the skill long-term, false releases it", field="keep"
        )
    policy = skill_policy(agent=agent, name=name)
    actor = gate(principal=principal, action=f"skill.{action}", trigger=trigger)
    if action == "take_up":
        return {
            "skill": policy.skill.name,
            "taken_up": activate(agent=agent, skill=name, actor=actor),
        }
    return retain(agent=agent, skill=name, keep=keep, actor=actor).as_dict()
