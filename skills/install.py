"""Installing a skill's content (a new skill or a new version of one) and deleting a skill.

Decisions worth knowing:
- Policies are per (skill, agent). Installing content *with* an agent creates or resets that
  agent's policy to pending_review; installing *without* an agent (`import_skills` without
  `--agent`, `load_example_skills` without `--agent`) creates no policy. An agent that later loads
  the skill gets a needs_reapproval policy (seed 000 Scenario 5 / onboarding).
- New content only resets the policy of the agent whose run or import produced it. Other agents'
  approved policies keep their `approved_content_hash`; loading the skill for them then finds the
  mismatch and moves them to needs_reapproval ("previously approved, something changed").
- A policy.json inside a bundle is never content and never an approval. On import its
  allowed domains, credentials names, tools, dependencies and inputs become the *proposal* of a
  policy created by that import (still pending_review, shown in the review); extraction takes
  only its provenance (seed 000: new skills get no domains from the run that created them).
- Pending credentials of a run (seed 001 `save_credential`): for a policy created by the
  extraction every pending name is merged and added to required_credentials (first-time
  creation); for an existing policy only names already in required_credentials are merged, the
  others are dropped and named in the log (never their values).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Max, Model

from skills import bundle as bundle_lib
from skills.crypto import decrypt_json, encrypt_json
from skills.errors import SkillSourceConflict, SkillValidationError
from skills.models import LOCAL_SOURCE, AuditAction, Policy, Skill, SkillFile, SkillVersion
from skills.policy_fields import _bundle_provenance, _is_credential_name, _policy_proposal
from skills.services import (
    REDACTED,
    Actor,
    _agent_name,
    _apply,
    _audit,
    _get_or_create_locked_policy,
    _get_or_create_locked_skill,
    _lock_skill,
    _require_storable,
)
from skills.signals import version_installed

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class InstallResult:
    """Outcome of installing one bundle."""

    skill: Skill
    version: SkillVersion
    skill_created: bool
    version_created: bool
    policy: Policy | None


def _merge_pending_credentials(
    policy: Policy, pending: Mapping[str, str], *, policy_is_new: bool
) -> dict[str, Any]:
    """Merge a run's pending credentials into `policy` (in memory); return the audit change."""
    if not pending:
        return {}
    values = decrypt_json(policy.credential_values)
    required = list(policy.required_credentials)
    merged: list[str] = []
    dropped: list[str] = []
    for name, value in sorted(pending.items()):
        if not isinstance(value, str) or not value or not _is_credential_name(name):
            dropped.append(name)
            continue
        if policy_is_new and name not in required:
            required.append(name)
        if name in required:
            values[name] = value
            merged.append(name)
        else:
            dropped.append(name)
    if dropped:
        logger.warning(
            "skill %s: pending credentials %s are not in required_credentials; not stored",
            policy.skill.name,
            ", ".join(dropped),
        )
    if not merged:
        return {}
    policy.required_credentials = required
    policy.credential_values = encrypt_json(values)
    return {
        "credential_values": {"set": dict.fromkeys(merged, REDACTED)},
        "required_credentials": required,
    }


def _install_locked(
    *,
    bundle: bundle_lib.Bundle,
    actor: Actor,
    agent: Model | None,
    provenance: Mapping[str, Any] | None,
    extracted_from: Mapping[str, Any] | None,
    pending_credentials: Mapping[str, str] | None,
    apply_proposal: bool,
    source: str | None = None,
) -> InstallResult:
    """Install one validated bundle. Must run inside transaction.atomic().

    With a `source` (imports), new content for an existing skill of that name must come from
    the same source, else `SkillSourceConflict` (content identical to the current version is
    the same skill wherever it comes from: nothing changes). Without one (extraction: a run
    changing the skill it was given; direct installs) the skill keeps its source and a new
    skill is "local".
    """
    proposal = _policy_proposal(bundle) if apply_proposal else {}
    skill, skill_created = _get_or_create_locked_skill(
        bundle.name, bundle.description, source if source is not None else LOCAL_SOURCE
    )
    current = skill.current_version
    digest = bundle.content_hash
    version_created = current is None or current.content_hash != digest
    if version_created and not skill_created and source is not None and skill.source != source:
        installed_from = skill.source or "an unrecorded source"
        raise SkillSourceConflict(
            f"A skill named {bundle.name!r} is already installed from {installed_from}; this "
            f"one comes from {source}. Install it under another name, or import it from the "
            "same source to make a new version.",
            details={
                "rule": "skill-source-conflict",
                "name": bundle.name,
                "installed_source": skill.source,
                "source": source,
            },
        )
    if version_created:
        # Allocated under the Skill row lock: concurrent installs get consecutive numbers.
        last = SkillVersion.objects.filter(skill=skill).aggregate(n=Max("number"))["n"] or 0
        version = SkillVersion.objects.create(
            skill=skill,
            number=last + 1,
            content_hash=digest,
            description=bundle.description,
            frontmatter=dict(bundle.frontmatter),
            provenance=dict(provenance or _bundle_provenance(bundle)),
            extracted_from=dict(extracted_from or {}),
            created_by=actor.user,
            created_by_label=actor.label[:200],
            parent=current,
        )
        SkillFile.objects.bulk_create(
            SkillFile(version=version, path=f.path, size=len(f.data), sha256=f.sha256, data=f.data)
            for f in bundle.files
        )
        skill.current_version = version
        skill.description = bundle.description
        skill.save(update_fields=["current_version", "description", "updated_at"])
        _audit(
            action=AuditAction.SKILL_INSTALLED,
            actor=actor,
            skill=skill,
            agent=agent,
            reason="new skill" if skill_created else "new version",
            content_hash=digest,
            version_number=version.number,
            changes={
                "files": [f.path for f in bundle.files],
                **({"source": skill.source} if skill_created else {}),
                **({"extracted_from": dict(extracted_from)} if extracted_from else {}),
            },
        )
    else:
        assert current is not None
        version = current

    policy: Policy | None = None
    if agent is not None:
        policy, policy_created = _get_or_create_locked_policy(skill, agent, **proposal)
        if policy_created:
            _audit(
                action=AuditAction.POLICY_CREATED,
                actor=actor,
                policy=policy,
                to_status=policy.status,
                content_hash=digest,
                version_number=version.number,
                changes={k: v for k, v in proposal.items()},
            )
        elif version_created:
            before, after = _apply(policy, "reset", policy.content_changed)
            policy.save()
            _audit(
                action=AuditAction.CONTENT_CHANGED,
                actor=actor,
                policy=policy,
                from_status=before,
                to_status=after,
                reason="content changed",
                content_hash=digest,
                version_number=version.number,
            )
        cred_change = _merge_pending_credentials(
            policy, pending_credentials or {}, policy_is_new=policy_created
        )
        if cred_change:
            policy.save()
            _audit(
                action=AuditAction.POLICY_UPDATED,
                actor=actor,
                policy=policy,
                from_status=policy.status,
                to_status=policy.status,
                reason="pending credentials from run",
                content_hash=digest,
                version_number=version.number,
                changes=cred_change,
            )
    if version_created:
        # After the commit: a receiver may queue work on the version (forge probes MCP skills).
        version_id = version.pk
        transaction.on_commit(
            lambda: version_installed.send_robust(sender=SkillVersion, version_id=version_id)
        )
    return InstallResult(
        skill=skill,
        version=version,
        skill_created=skill_created,
        version_created=version_created,
        policy=policy,
    )


def skill_install_bundle(
    *,
    bundle: bundle_lib.Bundle,
    actor: Actor,
    agent: Model | None = None,
    provenance: Mapping[str, Any] | None = None,
    extracted_from: Mapping[str, Any] | None = None,
    pending_credentials: Mapping[str, str] | None = None,
) -> InstallResult:
    """Install a validated bundle as a new skill or a new version of an existing one.

    Identical content (same hash as the current version) creates no version and leaves every
    status as it is. New content becomes the current version (number allocated under the Skill
    row lock); `agent`'s policy is created or reset to pending_review. The skill's source is not
    checked (imports go through `skills.imports`, which does); a new skill's source is "local".
    """
    with transaction.atomic():
        return _install_locked(
            bundle=bundle,
            actor=actor,
            agent=agent,
            provenance=provenance,
            extracted_from=extracted_from,
            pending_credentials=pending_credentials,
            apply_proposal=False,
        )


def _bundle_error(exc: bundle_lib.BundleError, what: str) -> SkillValidationError:
    return SkillValidationError(f"{what} was refused:", problems=exc.problems)


def skill_delete(*, skill: Skill | str, actor: Actor, reason: str = "") -> None:
    """Delete a skill with its versions, files and policies; the audit trail stays."""
    _require_storable("reason", reason)
    with transaction.atomic():
        locked = (
            _lock_skill(name=skill) if isinstance(skill, str) else _lock_skill(skill_id=skill.pk)
        )
        # Lock the policies too (after the skill, per the lock order) so no approval races this.
        policies = list(
            Policy.objects.select_for_update(of=("self",))
            .select_related("agent")
            .filter(skill=locked)
        )
        version = locked.current_version
        _audit(
            action=AuditAction.SKILL_DELETED,
            actor=actor,
            skill=locked,
            reason=reason,
            content_hash=version.content_hash if version else "",
            version_number=version.number if version else None,
            changes={
                "versions": SkillVersion.objects.filter(skill=locked).count(),
                "policies": [{"agent": _agent_name(p.agent), "status": p.status} for p in policies],
            },
        )
        # Clear the self-reference first so deleting versions does not trip over it.
        Skill.objects.filter(pk=locked.pk).update(current_version=None)
        locked.delete()
