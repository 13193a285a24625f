"""The built-in brain's rule for running a skill the cortex holds (seed 003 Phases 2 and 3.2).

Before core.act runs such a skill, the brain shows the execution plan (steps, side-effect
severity, relevant lessons) as an event in the conversation and the model gets a refusal saying
to ask the user; the run goes ahead once the user has written after that plan (their answer is
the confirmation; a "no" means the model does not ask again). The reflex fast path skips only
that confirmation: the run starts at once and the conversation still gets its notification.
Runs on a motor_result or schedule turn never skip it (nobody was asked). A skill released after
its last use is taken up again when the run goes ahead.

Long-term skills (not in the cortex) are not touched by any of this (boundary rule 1).
"""

from __future__ import annotations

from html import escape
from typing import Any

from cognition.core import skill_actor
from cognition.cortex import execution_plan, perceive
from cognition.cortex.cleanup import activate
from cognition.cortex.models import CortexCandidate
from cognition.principals import Principal
from skills.errors import SkillError

from .models import Conversation, Message, MessageRole, TurnTrigger

PLAN_EVENT = "execution_plan"
REFLEX_EVENT = "cortex_reflex"


def _latest_plan(conversation: Conversation, skill: str) -> Message | None:
    for message in conversation.messages.filter(role=MessageRole.EVENT).order_by("-id")[:50]:
        event = message.event or {}
        if event.get("type") == PLAN_EVENT and event.get("skill") == skill:
            return message
    return None


def _confirmed(conversation: Conversation, plan: Message | None, version: int) -> bool:
    """A plan of this version was shown and the user wrote after it."""
    if plan is None or (plan.event or {}).get("version") != version:
        return False
    return conversation.messages.filter(role=MessageRole.USER, id__gt=plan.id).exists()


def reflex_notice(candidate: Any, task: str) -> str:
    rate = 100 * candidate.successes / max(1, candidate.successes + candidate.failures)
    effects = ", ".join(candidate.side_effects) or "read-only"
    return (
        f"⚡ Reflex: {candidate.skill} v{candidate.version} ({rate:.0f}% success). "
        f"Task: {task[:200]} ({effects}). Running it now; say cancel to abort."
    )


def skill_run_gate(
    *,
    conversation: Conversation,
    principal: Principal,
    trigger: str,
    arguments: dict[str, Any],
    record: Any,
) -> dict[str, Any] | None:
    """None when core.act may run as asked (after writing the reflex notification, or after a
    confirmed plan; a released skill is taken up again); otherwise the refusal the model gets,
    with the plan it must show (the plan is also written to the conversation)."""
    skill = arguments.get("skill")
    if not isinstance(skill, str) or not skill or arguments.get("skill_review"):
        return None
    agent = conversation.agent
    if not CortexCandidate.objects.filter(region__cortex__agent=agent, skill__name=skill).exists():
        return None
    task = str(arguments.get("task") or "")
    try:
        plan = execution_plan(agent=agent, skill=skill, task=task)
    except SkillError:
        return None  # core.act reports the missing skill itself
    actor = skill_actor(principal)
    if trigger == TurnTrigger.USER_MESSAGE:
        reflex = perceive(agent=agent, task=task).reflex
        if reflex is not None and reflex.skill == skill and plan["reflex"]:
            record(
                conversation,
                role=MessageRole.EVENT,
                trigger=trigger,
                text=reflex_notice(reflex, task),
                event={"type": REFLEX_EVENT, "skill": skill, "version": reflex.version},
            )
            activate(agent=agent, skill=skill, actor=actor)
            return None
        if _confirmed(conversation, _latest_plan(conversation, skill), plan["version"]):
            activate(agent=agent, skill=skill, actor=actor)
            return None
    record(
        conversation,
        role=MessageRole.EVENT,
        trigger=trigger,
        text=plan_text(plan),
        event={"type": PLAN_EVENT, **plan},
    )
    return {
        "ok": False,
        "error": {
            "code": "plan_confirmation_required",
            "message": (
                f"Before {skill!r} runs, show the user this execution plan (steps, side "
                "effects, lessons) and ask them to confirm; call core_act again only after "
                "they agree."
            ),
            "details": {"plan": plan},
        },
    }


def plan_text(plan: dict[str, Any]) -> str:
    """The plan as the chat shows it."""
    lines = [f"Execution plan: {plan['skill']} v{plan['version']}"]
    lines += [f"  {i}. {step}" for i, step in enumerate(plan["steps"], start=1)]
    lines.append(f"Side effects: {', '.join(plan['severity'])}")
    for lesson in plan["lessons"]:
        what = lesson.get("key") or lesson.get("detail") or lesson.get("slug")
        lines.append(f"Lesson ({lesson['type']}, {lesson['confidence']}): {what}")
    lines.append("Confirm to run it.")
    return "\n".join(lines)


def cortex_prompt(*, agent: Any, query: str) -> str:
    """<skill_cortex> for a user's message the cortex recognises: its candidates, best first,
    with their effective weight and whether the reflex path is open; "" on a miss."""
    if not query.strip():
        return ""
    seen = perceive(agent=agent, task=query)
    if not seen.hit:
        return ""
    lines = [f'<skill_cortex region="{escape(seen.region or "")}">']
    for c in seen.candidates:
        reflex = ' reflex="ready"' if c.reflex_ready else ""
        lines.append(
            f'  <candidate skill="{escape(c.skill)}" version="{c.version}" '
            f'effective_weight="{c.effective_weight:.2f}" successes="{c.successes}" '
            f'failures="{c.failures}"{reflex}/>'
        )
    lines.append("</skill_cortex>")
    lines.append(
        "The skill cortex learned these skills fit requests like this one: prefer the first. "
        "Run it with core_act (skill=its name); you will get its execution plan to show the "
        "user first, unless it is ready for the reflex path."
    )
    return "\n".join(lines)
