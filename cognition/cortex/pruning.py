"""Pruning (seed 003 §4.6), applied inside every cortex update before it commits.

- candidates: effective weight < 0.1 removed; at most 5 per region (the best by effective
  weight stay);
- regions: one left without candidates is removed (its pattern and its lessons with it); at most
  80 (those whose best candidate stands highest stay, the most recently updated on a tie);
- patterns: at most 10 signals (the newest stay; pattern_merge already keeps to it);
- lessons: confidence < 0.3 removed; at most 30 (the most confident, then the newest, stay).
"""

from __future__ import annotations

from datetime import datetime

from .models import Cortex, CortexCandidate, CortexLesson, CortexRegion
from .perception import effective_weight

MAX_CANDIDATES_PER_REGION = 5
MAX_REGIONS = 80
MIN_KEPT_EFFECTIVE_WEIGHT = 0.1
MAX_SIGNALS_PER_PATTERN = 10
MAX_LESSONS = 30
MIN_LESSON_CONFIDENCE = 0.3


def prune(cortex: Cortex, *, now: datetime) -> dict[str, int]:
    """Apply the limits to `cortex` (caller holds its lock); returns how many rows of each kind
    were removed."""
    removed = {"candidates": 0, "regions": 0, "lessons": 0}
    standing: dict[int, float] = {}
    drop: list[int] = []
    by_region: dict[int, list[tuple[float, int]]] = {}
    for pk, region_id, weight, last_used in CortexCandidate.objects.filter(
        region__cortex=cortex
    ).values_list("pk", "region_id", "weight", "last_used"):
        effective = effective_weight(weight, last_used, now=now)
        if effective < MIN_KEPT_EFFECTIVE_WEIGHT:
            drop.append(pk)
            continue
        by_region.setdefault(region_id, []).append((effective, pk))
    for region_id, rows in by_region.items():
        rows.sort(key=lambda r: (-r[0], r[1]))
        drop += [pk for _, pk in rows[MAX_CANDIDATES_PER_REGION:]]
        standing[region_id] = rows[0][0]
    if drop:
        removed["candidates"] = (
            CortexCandidate.objects.filter(pk__in=drop)
            .delete()[1]
            .get(CortexCandidate._meta.label, 0)
        )

    regions = list(
        CortexRegion.objects.filter(cortex=cortex).values_list("pk", "updated_at", "signals")
    )
    empty = [pk for pk, _, _ in regions if pk not in standing]
    kept = sorted(
        ((pk, updated) for pk, updated, _ in regions if pk in standing),
        key=lambda r: (standing[r[0]], r[1]),
        reverse=True,
    )
    gone = empty + [pk for pk, _ in kept[MAX_REGIONS:]]
    for pk, _, signals in regions:
        if pk not in gone and isinstance(signals, list) and len(signals) > MAX_SIGNALS_PER_PATTERN:
            CortexRegion.objects.filter(pk=pk).update(signals=signals[-MAX_SIGNALS_PER_PATTERN:])
    if gone:
        removed["regions"] = (
            CortexRegion.objects.filter(pk__in=gone).delete()[1].get(CortexRegion._meta.label, 0)
        )

    removed["lessons"] = CortexLesson.objects.filter(
        cortex=cortex, confidence__lt=MIN_LESSON_CONFIDENCE
    ).delete()[0]
    extra = list(
        CortexLesson.objects.filter(cortex=cortex)
        .order_by("-confidence", "-updated_at", "-id")
        .values_list("pk", flat=True)[MAX_LESSONS:]
    )
    if extra:
        removed["lessons"] += CortexLesson.objects.filter(pk__in=extra).delete()[0]
    return removed
