"""The user's yes to a proposed candidate: install it, approve it, and switch on a failure
(seed 003 Phase 3.1).

Installing is the skills app's own path, nothing of its own: an import of the source's files
(the new policy lands pending_review), the deterministic review, then the approval of exactly
that version by the person who said yes — audited as an approval "on the user's yes to
acquisition N", with the source and its version. The files are fetched again at install time
and must be the ones that were reviewed (same content hash), else the attempt fails.

An attempt that fails leaves nothing behind (its import, review and approval are one
transaction) and the next candidate is tried: at most MAX_SWITCHES switches, and never to a
candidate the review flagged (that one needs its own yes). When every attempt failed the
acquisition is marked failed with each reason. An installed skill becomes a candidate of the
agent's skill cortex for the task (`cognition.cortex.record_acquired`).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from skills.approval import approval_proposal, skill_approve
from skills.errors import ApprovalPermissionDenied, DomainError
from skills.imports import skill_import_archive, skill_import_directory
from skills.models import PolicyStatus, SkillVersion
from skills.reviewing import policy_review
from skills.services import APPROVE_PERMISSION, Actor, _has_approve_permission

from .errors import AcquisitionClosed, AcquisitionInvalid, AcquisitionNotFound, SourceUnavailable
from .models import AcquisitionStatus, SkillAcquisition, SkillSource
from .registries import Listing, reader_for

logger = logging.getLogger(__name__)

#: most switches to another candidate after a failed install (seed 003 Phase 3.1)
MAX_SWITCHES = 2


def _install_candidate(
    *,
    acquisition: SkillAcquisition,
    candidate: dict[str, Any],
    actor: Actor,
    tools: list[str] | None,
) -> dict[str, Any]:
    """Install and approve one candidate; raises a DomainError when it cannot be, having
    written nothing."""
    source = SkillSource.objects.filter(name=candidate["source"], enabled=True).first()
    if source is None:
        raise SourceUnavailable(
            f"Skill source {candidate['source']!r} is no longer configured or enabled.",
            details={"source": candidate["source"], "rule": "source-gone"},
        )
    listing = Listing(
        slug=candidate["slug"],
        name=candidate["name"],
        description=candidate["description"],
        version=candidate["version"],
        score=0.0,
    )
    fetched = reader_for(source).fetch(listing)
    renames = (
        {fetched.bundle.name: candidate["name"]}
        if fetched.bundle.name != candidate["name"]
        else None
    )
    note = (
        f"approved on the user's yes to acquisition {acquisition.pk}: {candidate['slug']}"
        + (f" {candidate['version']}" if candidate["version"] else "")
        + f" from skill source {source.name} ({source.location})"
    )
    with transaction.atomic():
        if fetched.archive is not None:
            report = skill_import_archive(
                data=fetched.archive,
                filename=fetched.filename,
                actor=actor,
                agent=acquisition.agent,
                all_or_nothing=True,
                source=source.location,
                renames=renames,
            )
        else:
            assert fetched.directory is not None
            report = skill_import_directory(
                path=fetched.directory,
                actor=actor,
                agent=acquisition.agent,
                all_or_nothing=True,
                source=source.location,
                renames=renames,
            )
        [installed] = report.installed
        if installed.version.content_hash != candidate["content_hash"]:
            # Raised inside the atomic block: the import is rolled back.
            raise SourceUnavailable(
                f"Skill source {source.name!r}: {candidate['slug']} changed since it was "
                "reviewed; nothing was installed. Search again to review the new files.",
                details={
                    "source": source.name,
                    "rule": "source-content-changed",
                    "reviewed_hash": candidate["content_hash"],
                    "fetched_hash": installed.version.content_hash,
                },
            )
        policy = installed.policy
        assert policy is not None  # an import with an agent always has its policy
        stale = (
            policy.status == PolicyStatus.REVIEWED
            and policy.reviewed_hash != installed.version.content_hash
        )
        if policy.status in (PolicyStatus.PENDING_REVIEW, PolicyStatus.NEEDS_REAPPROVAL) or stale:
            policy = policy_review(policy=policy.pk, actor=actor)
        if policy.status != PolicyStatus.APPROVED:
            grants = None
            if tools is not None:
                # The user narrowed the tools at their yes: the proposal, with only those.
                grants = approval_proposal(policy=policy).grants()
                grants["tools"] = [t for t in grants["tools"] if t in tools]
            policy = skill_approve(policy=policy.pk, actor=actor, note=note, grants=grants)
    return {
        "skill": installed.skill.name,
        "version": installed.version.number,
        "status": policy.status,
        "skill_id": installed.skill.pk,
    }


def _cortex_remember(
    *, acquisition: SkillAcquisition, installed: dict[str, Any], source: str
) -> None:
    """Tell the agent's skill cortex what was acquired for this task (seed 003 Phase 4: a new
    candidate at the initial weight, the task's signal words merged into its region). The
    install stands whatever the cortex does: a cortex that cannot take it is rebuilt from
    later uses (boundary rule 6)."""
    from cognition import cortex

    version = SkillVersion.objects.select_related("skill").get(
        skill_id=installed["skill_id"], number=installed["version"]
    )
    try:
        cortex.record_acquired(
            agent=acquisition.agent, task=acquisition.query, skill_version=version, source=source
        )
    except Exception:
        logger.exception("acquisition %s: the skill cortex did not record it", acquisition.pk)


def acquisition_install(
    *, acquisition_id: Any, agent: Any, name: Any, actor: Actor, tools: Any = None
) -> dict[str, Any]:
    """Install candidate `name` of the agent's proposed acquisition on the user's yes
    (`actor`: who said it, already through the consent gate). `tools`, when given, narrows
    what the approval grants to those of the candidate's proposed tools (the user said yes to
    less, e.g. read-only); naming a tool it does not propose is refused.

    Raises before anything happens when the acquisition does not exist for this agent
    (`AcquisitionNotFound`), was decided already (`AcquisitionClosed`), names no such
    candidate (`AcquisitionInvalid`) or the actor may not approve skills. Otherwise returns the
    report: `status` installed (with the skill and version) or failed, and every attempt.
    """
    if not isinstance(acquisition_id, int) or isinstance(acquisition_id, bool):
        raise AcquisitionInvalid(
            "acquisition: the number of the proposal the user said yes to.",
            details={"field": "acquisition", "rule": "required"},
        )
    acquisition = SkillAcquisition.objects.filter(pk=acquisition_id, agent=agent).first()
    if acquisition is None:
        raise AcquisitionNotFound(
            f"No skill acquisition {acquisition_id} for agent {agent.name!r}.",
            details={"acquisition": acquisition_id},
        )
    if acquisition.status != AcquisitionStatus.PROPOSED or acquisition.decided_at is not None:
        raise AcquisitionClosed(
            f"Acquisition {acquisition.pk} was decided already ({acquisition.status}).",
            details={"acquisition": acquisition.pk, "status": acquisition.status},
        )
    candidates = list(acquisition.candidates)
    chosen = next((c for c in candidates if c["name"] == name), None)
    if chosen is None:
        raise AcquisitionInvalid(
            f"{str(name)[:80]!r} is not a candidate of acquisition {acquisition.pk}; the "
            f"candidates are {', '.join(c['name'] for c in candidates)}.",
            details={"field": "name", "rule": "not-a-candidate"},
        )
    if tools is not None:
        proposed = chosen.get("proposed_tools") or []
        if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
            raise AcquisitionInvalid(
                "tools: a list of tool names to narrow the approval to.",
                details={"field": "tools", "rule": "type"},
            )
        extra = sorted(set(tools) - set(proposed))
        if extra:
            raise AcquisitionInvalid(
                f"tools {extra} are not proposed for {chosen['name']!r} (it proposes "
                f"{proposed}); a yes may narrow the grants, never widen them.",
                details={"field": "tools", "rule": "tools-not-proposed", "tools": extra},
            )
    if not _has_approve_permission(actor):
        raise ApprovalPermissionDenied(
            f"{actor.label} may not approve skills, so nothing can be installed: approval "
            f"needs an active staff user with the '{APPROVE_PERMISSION}' permission.",
            details={"actor": actor.label, "permission": APPROVE_PERMISSION},
        )
    # Claim the proposal: of two yeses at once, one installs and the other is told it is closed.
    claimed = SkillAcquisition.objects.filter(
        pk=acquisition.pk, status=AcquisitionStatus.PROPOSED, decided_at=None
    ).update(decided_at=timezone.now(), decided_by_label=actor.label[:200])
    if not claimed:
        raise AcquisitionClosed(
            f"Acquisition {acquisition.pk} was decided already.",
            details={"acquisition": acquisition.pk},
        )
    order = [chosen] + [c for c in candidates if c is not chosen and not c.get("flagged")]
    attempts: list[dict[str, Any]] = []
    installed: dict[str, Any] | None = None
    for candidate in order[: 1 + MAX_SWITCHES]:
        try:
            installed = _install_candidate(
                acquisition=acquisition, candidate=candidate, actor=actor, tools=tools
            )
        except DomainError as exc:
            attempts.append(
                {
                    "name": candidate["name"],
                    "source": candidate["source"],
                    "ok": False,
                    "code": exc.code,
                    "rule": str(exc.details.get("rule") or exc.code),
                    "message": exc.message,
                }
            )
            logger.info(
                "acquisition %s: %s from %s failed (%s)",
                acquisition.pk,
                candidate["name"],
                candidate["source"],
                exc.code,
            )
            continue
        attempts.append({"name": candidate["name"], "source": candidate["source"], "ok": True})
        break
    fields: dict[str, Any] = {"attempts": attempts}
    if installed is not None:
        _cortex_remember(acquisition=acquisition, installed=installed, source=candidate["source"])
        fields |= {
            "status": AcquisitionStatus.INSTALLED,
            "skill_id": installed.pop("skill_id"),
            "installed_name": installed["skill"],
            "version_number": installed["version"],
        }
    else:
        fields["status"] = AcquisitionStatus.FAILED
    SkillAcquisition.objects.filter(pk=acquisition.pk).update(**fields)
    return {
        "acquisition": acquisition.pk,
        "status": fields["status"],
        "installed": installed,
        "attempts": attempts,
        "switches": max(0, len(attempts) - 1),
    }
