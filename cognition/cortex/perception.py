"""Perception (seed 003 Phase 1): which skills the cortex offers for a task.

A region is hit when its pattern's terms meet the task's (stemmed by the skill index's
tokenizer; at least two shared terms, or the only one of a one-word pattern). A candidate is also
perceived when the skill index ranks its skill among the top hits for the task, so a pattern that
missed a paraphrase still finds what the index knows. Candidates are ordered by effective weight
`w · max(0.3, 1 − days_since_last_use/180)`; those under 0.3 are dropped.

On a miss the answer carries the plain skill-index search, and so does a cortex that is missing
or corrupt (boundary rule 6): perception then reports `degraded` with the reason and never
raises; the next update rebuilds it (cognition.cortex.learning).
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from django.db import DatabaseError
from django.utils import timezone

from skills.errors import SkillError
from skills.index.search import SkillHit, skill_search

from .models import Cortex, CortexCandidate, CortexRegion
from .sensory import pattern_terms, task_terms

logger = logging.getLogger(__name__)

#: seed 003 Phase 1.2: candidates under this effective weight are not offered
MIN_EFFECTIVE_WEIGHT = 0.3
#: days over which an unused candidate's weight fades (to the 0.3 floor of the factor)
FADE_DAYS = 180
#: lowest factor the fade applies
FADE_FLOOR = 0.3
#: shared terms a region needs with the task (a one-word pattern needs its one)
MIN_SHARED_TERMS = 2
#: the skill-index hits looked at for candidates the patterns missed
INDEX_HITS = 10
#: seed 003 Phase 2: the reflex fast path's thresholds
REFLEX_MIN_EFFECTIVE_WEIGHT = 0.90
REFLEX_MIN_CONSECUTIVE = 5
#: side effects that never take the reflex path (boundary rule 4)
WRITE_PREFIXES = ("write:", "delete:", "shell:")


def effective_weight(weight: float, last_used: datetime | None, *, now: datetime) -> float:
    """`weight · max(0.3, 1 − days_since_last_use / 180)`; never used: the weight itself."""
    if last_used is None:
        return weight
    days = max(0.0, (now - last_used).total_seconds() / 86400)
    return weight * max(FADE_FLOOR, 1 - days / FADE_DAYS)


def has_write_side_effects(side_effects: list[str]) -> bool:
    return any(str(s).startswith(WRITE_PREFIXES) for s in side_effects)


@dataclass
class PerceivedCandidate:
    """One candidate as perception offers it."""

    skill: str
    version: int
    current_version: int
    source: str
    region: str
    weight: float
    effective_weight: float
    successes: int
    failures: int
    consecutive_successes: int
    reflex: bool
    side_effects: list[str]
    last_used: str | None
    #: why not reflex ("" when it may take the fast path)
    reflex_blocked_by: str = ""

    @property
    def reflex_ready(self) -> bool:
        return not self.reflex_blocked_by

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "reflex_ready": self.reflex_ready}


@dataclass
class Perception:
    """`hit`: the cortex offers `candidates` (best first; `region` is the top one's). Otherwise
    `search` holds the plain skill-index hits; `degraded` says the cortex could not be read
    (`reason` says why)."""

    hit: bool
    region: str | None
    candidates: list[PerceivedCandidate] = field(default_factory=list)
    search: list[SkillHit] = field(default_factory=list)
    degraded: bool = False
    reason: str = ""

    @property
    def reflex(self) -> PerceivedCandidate | None:
        """The top candidate when it may take the reflex fast path."""
        top = self.candidates[0] if self.candidates else None
        return top if top is not None and top.reflex_ready else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "hit": self.hit,
            "region": self.region,
            "degraded": self.degraded,
            "reason": self.reason,
            "reflex": self.reflex.skill if self.reflex else None,
            "candidates": [c.as_dict() for c in self.candidates],
            "search": [h.as_dict() for h in self.search],
        }


class CortexCorrupt(Exception):
    """A stored row breaks the cortex's invariants (a pattern that is not a list of words, a
    weight that is not a number in [0, 1], …)."""


def _check_region(region: CortexRegion) -> None:
    if not isinstance(region.signals, list) or not all(isinstance(s, str) for s in region.signals):
        raise CortexCorrupt(f"region {region.name!r}: its pattern is not a list of words")


def _check_candidate(candidate: CortexCandidate) -> None:
    weight = candidate.weight
    if not isinstance(weight, float | int) or not math.isfinite(weight) or not 0 <= weight <= 1:
        raise CortexCorrupt(f"candidate {candidate.skill.name!r}: weight {weight!r}")
    for name in ("recent_successes", "side_effects"):
        value = getattr(candidate, name)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise CortexCorrupt(f"candidate {candidate.skill.name!r}: {name} is not a list")
    try:
        for stamp in candidate.recent_successes:
            datetime.fromisoformat(stamp)
    except ValueError:
        raise CortexCorrupt(
            f"candidate {candidate.skill.name!r}: recent_successes holds a non-date"
        ) from None


def reflex_blocker(candidate: CortexCandidate, *, effective: float, current_version: int) -> str:
    """Why `candidate` may not take the reflex path ("" when it may): every condition of
    seed 003 Phase 2 is checked."""
    if not candidate.reflex:
        return "not promoted to reflex"
    if effective < REFLEX_MIN_EFFECTIVE_WEIGHT:
        return f"effective weight {effective:.2f} < {REFLEX_MIN_EFFECTIVE_WEIGHT}"
    if candidate.consecutive_successes < REFLEX_MIN_CONSECUTIVE:
        return f"{candidate.consecutive_successes} consecutive successes < {REFLEX_MIN_CONSECUTIVE}"
    if has_write_side_effects(candidate.side_effects):
        return "has write, delete or shell side effects"
    if candidate.version != current_version:
        return f"version changed (learned v{candidate.version}, now v{current_version})"
    return ""


def _region_hit(region: CortexRegion, terms: set[str]) -> bool:
    signals = pattern_terms(region.signals)
    if not signals:
        return False
    return len(signals & terms) >= min(MIN_SHARED_TERMS, len(signals))


def _plain_search(*, agent: Any, task: str) -> list[SkillHit]:
    try:
        return skill_search(query=task, agent=agent).hits
    except SkillError as exc:  # an empty task: nothing to search for
        logger.info("cortex: plain search skipped (%s)", exc)
        return []


def perceive(*, agent: Any, task: str, now: datetime | None = None) -> Perception:
    """See cognition.cortex.perceive."""
    now = now or timezone.now()
    try:
        cortex = Cortex.objects.filter(agent_id=agent.pk).first()
    except DatabaseError as exc:  # the cortex tables are unreadable: plain search
        return Perception(
            hit=False,
            region=None,
            search=_plain_search(agent=agent, task=task),
            degraded=True,
            reason=f"the cortex could not be read ({type(exc).__name__})",
        )
    if cortex is None:  # nothing learned yet: a miss
        return Perception(
            hit=False,
            region=None,
            search=_plain_search(agent=agent, task=task),
            reason="this agent's cortex is empty",
        )
    search = _plain_search(agent=agent, task=task)
    try:
        perceived = _perceive_rows(cortex=cortex, task=task, search=search, now=now)
    except (CortexCorrupt, DatabaseError, TypeError, ValueError) as exc:
        logger.warning("cortex of agent %s is corrupt: %s", agent.pk, exc)
        return Perception(
            hit=False,
            region=None,
            search=search,
            degraded=True,
            reason=f"the cortex is corrupt ({exc}); it is rebuilt at its next update",
        )
    if not perceived:
        return Perception(hit=False, region=None, search=search)
    return Perception(hit=True, region=perceived[0].region, candidates=perceived)


def _perceive_rows(
    *, cortex: Cortex, task: str, search: list[SkillHit], now: datetime
) -> list[PerceivedCandidate]:
    regions = list(CortexRegion.objects.filter(cortex=cortex))
    for region in regions:
        _check_region(region)
    terms = task_terms(task)
    hit_regions = {r.pk for r in regions if _region_hit(r, terms)}
    indexed = {h.skill_id for h in search[:INDEX_HITS]}
    rows = (
        CortexCandidate.objects.filter(region__cortex=cortex)
        .select_related("skill", "skill__current_version", "region")
        .order_by("id")
    )
    best: dict[int, PerceivedCandidate] = {}
    for candidate in rows:
        _check_candidate(candidate)
        if candidate.region_id not in hit_regions and candidate.skill_id not in indexed:
            continue
        effective = effective_weight(candidate.weight, candidate.last_used, now=now)
        if effective < MIN_EFFECTIVE_WEIGHT:
            continue
        current = candidate.skill.current_version
        current_number = current.number if current is not None else candidate.version
        offer = PerceivedCandidate(
            skill=candidate.skill.name,
            version=candidate.version,
            current_version=current_number,
            source=candidate.source,
            region=candidate.region.name,
            weight=round(candidate.weight, 6),
            effective_weight=round(effective, 6),
            successes=candidate.successes,
            failures=candidate.failures,
            consecutive_successes=candidate.consecutive_successes,
            reflex=candidate.reflex,
            side_effects=list(candidate.side_effects),
            last_used=candidate.last_used.isoformat() if candidate.last_used else None,
            reflex_blocked_by=reflex_blocker(
                candidate, effective=effective, current_version=current_number
            ),
        )
        # One skill in several regions: offered once, with its best standing.
        seen = best.get(candidate.skill_id)
        if seen is None or offer.effective_weight > seen.effective_weight:
            best[candidate.skill_id] = offer
    return sorted(best.values(), key=lambda c: (-c.effective_weight, c.skill))
