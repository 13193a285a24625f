"""Reads of the skills app. Credential values never leave here except through
`policy_credential_values`, which exists for delivering them into a sandbox."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import F, Model, Prefetch, Q, QuerySet

from skills.crypto import decrypt_json
from skills.errors import PolicyNotFound, SkillNotFound, SkillVersionNotFound
from skills.models import (
    Policy,
    PolicyAuditEvent,
    PolicyStatus,
    Skill,
    SkillFile,
    SkillVersion,
)

REDACTED = "[set]"


@dataclass(frozen=True)
class SkillRow:
    """One line of the skill list, with the status for the agent asked about (if any)."""

    id: int
    name: str
    description: str
    version: int | None
    content_hash: str
    status: str | None  # None: this agent has no policy for the skill
    policy_id: int | None


def skill_get(*, name: str) -> Skill:
    try:
        return Skill.objects.select_related("current_version").get(name=name)
    except Skill.DoesNotExist:
        raise SkillNotFound(f"No skill named {name!r}.", details={"name": name}) from None


def skill_list(*, agent: Model | None = None) -> list[SkillRow]:
    """Every skill with its current version and, when `agent` is given, that agent's status."""
    skills = Skill.objects.select_related("current_version").order_by("name")
    if agent is not None:
        skills = skills.prefetch_related(
            Prefetch("policies", queryset=Policy.objects.filter(agent=agent), to_attr="for_agent")
        )
    rows = []
    for skill in skills:
        policy = (getattr(skill, "for_agent", None) or [None])[0]
        version = skill.current_version
        rows.append(
            SkillRow(
                id=skill.pk,
                name=skill.name,
                description=skill.description,
                version=version.number if version else None,
                content_hash=version.content_hash if version else "",
                status=policy.status if policy else None,
                policy_id=policy.pk if policy else None,
            )
        )
    return rows


def policy_get(*, skill_name: str, agent: Model) -> Policy:
    try:
        return Policy.objects.select_related("skill", "agent").get(
            skill__name=skill_name, agent=agent
        )
    except Policy.DoesNotExist:
        raise PolicyNotFound(
            f"Agent {getattr(agent, 'name', agent)!r} has no policy for skill {skill_name!r}.",
            details={"skill": skill_name},
        ) from None


def policy_credential_names(*, policy: Policy) -> list[str]:
    """Names of the credentials that have a stored value (never the values)."""
    return sorted(decrypt_json(policy.credential_values))


def policy_redacted_credentials(*, policy: Policy) -> dict[str, str]:
    """`{name: "[set]"}` for every stored credential value."""
    return {name: REDACTED for name in policy_credential_names(policy=policy)}


def policy_credential_values(*, policy: Policy) -> dict[str, str]:
    """Decrypted credential values, for handing to a sandbox at run start only.

    Never log, serialise or render the result.
    """
    return decrypt_json(policy.credential_values)


def policy_detail(*, policy: Policy) -> dict[str, Any]:
    """A policy as the seeds' policy.json shows it, credential values redacted to "[set]"."""
    version = policy.skill.current_version
    return {
        "skill": policy.skill.name,
        "agent": getattr(policy.agent, "name", policy.agent_id),
        "status": policy.status,
        "allowed_domains": list(policy.allowed_domains),
        "required_credentials": list(policy.required_credentials),
        "credential_values": policy_redacted_credentials(policy=policy),
        "tools": list(policy.tools),
        "dependencies": list(policy.dependencies),
        "inputs": dict(policy.inputs),
        "content_hash": version.content_hash if version else "",
        "version": version.number if version else None,
        "provenance": dict(version.provenance) if version else {},
        "approved_by": policy.approved_by.get_username() if policy.approved_by else None,
        "approved_at": policy.approved_at.isoformat() if policy.approved_at else None,
        "approved_content_hash": policy.approved_content_hash,
        "approved_version": policy.approved_version.number if policy.approved_version else None,
        "reviewed_at": policy.reviewed_at.isoformat() if policy.reviewed_at else None,
        "reviewed_hash": policy.reviewed_hash,
        "review_facts": dict(policy.review_facts),
        "rejection_note": policy.rejection_note,
    }


def skill_version_history(*, skill: Skill) -> QuerySet[SkillVersion]:
    """Versions newest first, with who made them."""
    return (
        SkillVersion.objects.filter(skill=skill)
        .select_related("created_by", "parent")
        .order_by("-number")
    )


def skill_version_get(*, skill: Skill, number: int) -> SkillVersion:
    try:
        return SkillVersion.objects.select_related("skill").get(skill=skill, number=number)
    except SkillVersion.DoesNotExist:
        raise SkillVersionNotFound(
            f"Skill {skill.name!r} has no version {number}.",
            details={"skill": skill.name, "number": number},
        ) from None


def version_files(*, version: SkillVersion, with_data: bool = True) -> QuerySet[SkillFile]:
    """The files of a version sorted by path; `with_data=False` leaves the bytes unloaded."""
    files = SkillFile.objects.filter(version=version).order_by("path")
    return files if with_data else files.defer("data")


def policy_audit_trail(*, policy: Policy) -> QuerySet[PolicyAuditEvent]:
    """Audit rows of this (skill, agent) pair, newest first, including ones that outlived it."""
    return PolicyAuditEvent.objects.filter(
        skill_name=policy.skill.name, agent_ref_id=policy.agent_id
    ).select_related("actor")


def skill_audit_trail(*, skill_name: str) -> QuerySet[PolicyAuditEvent]:
    return PolicyAuditEvent.objects.filter(skill_name=skill_name).select_related("actor")


def policies_to_review() -> QuerySet[Policy]:
    """Policies that wait for a person's decision: pending review, reviewed, or needing
    re-approval. A rejected one (`rejected_q`) waits for a new version instead."""
    return Policy.objects.filter(
        status__in=[
            PolicyStatus.PENDING_REVIEW,
            PolicyStatus.REVIEWED,
            PolicyStatus.NEEDS_REAPPROVAL,
        ],
    ).exclude(rejected_q())


def rejected_q() -> Q:
    """Policies a person rejected whose content has not changed since: they stay pending review
    (seed 000's states) but wait for a new version, not for a decision."""
    return (
        Q(status=PolicyStatus.PENDING_REVIEW)
        & ~Q(rejection_note="")
        & Q(reviewed_hash=F("skill__current_version__content_hash"))
    )
