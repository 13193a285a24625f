"""What every state change of the skills app shares: who acts, the audit row, transitions, locks.

Every state-changing function is keyword-only, takes an `actor` and runs inside
`transaction.atomic()`: it locks the rows it changes (always the `Skill` row before any `Policy`
row, so two services never wait on each other in opposite order), calls a django-fsm transition,
saves and writes a `PolicyAuditEvent` in the same transaction. A refused operation raises a
`skills.errors` error and leaves the database as it was.

The changes themselves live in topical modules: `skills.install` (installing and deleting),
`skills.extraction` (a run's workspace), `skills.loading` (a skill for a run),
`skills.reviewing` (review, approve, reject, roll back), `skills.policy_edits` (create and
edit a policy), `skills.approval` and `skills.disabling`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import IntegrityError, transaction
from django.db.models import Model
from django_fsm import TransitionNotAllowed

from skills import bundle as bundle_lib
from skills.errors import (
    ApprovalPermissionDenied,
    PolicyNotFound,
    PolicyTransitionNotAllowed,
    PolicyValidationError,
    SkillNotFound,
)
from skills.models import Policy, PolicyAuditEvent, PolicyStatus, Skill, SkillFile, SkillVersion

APPROVE_PERMISSION = "skills.approve_policy"
REDACTED = "[set]"


# --- actors ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Actor:
    """Who performs a change: a user (or None for the system) and a label for the audit trail.

    Labels read like "admin:alice", "run 42", "import", "system".
    """

    user: AbstractBaseUser | None
    label: str

    @classmethod
    def from_user(cls, user: AbstractBaseUser | AnonymousUser, *, prefix: str = "admin") -> Actor:
        if not getattr(user, "is_authenticated", False):
            return cls(user=None, label="anonymous")
        return cls(user=user, label=f"{prefix}:{user.get_username()}")  # type: ignore[arg-type]

    @classmethod
    def system(cls, label: str = "system") -> Actor:
        return cls(user=None, label=label)


# --- helpers ---------------------------------------------------------------------------------


def _agent_name(agent: Model | None) -> str:
    return str(getattr(agent, "name", "")) if agent is not None else ""


def _audit(
    *,
    action: str,
    actor: Actor,
    skill: Skill | None = None,
    skill_name: str = "",
    policy: Policy | None = None,
    agent: Model | None = None,
    from_status: str = "",
    to_status: str = "",
    reason: str = "",
    content_hash: str = "",
    version_number: int | None = None,
    changes: Mapping[str, Any] | None = None,
) -> PolicyAuditEvent:
    if policy is not None:
        skill = skill or policy.skill
        agent = agent or policy.agent
    return PolicyAuditEvent.objects.create(
        policy=policy,
        skill=skill,
        skill_name=skill_name or (skill.name if skill is not None else ""),
        agent=agent,
        agent_ref_id=agent.pk if agent is not None else None,
        agent_name=_agent_name(agent),
        actor=actor.user,
        actor_label=actor.label[:200],
        action=action,
        from_status=from_status,
        to_status=to_status,
        reason=reason,
        content_hash=content_hash,
        version_number=version_number,
        changes=dict(changes or {}),
    )


def _apply(policy: Policy, action: str, method: Any, /, **kwargs: Any) -> tuple[str, str]:
    """Run a transition; turn django-fsm's refusal into a domain error. Returns (from, to)."""
    before = policy.status
    try:
        method(**kwargs)
    except TransitionNotAllowed as exc:
        raise PolicyTransitionNotAllowed(
            f"Cannot {action} policy of skill {policy.skill.name!r} for agent "
            f"{_agent_name(policy.agent)!r}: status is {before!r}.",
            details={"action": action, "status": before},
        ) from exc
    return before, policy.status


def _lock_skill(*, skill_id: int | None = None, name: str | None = None) -> Skill:
    qs = Skill.objects.select_for_update(of=("self",))
    try:
        if skill_id is not None:
            return qs.get(pk=skill_id)
        return qs.get(name=name)
    except Skill.DoesNotExist:
        raise SkillNotFound(
            f"No skill named {name!r}." if name else f"No skill with id {skill_id}.",
            details={"name": name} if name else {"id": skill_id},
        ) from None


def _lock_policy(*, policy_id: int) -> Policy:
    try:
        return (
            Policy.objects.select_for_update(of=("self",))
            .select_related("skill", "agent")
            .get(pk=policy_id)
        )
    except Policy.DoesNotExist:
        raise PolicyNotFound(f"No policy with id {policy_id}.", details={"id": policy_id}) from None


def _lock_skill_and_policy(policy: Policy | int) -> tuple[Skill, Policy]:
    policy_id = policy if isinstance(policy, int) else policy.pk
    # Skill first (lock order), found through an unlocked read of the policy.
    skill_id = Policy.objects.filter(pk=policy_id).values_list("skill_id", flat=True).first()
    if skill_id is None:
        raise PolicyNotFound(f"No policy with id {policy_id}.", details={"id": policy_id})
    skill = _lock_skill(skill_id=skill_id)
    return skill, _lock_policy(policy_id=policy_id)


def _get_or_create_locked_skill(name: str, description: str, source: str) -> tuple[Skill, bool]:
    """The Skill row for `name`, locked, created from `source` when missing (race-safe on the
    unique name)."""
    created = False
    if not Skill.objects.filter(name=name).exists():
        try:
            with transaction.atomic():
                Skill.objects.create(name=name, description=description, source=source)
                created = True
        except IntegrityError:
            # Another transaction created it first; its row is committed now.
            created = False
    return _lock_skill(name=name), created


def _get_or_create_locked_policy(
    skill: Skill, agent: Model, *, status: str = PolicyStatus.PENDING_REVIEW, **defaults: Any
) -> tuple[Policy, bool]:
    created = False
    if not Policy.objects.filter(skill=skill, agent=agent).exists():
        try:
            with transaction.atomic():
                Policy.objects.create(skill=skill, agent=agent, status=status, **defaults)
                created = True
        except IntegrityError:
            created = False
    policy = (
        Policy.objects.select_for_update(of=("self",))
        .select_related("skill", "agent")
        .get(skill=skill, agent=agent)
    )
    return policy, created


def _version_files(version: SkillVersion) -> list[SkillFile]:
    return list(SkillFile.objects.filter(version=version).order_by("path"))


def _recompute_hash(files: Iterable[SkillFile]) -> str:
    return bundle_lib.content_hash((f.path, bytes(f.data)) for f in files)


def _limits() -> bundle_lib.BundleLimits:
    return bundle_lib.BundleLimits(
        max_file_bytes=settings.MOTOR_SKILL_MAX_FILE_BYTES,
        max_total_bytes=settings.MOTOR_SKILL_MAX_TOTAL_BYTES,
        max_archive_entries=settings.MOTOR_SKILL_MAX_ARCHIVE_ENTRIES,
        max_compression_ratio=settings.MOTOR_SKILL_MAX_COMPRESSION_RATIO,
    )


def _has_approve_permission(actor: Actor) -> bool:
    user = actor.user
    return bool(
        user is not None
        and getattr(user, "is_active", False)
        and getattr(user, "is_staff", False)
        and user.has_perm(APPROVE_PERMISSION)  # type: ignore[attr-defined]
    )


def _require_approver(actor: Actor, *, what: str) -> None:
    if not _has_approve_permission(actor):
        raise ApprovalPermissionDenied(
            f"{actor.label} may not {what}: approval needs an active staff user with the "
            f"'{APPROVE_PERMISSION}' permission.",
            details={"actor": actor.label, "permission": APPROVE_PERMISSION},
        )


def _require_storable(field_name: str, text: str) -> None:
    """Refuse free text (notes, reasons) that a PostgreSQL text column cannot hold."""
    if bundle_lib.unstorable_text(text) is not None:
        raise PolicyValidationError(
            f"{field_name} holds a NUL or an unpaired surrogate character.",
            details={"field": field_name, "rule": "storable_text"},
        )


def _storable(label: str) -> str:
    """`label` with NUL and lone surrogates (a non-UTF-8 file name, a hostile upload name)
    escaped, so that it fits a PostgreSQL text or JSON value."""
    return label.encode("utf-8", "backslashreplace").decode("utf-8").replace("\0", "\\x00")[:2000]
