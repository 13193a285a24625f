"""A policy's way through review: the deterministic review of the current content, then a
person's approval or rejection, and rolling back to an older version.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from skills import bundle as bundle_lib
from skills.crypto import decrypt_json
from skills.errors import (
    PolicyTransitionNotAllowed,
    PolicyValidationError,
    SkillHashMismatch,
    SkillNotFound,
    SkillVersionNotFound,
    StaleReview,
)
from skills.models import AuditAction, Policy, PolicyAuditEvent, PolicyStatus, Skill, SkillVersion
from skills.services import (
    Actor,
    _agent_name,
    _apply,
    _audit,
    _lock_skill_and_policy,
    _recompute_hash,
    _require_approver,
    _require_storable,
    _version_files,
)


def _last_approved_version(policy: Policy) -> SkillVersion | None:
    if policy.approved_version_id is not None:
        return policy.approved_version
    event = (
        PolicyAuditEvent.objects.filter(
            policy=policy,
            action__in=[AuditAction.APPROVED, AuditAction.ROLLED_BACK],
            to_status=PolicyStatus.APPROVED,
        )
        .order_by("-created_at", "-id")
        .first()
    )
    if event is None or event.version_number is None:
        return None
    return SkillVersion.objects.filter(skill=policy.skill, number=event.version_number).first()


def policy_review(*, policy: Policy | int, actor: Actor) -> Policy:
    """Compute and store the deterministic review of the skill's current version for this policy.

    Facts (skills.bundle.review_bundle) plus the diff against the last version this agent
    approved; pending_review (or needs_reapproval) → reviewed. A reviewed policy whose review
    covers content that is no longer current (another agent's run or an import installed a new
    version) is reviewed again; a current review is not redone.
    """
    with transaction.atomic():
        skill, policy = _lock_skill_and_policy(policy)
        version = skill.current_version
        if version is None:
            raise SkillNotFound(f"Skill {skill.name!r} has no installed version.")
        stale = (
            policy.status == PolicyStatus.REVIEWED and policy.reviewed_hash != version.content_hash
        )
        if not stale and policy.status not in (
            PolicyStatus.PENDING_REVIEW,
            PolicyStatus.NEEDS_REAPPROVAL,
        ):
            raise PolicyTransitionNotAllowed(
                f"Cannot review policy of skill {skill.name!r} for agent "
                f"{_agent_name(policy.agent)!r}: status is {policy.status!r}.",
                details={"action": "review", "status": policy.status},
            )
        files = _version_files(version)
        computed = _recompute_hash(files)
        if computed != version.content_hash:
            raise SkillHashMismatch(
                f"Skill {skill.name!r} v{version.number}: stored files hash to {computed}, "
                f"not the recorded {version.content_hash}; refusing to review tampered content.",
                details={"expected": version.content_hash, "actual": computed},
            )
        current_files = {f.path: bytes(f.data) for f in files}
        facts = bundle_lib.review_bundle(
            current_files,
            declared_domains=policy.allowed_domains,
            declared_credentials=policy.required_credentials,
            provenance=dict(version.provenance) or None,
            skill_name=skill.name,
            installed_names=Skill.objects.exclude(pk=skill.pk).values_list("name", flat=True),
        )
        facts_json: dict[str, Any] = facts.to_dict()
        facts_json["credentials_set"] = sorted(decrypt_json(policy.credential_values))
        previous = _last_approved_version(policy)
        if previous is not None and previous.pk != version.pk:
            previous_files = {f.path: bytes(f.data) for f in _version_files(previous)}
            facts_json["diff"] = bundle_lib.diff_bundles(previous_files, current_files).to_dict()
        else:
            facts_json["diff"] = None
        facts_json["diff_base_version"] = previous.number if previous else None
        facts_json["version"] = version.number
        before, after = _apply(
            policy,
            "review",
            policy.review,
            facts=facts_json,
            content_hash=version.content_hash,
            at=timezone.now(),
        )
        policy.save()
        _audit(
            action=AuditAction.REVIEWED,
            actor=actor,
            policy=policy,
            from_status=before,
            to_status=after,
            content_hash=version.content_hash,
            version_number=version.number,
        )
        return policy


def policy_approve(*, policy: Policy | int, actor: Actor, note: str = "") -> Policy:
    """Approve the skill's current content for this agent (reviewed or needs_reapproval → approved).

    Needs an active staff user with `skills.approve_policy`. From reviewed, the review must be of
    the current content (`StaleReview` otherwise). The stored bytes are re-hashed first.
    """
    _require_approver(actor, what="approve skill policies")
    return _approve(policy=policy, actor=actor, note=note)


def policy_auto_approve(*, policy: Policy | int, actor: Actor, rule: str, reason: str) -> Policy:
    """Approve without a person, as SkillForge does for a skill its risk rule lets through at
    the agent's trust level (forge.risk). `rule` names that rule; the audit row's reason says
    "auto-approved (rule <rule>): <reason>". The same checks as a person's approval apply:
    a current review, stored bytes that still hash to the version."""
    if not rule:
        raise ValueError("an automatic approval names the rule that allowed it")
    return _approve(policy=policy, actor=actor, note=f"auto-approved (rule {rule}): {reason}")


def _approve(*, policy: Policy | int, actor: Actor, note: str) -> Policy:
    _require_storable("note", note)
    with transaction.atomic():
        skill, policy = _lock_skill_and_policy(policy)
        version = skill.current_version
        if version is None:
            raise SkillNotFound(f"Skill {skill.name!r} has no installed version.")
        if policy.status == PolicyStatus.REVIEWED and policy.reviewed_hash != version.content_hash:
            raise StaleReview(
                f"The review of {skill.name!r} covers {policy.reviewed_hash}, but the current "
                f"version v{version.number} is {version.content_hash}; review it again.",
                details={"reviewed_hash": policy.reviewed_hash, "current": version.content_hash},
            )
        computed = _recompute_hash(_version_files(version))
        if computed != version.content_hash:
            raise SkillHashMismatch(
                f"Skill {skill.name!r} v{version.number}: stored files hash to {computed}, not "
                f"the recorded {version.content_hash}; refusing to approve.",
                details={"expected": version.content_hash, "actual": computed},
            )
        before, after = _apply(
            policy,
            "approve",
            policy.approve,
            by=actor.user,
            at=timezone.now(),
            content_hash=version.content_hash,
            version=version,
        )
        policy.save()
        _audit(
            action=AuditAction.APPROVED,
            actor=actor,
            policy=policy,
            from_status=before,
            to_status=after,
            reason=note,
            content_hash=version.content_hash,
            version_number=version.number,
        )
        return policy


def policy_reject(*, policy: Policy | int, note: str, actor: Actor) -> Policy:
    """Decline the skill for this agent: → pending_review with the note (which is required)."""
    note = (note or "").strip()
    if not note:
        raise PolicyValidationError(
            "A rejection needs a note saying what is wrong.",
            details={"field": "note", "rule": "required"},
        )
    _require_storable("note", note)
    with transaction.atomic():
        skill, policy = _lock_skill_and_policy(policy)
        before, after = _apply(policy, "reject", policy.reject, note=note)
        policy.save()
        version = skill.current_version
        _audit(
            action=AuditAction.REJECTED,
            actor=actor,
            policy=policy,
            from_status=before,
            to_status=after,
            reason=note,
            content_hash=version.content_hash if version else "",
            version_number=version.number if version else None,
        )
        return policy


def policy_rollback(*, policy: Policy | int, version: SkillVersion | int, actor: Actor) -> Policy:
    """Make an older version the skill's current one, as seen from this agent's policy.

    Lands approved when this agent approved that exact hash before (per the audit trail) —
    which needs the approve permission — otherwise pending_review.
    """
    with transaction.atomic():
        skill, policy = _lock_skill_and_policy(policy)
        number = version if isinstance(version, int) else version.number
        if not isinstance(version, int) and version.skill_id != skill.pk:
            raise SkillVersionNotFound(
                f"Version {version.pk} belongs to another skill, not {skill.name!r}.",
                details={"skill": skill.name, "version_id": version.pk},
            )
        target = SkillVersion.objects.filter(skill=skill, number=number).first()
        if target is None:
            raise SkillVersionNotFound(
                f"Skill {skill.name!r} has no version {number}.",
                details={"skill": skill.name, "number": number},
            )
        if skill.current_version_id == target.pk:
            raise PolicyTransitionNotAllowed(
                f"Version {number} is already the current version of {skill.name!r}.",
                details={"action": "rollback", "status": policy.status, "number": number},
            )
        computed = _recompute_hash(_version_files(target))
        if computed != target.content_hash:
            raise SkillHashMismatch(
                f"Skill {skill.name!r} v{number}: stored files hash to {computed}, not the "
                f"recorded {target.content_hash}; refusing to roll back to it.",
                details={"expected": target.content_hash, "actual": computed},
            )
        approved_before = PolicyAuditEvent.objects.filter(
            agent_ref_id=policy.agent_id,
            skill_name=skill.name,
            action__in=[AuditAction.APPROVED, AuditAction.ROLLED_BACK],
            to_status=PolicyStatus.APPROVED,
            content_hash=target.content_hash,
        ).exists()
        if approved_before:
            _require_approver(actor, what="restore an approved version")
            before, after = _apply(
                policy,
                "roll back",
                policy.restore_approved,
                by=actor.user,
                at=timezone.now(),
                content_hash=target.content_hash,
                version=target,
            )
        else:
            before, after = _apply(policy, "roll back", policy.content_changed)
        previous = skill.current_version
        skill.current_version = target
        skill.description = target.description
        skill.save(update_fields=["current_version", "description", "updated_at"])
        policy.save()
        _audit(
            action=AuditAction.ROLLED_BACK,
            actor=actor,
            policy=policy,
            from_status=before,
            to_status=after,
            reason=(
                f"v{previous.number if previous else '-'} -> v{target.number}"
                + ("; this content was approved before" if approved_before else "")
            ),
            content_hash=target.content_hash,
            version_number=target.number,
        )
        return policy
