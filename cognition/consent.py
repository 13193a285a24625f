"""The consent gate (seed 000 "Consent Gating").

Mutations a human must agree to — approve, reject, delete, update and acquire on skills; respond,
approve and reject on tasks; create, update and enable on schedules (they start unattended runs
with a skill's policy later) — pass for a human principal. An agent passes only when the call
declares it was
triggered by a user message *and* the agent is trusted to relay its user's consent
(`Agent.trusted_for_relayed_consent`, off by default). Everything else is refused before any
state is touched.
"""

from __future__ import annotations

from .errors import ConsentRequired
from .principals import Principal

USER_MESSAGE = "user_message"
TRIGGER_HEADER = "X-Motor-Trigger"

GATED_ACTIONS = frozenset(
    {
        "skill.approve",
        "skill.reject",
        "skill.delete",
        "skill.update",
        # installing and approving a skill from a skill source (cognition.sources)
        "skill.acquire",
        # the skill cortex: taking a released skill up again, keeping one long-term
        "skill.take_up",
        "skill.retain",
        # SkillForge: a flow starts, takes an answer and is deployed only on a person's word.
        "skill.create",
        "skill.edit",
        "skill.improve",
        "skill.forge_answer",
        "skill.forge_deploy",
        "skill.forge_decline",
        # A deployed MCP tool that is not declared read-only changes something outside.
        "mcp.call_write",
        "task.respond",
        "task.approve",
        "task.reject",
        # Schedules start runs later, unattended, with the skill's policy (cognition.schedules).
        "schedule.create",
        "schedule.update",
        "schedule.enable",
    }
)


def consent_check(*, principal: Principal, action: str, trigger: str | None) -> None:
    """Raise `ConsentRequired` (403, code consent_required) unless `principal` may do `action`."""
    if action not in GATED_ACTIONS:
        return
    if principal.is_human:
        return
    agent = principal.agent
    assert agent is not None  # an agent principal always carries its agent
    if trigger == USER_MESSAGE and agent.trusted_for_relayed_consent:
        return
    if trigger != USER_MESSAGE:
        why = (
            f"the call declares trigger {trigger!r}, not {USER_MESSAGE!r}"
            if trigger
            else f"the call declares no trigger (send {TRIGGER_HEADER}: {USER_MESSAGE})"
        )
    else:
        why = f"agent {agent.name!r} is not trusted to relay its user's consent"
    raise ConsentRequired(
        f"{action} needs a human's consent: {why}. A human must do this in the admin or with "
        "their own credentials.",
        details={
            "action": action,
            "trigger": trigger,
            "trusted_for_relayed_consent": agent.trusted_for_relayed_consent,
        },
    )
