"""A skill as a run gets it: the current version's files, re-hashed against what was approved."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import Model

from skills import bundle as bundle_lib
from skills.errors import SkillHashMismatch, SkillNotFound
from skills.models import AuditAction, Policy, PolicyStatus, Skill, SkillVersion
from skills.services import (
    Actor,
    _apply,
    _audit,
    _get_or_create_locked_policy,
    _lock_skill,
    _recompute_hash,
    _version_files,
)


@dataclass(frozen=True)
class LoadedFile:
    path: str
    data: bytes = field(repr=False)


@dataclass(frozen=True)
class LoadedSkill:
    """What a run needs from a skill: its verified files, instructions and policy.

    Holds no credential values; resolve them with `skills.selectors.policy_credential_values`
    when the sandbox is started.
    """

    skill: Skill
    version: SkillVersion
    policy: Policy
    files: tuple[LoadedFile, ...]
    instructions: str
    content_hash: str

    @property
    def approved(self) -> bool:
        """Whether the policy's defaults (tools, domains, credentials) may be used implicitly."""
        return self.policy.status == PolicyStatus.APPROVED


def skill_load_for_execution(
    *, name: str, agent: Model, actor: Actor | None = None, allow_disabled: bool = False
) -> LoadedSkill:
    """The current version of skill `name` for `agent`, after recomputing its hash.

    - A skill that staff disabled for `agent` raises SkillDisabled (naming both), unless
      `allow_disabled` (a review run only reads it).

    - The hash is recomputed from the stored bytes. If it differs from the version's recorded
      hash, or (for an approved policy) from `approved_content_hash`, an approved policy moves to
      needs_reapproval — committed before `SkillHashMismatch` is raised.
    - An agent without a policy gets one in needs_reapproval (onboarding, seed 000 Scenario 5).
    - A policy that is not approved is returned as it is; `LoadedSkill.approved` tells the caller
      whether the policy defaults may be used.

    Call it outside any transaction of your own: the demotion is committed by this function's
    own block before the error is raised, but an enclosing transaction that is rolled back
    because of the error would undo it.
    """
    actor = actor or Actor.system("load")
    mismatch: SkillHashMismatch | None = None
    # This block commits on its own (a savepoint when nested) *before* the error is raised,
    # so the demotion to needs_reapproval is not rolled back by the refusal.
    with transaction.atomic():
        skill = _lock_skill(name=name)
        version = skill.current_version
        if version is None:
            raise SkillNotFound(f"Skill {name!r} has no installed version.", details={"name": name})
        policy, created = _get_or_create_locked_policy(
            skill, agent, status=PolicyStatus.NEEDS_REAPPROVAL
        )
        if created:
            _audit(
                action=AuditAction.POLICY_CREATED,
                actor=actor,
                policy=policy,
                to_status=policy.status,
                reason="no policy for this agent",
                content_hash=version.content_hash,
                version_number=version.number,
            )
        files = _version_files(version)
        computed = _recompute_hash(files)
        expected = version.content_hash
        if policy.status == PolicyStatus.APPROVED and policy.approved_content_hash != computed:
            expected = policy.approved_content_hash
        if computed != expected:
            mismatch = SkillHashMismatch(
                f"Skill {name!r} v{version.number}: its files hash to {computed}, but "
                f"{expected} was {'approved' if expected != version.content_hash else 'recorded'}; "
                "it needs re-approval before it runs with its policy.",
                details={"name": name, "expected": expected, "actual": computed},
            )
            if policy.status == PolicyStatus.APPROVED:
                before, after = _apply(policy, "mark mismatch", policy.hash_mismatch)
                policy.save()
                _audit(
                    action=AuditAction.HASH_MISMATCH,
                    actor=actor,
                    policy=policy,
                    from_status=before,
                    to_status=after,
                    reason=f"expected {expected}, found {computed}",
                    content_hash=computed,
                    version_number=version.number,
                )
    if policy.disabled_at is not None and not allow_disabled:
        from skills.disabling import disabled_error

        raise disabled_error(policy)
    if mismatch is not None:
        raise mismatch
    loaded_files = tuple(LoadedFile(path=f.path, data=bytes(f.data)) for f in files)
    skill_md = next((f.data for f in loaded_files if f.path == "SKILL.md"), b"")
    instructions = bundle_lib.parse_skill_md(skill_md).body
    return LoadedSkill(
        skill=skill,
        version=version,
        policy=policy,
        files=loaded_files,
        instructions=instructions,
        content_hash=computed,
    )
