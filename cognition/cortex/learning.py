"""Learning (seed 003 Phase 4): the cortex after an acquisition and after every use.

Weights (§4.1, the seed's constants):
- a new candidate starts at 0.5;
- success: `w + (1 − w) · 0.15 · 1 / (1 + successes_in_last_7d)` — the successes of the 7 days
  before this one, so a burst of uses in one week teaches less than the same uses spread out;
- failure: `w · decay`, decay 0.4 task_mismatch, 0.6 runtime_error, 0.8 auth_error,
  0.85 dependency_missing, 0.9 api_error.

Reflex (§4.4): promoted once consecutive successes ≥ 5, weight ≥ 0.90 and no write/delete/shell
side effect; any failure or a new version resets it (a new version also restarts the streak).

Lessons (§4.3, structured only; new at confidence 0.6, +0.1 per validation, capped at 1.0):
- dependency_warning: the same skill failed with dependency_missing twice or more;
- skill_quality_warning: the skill failed with task_mismatch (its description promised more);
- env_ready: a success of a run that used credentials; an auth_error of the region's run lowers
  it by 0.2 (what the lesson said proved wrong), so it is pruned below 0.3.

Every function here is one transaction under the agent's Cortex lock and prunes before it
commits. A corrupt cortex is cleared and rebuilt inside the same transaction (boundary rule 6).
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone

from runs.models import MotorRun, RunStatus
from skills.models import Policy, SkillVersion

from .failures import RECOVERY, Classified, Recovery, classify_run
from .follow_ups import follow_ups_plan
from .locking import cortex_locked
from .models import (
    INITIAL_WEIGHT,
    LESSON_INITIAL_CONFIDENCE,
    Cortex,
    CortexCandidate,
    CortexLesson,
    CortexOutcome,
    CortexRegion,
    FailureClass,
    LessonKind,
)
from .perception import (
    REFLEX_MIN_CONSECUTIVE,
    REFLEX_MIN_EFFECTIVE_WEIGHT,
    CortexCorrupt,
    _check_candidate,
    _check_region,
    has_write_side_effects,
)
from .plan import side_effects_for, skill_md_chars_of
from .pruning import MAX_SIGNALS_PER_PATTERN, prune
from .sensory import pattern_merge, pattern_terms, region_name_for, signal_words, task_terms

logger = logging.getLogger(__name__)

#: §4.1 success step and its window
SUCCESS_RATE = 0.15
RECENT_WINDOW = timedelta(days=7)
#: §4.1 failure decay by class
DECAY: dict[str, float] = {
    FailureClass.TASK_MISMATCH: 0.4,
    FailureClass.RUNTIME_ERROR: 0.6,
    FailureClass.AUTH_ERROR: 0.8,
    FailureClass.DEPENDENCY_MISSING: 0.85,
    FailureClass.API_ERROR: 0.9,
}
#: §4.3 confidence step per validation, and its cap
LESSON_STEP = 0.1
LESSON_CAP = 1.0
#: how much a contradicted env_ready lesson loses
LESSON_CONTRADICTED = 0.2
#: dependency_missing failures of one skill before a dependency_warning is written
DEPENDENCY_REPEATS = 2
DEPENDENCY_ACTION = "check_bin_before_install"


def success_weight(weight: float, successes_in_last_7d: int) -> float:
    """§4.1: `w + (1 − w) · 0.15 · 1 / (1 + successes_in_last_7d)`."""
    return weight + (1 - weight) * SUCCESS_RATE * (1 / (1 + successes_in_last_7d))


def failure_weight(weight: float, failure_class: str) -> float:
    """§4.1: `w · decay` with the class's decay."""
    return weight * DECAY[failure_class]


@dataclass
class LearnResult:
    """What one outcome taught (returned to the caller; also the CortexOutcome row)."""

    skill: str
    region: str
    success: bool
    failure_class: str
    weight_before: float
    weight_after: float
    reflex: bool
    recovery: Recovery | None
    lessons: list[str] = field(default_factory=list)
    #: the outcome's key, and the follow-ups it wrote ("release", "retry"; cognition.cortex
    #: .follow_ups), carried out after the commit
    key: str = ""
    follow_ups: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["recovery"] = self.recovery.as_dict() if self.recovery else None
        return data


# --- rebuild ---------------------------------------------------------------------------------


def _rebuild_if_corrupt(cortex: Cortex, *, now: datetime) -> None:
    """Boundary rule 6: a cortex with a row that breaks its invariants is cleared (regions,
    candidates and lessons; the outcome ledger stays) and rebuilt from here on."""
    try:
        for region in CortexRegion.objects.filter(cortex=cortex):
            _check_region(region)
        for candidate in CortexCandidate.objects.filter(region__cortex=cortex).select_related(
            "skill"
        ):
            _check_candidate(candidate)
    except (CortexCorrupt, TypeError, ValueError) as exc:
        logger.warning("cortex of agent %s rebuilt: %s", cortex.agent_id, exc)
        CortexRegion.objects.filter(cortex=cortex).delete()
        CortexLesson.objects.filter(cortex=cortex).delete()
        cortex.rebuilt_at = now
        cortex.rebuilt_reason = str(exc)[:300]
        cortex.save(update_fields=["rebuilt_at", "rebuilt_reason"])


# --- acquisition -----------------------------------------------------------------------------


def _region_for(
    cortex: Cortex, *, name: str | None, signals: list[str], fallback: str, now: datetime
) -> CortexRegion:
    name = (name or region_name_for(signals, fallback=fallback)).strip()[:100] or fallback[:100]
    region, _ = CortexRegion.objects.get_or_create(
        cortex=cortex, name=name, defaults={"created_at": now, "updated_at": now}
    )
    return region


def _merge_signals(region: CortexRegion, signals: list[str], *, now: datetime) -> None:
    merged = pattern_merge(list(region.signals), signals, limit=MAX_SIGNALS_PER_PATTERN)
    if merged != region.signals:
        region.signals = merged
        region.updated_at = now
        region.save(update_fields=["signals", "updated_at"])


def record_acquired(
    *,
    agent: Any,
    task: str,
    skill_version: SkillVersion,
    source: str,
    region: str | None = None,
    now: datetime | None = None,
) -> CortexCandidate:
    """See cognition.cortex.record_acquired."""
    now = now or timezone.now()
    skill = skill_version.skill
    signals = signal_words(task)
    policy = Policy.objects.filter(agent_id=agent.pk, skill=skill).first()
    with cortex_locked(agent.pk) as cortex:
        _rebuild_if_corrupt(cortex, now=now)
        target = _region_for(cortex, name=region, signals=signals, fallback=skill.name, now=now)
        _merge_signals(target, signals, now=now)
        candidate, created = CortexCandidate.objects.get_or_create(
            region=target,
            skill=skill,
            defaults={
                "source": source[:200],
                "version": skill_version.number,
                "weight": INITIAL_WEIGHT,
                "side_effects": side_effects_for(policy=policy),
                "skill_md_chars": skill_md_chars_of(skill_version),
                "created_at": now,
                "updated_at": now,
            },
        )
        if not created:
            _take_version(candidate, skill_version, policy=policy)
            candidate.source = source[:200] or candidate.source
            candidate.updated_at = now
            candidate.save()
        prune(cortex, now=now)
    candidate.refresh_from_db()
    return candidate


def _take_version(
    candidate: CortexCandidate, version: SkillVersion, *, policy: Policy | None
) -> None:
    """A different version than the one learned on: reflex and the streak start over
    (boundary rule 4); side effects and SKILL.md size are read again."""
    if candidate.version == version.number:
        return
    candidate.version = version.number
    candidate.reflex = False
    candidate.consecutive_successes = 0
    candidate.side_effects = side_effects_for(policy=policy)
    candidate.skill_md_chars = skill_md_chars_of(version)


# --- learning from an outcome ------------------------------------------------------------------


def _candidate_for(cortex: Cortex, *, skill_id: int, task: str) -> CortexCandidate | None:
    """The cortex's candidate for the run's skill: among several regions holding it, the one
    whose pattern shares most terms with the run's task (then the most recently used)."""
    rows = list(
        CortexCandidate.objects.select_for_update()
        .filter(region__cortex=cortex, skill_id=skill_id)
        .select_related("region", "skill")
        .order_by("id")
    )
    if len(rows) <= 1:
        return rows[0] if rows else None
    terms = task_terms(task)
    epoch = datetime.min.replace(tzinfo=timezone.get_current_timezone())
    return max(
        rows,
        key=lambda c: (len(pattern_terms(c.region.signals) & terms), c.last_used or epoch),
    )


def learn(
    *, agent: Any, run: MotorRun, key: str, now: datetime | None = None
) -> LearnResult | None:
    """See cognition.cortex.learn."""
    now = now or timezone.now()
    if run.skill_id is None or run.status not in (RunStatus.COMPLETED, RunStatus.FAILED):
        return None
    success = run.status == RunStatus.COMPLETED
    classified: Classified | None = None if success else classify_run(run)
    if not Cortex.objects.filter(agent_id=agent.pk).exists():
        return None  # nothing acquired, so no skill of the cortex ran
    version = run.skill_version
    policy = Policy.objects.filter(agent_id=agent.pk, skill_id=run.skill_id).first()
    with cortex_locked(agent.pk) as cortex:
        if CortexOutcome.objects.filter(cortex=cortex, key=key).exists():
            return None  # learned before: a redelivered outcome teaches nothing twice
        _rebuild_if_corrupt(cortex, now=now)
        candidate = _candidate_for(cortex, skill_id=run.skill_id, task=run.task)
        if candidate is None:
            return None  # a long-term skill: the cortex never touches it (boundary rule 1)
        if version is not None:
            _take_version(candidate, version, policy=policy)
        before = candidate.weight
        recent = [
            t for t in candidate.recent_successes if now - datetime.fromisoformat(t) < RECENT_WINDOW
        ]
        lessons: list[str] = []
        if success:
            candidate.weight = success_weight(before, len(recent))
            candidate.recent_successes = [*recent, now.isoformat()]
            candidate.successes += 1
            candidate.consecutive_successes += 1
            if not _pattern_hit(candidate.region, run.task):
                # found by search, not by the pattern: the pattern learns the task's words
                _merge_signals(candidate.region, signal_words(run.task), now=now)
            lessons += _validate_env_ready(cortex, candidate.region, run, now=now)
        else:
            assert classified is not None
            candidate.weight = failure_weight(before, classified.failure_class)
            candidate.recent_successes = recent
            candidate.failures += 1
            candidate.consecutive_successes = 0
            candidate.reflex = False
            lessons += _failure_lessons(cortex, candidate, run, classified, key=key, now=now)
        candidate.weight = min(1.0, max(0.0, candidate.weight))
        if not math.isfinite(candidate.weight):  # defensive: the constraint would refuse it
            candidate.weight = 0.0
        candidate.last_used = now
        candidate.updated_at = now
        if success and _promotable(candidate):
            candidate.reflex = True
        candidate.save()
        outcome = CortexOutcome.objects.create(
            cortex=cortex,
            key=key[:100],
            run_id=run.id,
            skill_name=candidate.skill.name,
            region_name=candidate.region.name,
            success=success,
            failure_class=classified.failure_class if classified else "",
            weight_before=before,
            weight_after=candidate.weight,
            created_at=now,
        )
        planned = follow_ups_plan(
            cortex=cortex,
            outcome=outcome,
            candidate=candidate,
            run=run,
            classified=classified,
            now=now,
        )
        result = LearnResult(
            skill=candidate.skill.name,
            region=candidate.region.name,
            success=success,
            failure_class=classified.failure_class if classified else "",
            weight_before=before,
            weight_after=candidate.weight,
            reflex=candidate.reflex,
            recovery=RECOVERY[classified.failure_class] if classified else None,
            lessons=lessons,
            key=outcome.key,
            follow_ups=[f.action for f in planned],
        )
        prune(cortex, now=now)
    return result


def _pattern_hit(region: CortexRegion, task: str) -> bool:
    from .perception import _region_hit

    return _region_hit(region, task_terms(task))


def _promotable(candidate: CortexCandidate) -> bool:
    """§4.4 with Phase 2's streak: ≥ 5 consecutive successes, weight ≥ 0.90, no write side
    effect."""
    return (
        candidate.consecutive_successes >= REFLEX_MIN_CONSECUTIVE
        and candidate.weight >= REFLEX_MIN_EFFECTIVE_WEIGHT
        and not has_write_side_effects(candidate.side_effects)
    )


# --- lessons ---------------------------------------------------------------------------------


def _lesson_touch(
    cortex: Cortex,
    *,
    kind: str,
    now: datetime,
    delta: float = LESSON_STEP,
    create: bool = True,
    **fields: Any,
) -> str:
    """Create the lesson (confidence 0.6) or move an existing one's confidence by `delta`;
    returns a short label of what changed ("" when nothing)."""
    lesson = CortexLesson.objects.filter(cortex=cortex, kind=kind, **fields).first()
    if lesson is None:
        if not create:
            return ""
        CortexLesson.objects.create(
            cortex=cortex,
            kind=kind,
            confidence=LESSON_INITIAL_CONFIDENCE,
            created_at=now,
            updated_at=now,
            **fields,
        )
        return f"{kind}: new"
    lesson.confidence = round(min(LESSON_CAP, max(0.0, lesson.confidence + delta)), 6)
    if delta > 0:
        lesson.validations += 1
    lesson.updated_at = now
    lesson.save(update_fields=["confidence", "validations", "updated_at"])
    return f"{kind}: {lesson.confidence:.1f}"


def _credential_keys(run: MotorRun) -> list[str]:
    """The run's credential names as environment variables are written (the vault's names are
    case-insensitive; runs store them lowercased)."""
    names = {n.upper()[:100] for n in run.credential_names or [] if isinstance(n, str) and n}
    return sorted(names)


def _validate_env_ready(
    cortex: Cortex, region: CortexRegion, run: MotorRun, *, now: datetime
) -> list[str]:
    return [
        _lesson_touch(cortex, kind=LessonKind.ENV_READY, region=region, key=name, now=now)
        for name in _credential_keys(run)
        if isinstance(name, str) and name
    ]


def _failure_lessons(
    cortex: Cortex,
    candidate: CortexCandidate,
    run: MotorRun,
    classified: Classified,
    *,
    key: str,
    now: datetime,
) -> list[str]:
    changed: list[str] = []
    cls = classified.failure_class
    if cls == FailureClass.DEPENDENCY_MISSING:
        earlier = CortexOutcome.objects.filter(
            cortex=cortex,
            skill_name=candidate.skill.name,
            failure_class=FailureClass.DEPENDENCY_MISSING,
        ).count()
        if earlier + 1 >= DEPENDENCY_REPEATS:
            changed.append(
                _lesson_touch(
                    cortex,
                    kind=LessonKind.DEPENDENCY_WARNING,
                    region=candidate.region,
                    key=(classified.dependency or candidate.skill.name)[:100],
                    action=DEPENDENCY_ACTION,
                    now=now,
                )
            )
    elif cls == FailureClass.TASK_MISMATCH:
        label = _lesson_touch(
            cortex, kind=LessonKind.SKILL_QUALITY_WARNING, skill_name=candidate.skill.name, now=now
        )
        if label.endswith("new"):
            CortexLesson.objects.filter(
                cortex=cortex,
                kind=LessonKind.SKILL_QUALITY_WARNING,
                skill_name=candidate.skill.name,
            ).update(detail=classified.evidence[:300])
        changed.append(label)
    elif cls == FailureClass.AUTH_ERROR:
        names = _credential_keys(run)
        which = Q(key__in=names) if names else Q(region=candidate.region)
        for lesson in CortexLesson.objects.filter(
            which,
            cortex=cortex,
            kind=LessonKind.ENV_READY,
        ):
            lesson.confidence = round(max(0.0, lesson.confidence - LESSON_CONTRADICTED), 6)
            lesson.updated_at = now
            lesson.save(update_fields=["confidence", "updated_at"])
            changed.append(f"{LessonKind.ENV_READY}: {lesson.confidence:.1f}")
    return [c for c in changed if c]
