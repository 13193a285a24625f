"""Disabling a skill for one agent without deleting it, and enabling it again.

A disabled policy keeps everything else — status, approval, domains, credentials — so enabling
it restores exactly what was approved; meanwhile `skill_load_for_execution` refuses to start a
run of it (SkillDisabled, naming the skill and the agent). Both changes need the approver's
permission and are audited as policy updates whose `changes` show `disabled` going from one value
to the other (the audit trail's actions stay as they are).
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from skills.errors import PolicyTransitionNotAllowed, SkillDisabled
from skills.models import AuditAction, Policy
from skills.services import Actor, _agent_name, _audit, _lock_policy, _require_approver

#: longest reason kept with a disabled policy, in characters
MAX_REASON_CHARS = 1000


def disabled_error(policy: Policy) -> SkillDisabled:
    """The refusal for a run of a disabled policy's skill."""
    name, agent = policy.skill.name, _agent_name(policy.agent)
    reason = f" ({policy.disabled_reason})" if policy.disabled_reason else ""
    return SkillDisabled(
        f"Skill {name!r} is disabled for agent {agent!r}{reason}; staff enable it again in the "
        "admin before it can run.",
        details={"name": name, "agent": agent},
    )


def _mark(
    locked: Policy, *, actor: Actor, disabled: bool, by=None, reason: str = "", why: str
) -> Policy:
    """Write the locked policy's disabled columns (disabled now by `by` for `reason`, or
    enabled) and the audit row of that change, whose reason is `why`."""
    previous = locked.disabled_reason
    locked.disabled_at = timezone.now() if disabled else None
    locked.disabled_by = by if disabled else None
    locked.disabled_reason = reason if disabled else ""
    locked.save(update_fields=["disabled_at", "disabled_by", "disabled_reason", "updated_at"])
    changes: dict = {"disabled": {"old": not disabled, "new": disabled}}
    if not disabled:
        changes["disabled_reason"] = {"old": previous, "new": ""}
    _audit(
        action=AuditAction.POLICY_UPDATED,
        actor=actor,
        policy=locked,
        from_status=locked.status,
        to_status=locked.status,
        reason=why,
        changes=changes,
    )
    return locked


def policy_disable(*, policy: Policy | int, actor: Actor, reason: str = "") -> Policy:
    """Disable the policy's skill for its agent. Refused when it is disabled already."""
    _require_approver(actor, what="disable skills")
    reason = reason.strip()[:MAX_REASON_CHARS]
    with transaction.atomic():
        locked = _lock_policy(policy_id=policy if isinstance(policy, int) else policy.pk)
        if locked.disabled_at is not None:
            raise PolicyTransitionNotAllowed(
                f"Skill {locked.skill.name!r} is already disabled for agent "
                f"{_agent_name(locked.agent)!r}.",
                details={"action": "disable", "status": "disabled"},
            )
        return _mark(
            locked,
            actor=actor,
            disabled=True,
            by=actor.user,
            reason=reason,
            why=f"disabled: {reason}" if reason else "disabled",
        )


def policy_enable(*, policy: Policy | int, actor: Actor) -> Policy:
    """Enable a disabled policy's skill again, with the status and approval it had."""
    _require_approver(actor, what="enable skills")
    with transaction.atomic():
        locked = _lock_policy(policy_id=policy if isinstance(policy, int) else policy.pk)
        if locked.disabled_at is None:
            raise PolicyTransitionNotAllowed(
                f"Skill {locked.skill.name!r} is not disabled for agent "
                f"{_agent_name(locked.agent)!r}.",
                details={"action": "enable", "status": "enabled"},
            )
        return _mark(locked, actor=actor, disabled=False, why="enabled again")


#: the reason a policy released after use carries (see policy_release)
RELEASE_REASON = "released after use by the skill cortex"


def policy_is_released(policy: Policy) -> bool:
    """Whether the policy is disabled by a release (not by staff: a release has no user)."""
    return (
        policy.disabled_at is not None
        and policy.disabled_by_id is None
        and policy.disabled_reason == RELEASE_REASON
    )


def policy_release(*, policy: Policy | int, actor: Actor) -> Policy | None:
    """Release an acquired skill after use (seed 003 §4.5): its policy is disabled, everything
    else (versions, status, approval) kept. It only narrows what the agent may run, so no
    approver is needed. A policy disabled already (released, or by staff) is left as it is
    (None)."""
    with transaction.atomic():
        locked = _lock_policy(policy_id=policy if isinstance(policy, int) else policy.pk)
        if locked.disabled_at is not None:
            return None
        return _mark(locked, actor=actor, disabled=True, reason=RELEASE_REASON, why=RELEASE_REASON)


def policy_reactivate(*, policy: Policy | int, actor: Actor) -> Policy:
    """Enable a released policy again for a new use the user confirmed: it returns exactly to
    what was approved (the approval is still checked against the content when the run loads
    it). Refused for a policy staff disabled (only staff enable that) and for one not
    disabled."""
    with transaction.atomic():
        locked = _lock_policy(policy_id=policy if isinstance(policy, int) else policy.pk)
        if not policy_is_released(locked):
            raise PolicyTransitionNotAllowed(
                f"Skill {locked.skill.name!r} is not released for agent "
                f"{_agent_name(locked.agent)!r}"
                + (" (staff disabled it; staff enable it)." if locked.disabled_at else "."),
                details={"action": "reactivate", "rule": "only_released_policies"},
            )
        return _mark(locked, actor=actor, disabled=False, why="taken up again for a confirmed use")
