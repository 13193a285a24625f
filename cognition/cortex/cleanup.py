"""Cleanup after use (seed 003 §4.5): release by default, suggest keeping what proved itself.

- release: the agent's policy for the acquired skill is disabled (skills.disabling
  .policy_release); its versions stay for the audit, and the cortex keeps the candidate, so a
  later task can take it up again (`activate`, after the user's confirmation);
- retention is suggested when successes ≥ 3, weight ≥ 0.8 and SKILL.md < 8,000 characters; the
  skill stays enabled until the user answers (`retain`): yes makes it a long-term skill of the
  agent and removes it from the cortex, no releases it;
- failures: task_mismatch and runtime_error release (the recovery rules); the others keep the
  skill for the recovery (a retry, new credentials, a confirmed dependency).

The release after a use is decided inside the learning's transaction and recorded there as a
follow-up (cognition.cortex.follow_ups), so it survives a worker dying right after that commit;
`cleanup_after` carries it out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from skills.disabling import policy_is_released, policy_reactivate, policy_release
from skills.errors import SkillNotFound
from skills.models import Policy
from skills.services import Actor

from .follow_ups import (
    RETAIN_MAX_SKILL_MD_CHARS,
    RETAIN_MIN_SUCCESSES,
    RETAIN_MIN_WEIGHT,
    follow_ups_for_outcome,
    retention_suggested,
)
from .learning import LearnResult
from .locking import cortex_locked
from .models import CortexCandidate, FollowUpAction

__all__ = [
    "RETAIN_MAX_SKILL_MD_CHARS",
    "RETAIN_MIN_SUCCESSES",
    "RETAIN_MIN_WEIGHT",
    "Cleanup",
    "activate",
    "cleanup_after",
    "release",
    "retain",
    "retention_suggested",
]


@dataclass
class Cleanup:
    """What happened to the skill after a use: "released", "kept" (for a recovery), or
    "retention_suggested" (the user is asked)."""

    skill: str
    action: str

    def as_dict(self) -> dict[str, Any]:
        return {"skill": self.skill, "action": self.action}


def _policy(agent: Any, skill: str) -> Policy | None:
    return Policy.objects.filter(agent_id=agent.pk, skill__name=skill).first()


def release(*, agent: Any, skill: str) -> bool:
    """Release `skill` for `agent`; False when there is nothing to release."""
    policy = _policy(agent, skill)
    if policy is None:
        return False
    return policy_release(policy=policy, actor=Actor.system("skill cortex")) is not None


def cleanup_after(*, agent: Any, result: LearnResult) -> Cleanup:
    """Apply §4.5 after one learned outcome: carry out the release its learning recorded (at
    most once, whoever else tries too) and say what became of the skill."""
    follow_ups_for_outcome(result.key, agent_id=agent.pk)
    if FollowUpAction.RELEASE in result.follow_ups:
        return Cleanup(result.skill, "released")
    if result.success:
        return Cleanup(result.skill, "retention_suggested")
    return Cleanup(result.skill, "kept")


def retain(*, agent: Any, skill: str, keep: bool, actor: Actor) -> Cleanup:
    """The user's answer to the retention suggestion. Yes: the skill leaves the cortex and
    stays enabled as a long-term skill (taken up again if it was released). No: released."""
    policy = _policy(agent, skill)
    if policy is None:
        raise SkillNotFound(
            f"No skill named {skill!r} for agent {agent.name!r}.", details={"name": skill}
        )
    if not keep:
        release(agent=agent, skill=skill)
        return Cleanup(skill, "released")
    with cortex_locked(agent.pk) as cortex:
        CortexCandidate.objects.filter(region__cortex=cortex, skill=policy.skill).delete()
        from django.utils import timezone

        from .pruning import prune

        prune(cortex, now=timezone.now())
    if policy_is_released(policy):
        policy_reactivate(policy=policy, actor=actor)
    return Cleanup(skill, "retained")


def activate(*, agent: Any, skill: str, actor: Actor) -> bool:
    """Take a released skill up again for a use the user confirmed (or was notified of, on the
    reflex path); True when it was released. A skill staff disabled stays disabled."""
    policy = _policy(agent, skill)
    if policy is None or not policy_is_released(policy):
        return False
    policy_reactivate(policy=policy, actor=actor)
    return True
