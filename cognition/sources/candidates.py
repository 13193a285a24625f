"""Searching the sources for a task and reviewing the best candidates (seed 003 Phase 1.3).

Reviewed sources are searched first; unreviewed ones only when the reviewed ones yield fewer
than two candidates. Within a group the sources' rankings are fused by reciprocal rank (their
scores are not comparable). Candidates are fetched and reviewed in that order until
MAX_CANDIDATES are ready: a candidate whose files the bundle rules refuse (a traversal entry,
a link, a bomb, too large) or whose name cannot be installed is skipped, and said so.

A candidate's name may be taken by an installed skill of another source: a different source is
a different skill, never a new version of it. The candidate is then offered under
`<name>-<source>` and the review covers the renamed files, exactly what would be installed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from django.db import transaction

from skills import bundle as bundle_lib
from skills.approval import tools_needed
from skills.index.search import query_normalise
from skills.models import Skill

from .errors import NoSkillSources, SourcesUnavailable, SourceUnavailable
from .models import SkillAcquisition, SkillSource
from .registries import Listing, reader_for

#: most candidates presented for one task (seed 003 Phase 1.3)
MAX_CANDIDATES = 3
#: hits asked of each source
SEARCH_DEPTH = 10
#: candidates a group of sources must yield before unreviewed sources are not searched
ENOUGH_REVIEWED = 2
RRF_K = 60
#: severities that flag a candidate (it is then never installed by a switch, only by its own yes)
FLAGGING = ("danger", "warning")

_NAME = re.compile(r"[a-z](?:[a-z0-9-]{0,62}[a-z0-9])?")


def _error(exc: SourceUnavailable) -> dict[str, Any]:
    return {
        "source": exc.details.get("source"),
        "rule": exc.details.get("rule"),
        "message": exc.message,
    }


def install_name(name: str, source: SkillSource) -> tuple[str | None, str]:
    """(the name `name` from `source` would be installed under, a note saying why it differs).

    None when neither the name nor `<name>-<source>` is free for this source."""
    taken = Skill.objects.filter(name=name).values_list("source", flat=True).first()
    if taken is None or taken == source.location:
        return name, ""
    alternative = f"{name}-{source.name.lower().replace('_', '-')}"[:64].rstrip("-")
    other = Skill.objects.filter(name=alternative).values_list("source", flat=True).first()
    if (
        _NAME.fullmatch(alternative)
        and "--" not in alternative
        and other in (None, source.location)
    ):
        return alternative, (
            f"A skill named {name!r} is already installed from {taken or 'an unrecorded source'}; "
            f"a different source makes a different skill, so this one would be installed as "
            f"{alternative!r}."
        )
    return None, (
        f"A skill named {name!r} is already installed from {taken or 'an unrecorded source'}, "
        f"and {alternative!r} is taken too."
    )


def _fused(
    groups: Sequence[tuple[SkillSource, list[Listing]]],
) -> list[tuple[SkillSource, Listing]]:
    scored: list[tuple[float, int, SkillSource, Listing]] = []
    for position, (source, listings) in enumerate(groups):
        for rank, listing in enumerate(listings, start=1):
            scored.append((1.0 / (RRF_K + rank), position, source, listing))
    scored.sort(key=lambda s: (-s[0], s[1], s[3].slug))
    return [(source, listing) for _, _, source, listing in scored]


def candidate_review(source: SkillSource, listing: Listing) -> dict[str, Any]:
    """Fetch one listing and review it; the candidate as presented. Raises
    `SourceUnavailable` when it cannot be fetched, is refused, or its name is not free."""
    fetched = reader_for(source).fetch(listing)
    bundle = fetched.bundle
    chosen, note = install_name(bundle.name, source)
    if chosen is None:
        raise SourceUnavailable(
            f"Skill source {source.name!r}: {note}",
            details={"source": source.name, "rule": "skill-name-taken", "name": bundle.name},
        )
    if chosen != bundle.name:
        bundle = bundle_lib.rename_bundle(bundle, chosen)
    installed = Skill.objects.exclude(name=chosen).values_list("name", flat=True)
    facts = bundle_lib.review_bundle(
        bundle,
        provenance={"source": source.location, "slug": listing.slug, "version": listing.version},
        skill_name=chosen,
        installed_names=installed,
    )
    suspicious = [f.to_dict() for f in facts.suspicious]
    facts_json = facts.to_dict()
    return {
        "name": chosen,
        "original_name": fetched.bundle.name,
        "name_note": note,
        "description": bundle.description,
        "source": source.name,
        "source_kind": source.kind,
        "source_location": source.location,
        "reviewed_source": source.reviewed,
        "slug": listing.slug,
        "version": listing.version,
        "content_hash": bundle.content_hash,
        "flagged": any(f["severity"] in FLAGGING for f in suspicious),
        # what approving it would grant by default (the user may narrow the tools at the yes)
        "proposed_tools": tools_needed(facts_json),
        # suspicious patterns first: what a person must see before saying yes
        "review": {
            "suspicious": suspicious,
            "referenced_domains": list(facts.referenced_domains),
            "referenced_credentials": list(facts.referenced_credentials),
            "has_scripts": facts.has_scripts,
            "files": [e["path"] for e in facts.inventory],
        },
    }


def _search_group(
    sources: Sequence[SkillSource], query: str, errors: list[dict[str, Any]]
) -> tuple[list[tuple[SkillSource, list[Listing]]], int]:
    answered: list[tuple[SkillSource, list[Listing]]] = []
    for source in sources:
        try:
            answered.append((source, reader_for(source).search(query, limit=SEARCH_DEPTH)))
        except SourceUnavailable as exc:
            errors.append(_error(exc))
    return answered, len(answered)


def candidates_find(*, agent: Any, query: str) -> dict[str, Any]:
    """Search the enabled sources for `query` and review up to MAX_CANDIDATES candidates.

    With candidates, a `SkillAcquisition` (proposed) records what was shown and its id comes
    back for the user's yes. Without any, nothing is written. Per-source failures are listed
    under `errors`; when no source answered at all, `SourcesUnavailable` says why for each.
    A query that is empty or longer than MOTOR_SKILL_SEARCH_QUERY_MAX_CHARS is refused
    (`SkillSearchQueryInvalid`) before any source is asked.
    """
    text, _ = query_normalise(query, over_limit="refuse")
    sources = list(SkillSource.objects.filter(enabled=True).order_by("position", "name"))
    if not sources:
        raise NoSkillSources(
            "No skill source is configured: add one in the admin (Skill sources).",
            details={"rule": "no-sources"},
        )
    errors: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    candidates: list[dict[str, Any]] = []
    answered_total = 0
    seen: set[tuple[str, str]] = set()
    for reviewed in (True, False):
        group = [s for s in sources if s.reviewed is reviewed]
        if not group or (not reviewed and len(candidates) >= ENOUGH_REVIEWED):
            continue
        answered, count = _search_group(group, text, errors)
        answered_total += count
        for source, listing in _fused(answered):
            if len(candidates) >= MAX_CANDIDATES:
                break
            if (source.name, listing.slug) in seen:
                continue
            seen.add((source.name, listing.slug))
            try:
                candidates.append(candidate_review(source, listing))
            except SourceUnavailable as exc:
                skipped.append({"slug": listing.slug, **_error(exc)})
            except bundle_lib.BundleError as exc:
                skipped.append(
                    {
                        "slug": listing.slug,
                        "source": source.name,
                        "rule": exc.rules()[0] if exc.rules() else "bundle",
                        "message": str(exc),
                    }
                )
    if not answered_total:
        raise SourcesUnavailable(
            "No skill source answered: " + "; ".join(e["message"] for e in errors),
            details={"rule": "sources-unavailable", "sources": errors},
        )
    acquisition_id = None
    if candidates:
        with transaction.atomic():
            acquisition = SkillAcquisition.objects.create(
                agent=agent, query=text, candidates=candidates
            )
        acquisition_id = acquisition.pk
    return {
        "acquisition": acquisition_id,
        "query": text,
        "candidates": candidates,
        "skipped": skipped,
        "errors": errors,
    }
