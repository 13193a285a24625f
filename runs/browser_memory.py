"""The browser tool's durable bookkeeping (runs.browser_models): a run's browser time and each
skill's selector cache. Every function commits on its own (autocommit): a worker that dies
right after an action has still counted it."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import F

from runs.browser_models import SELECTOR_MAX_MISSES, BrowserSelector, BrowserTime
from runs.models import MotorRun, RunEvent


def time_spent_ms(*, run_id: str) -> int:
    """The browser time the run has used so far, in every worker process together."""
    spent = BrowserTime.objects.filter(run_id=run_id).values_list("spent_ms", flat=True).first()
    return int(spent or 0)


def time_charge(*, run_id: str, ms: int) -> None:
    """Add `ms` to the run's browser time (an increment in the database, so two processes
    charging at once both count)."""
    ms = max(0, int(ms))
    if BrowserTime.objects.filter(run_id=run_id).update(spent_ms=F("spent_ms") + ms):
        return
    try:
        with transaction.atomic():
            BrowserTime.objects.create(run_id=run_id, spent_ms=ms)
    except IntegrityError:  # another process created the row first: add to it
        BrowserTime.objects.filter(run_id=run_id).update(spent_ms=F("spent_ms") + ms)


def selector_get(*, skill_id: int, target: str) -> BrowserSelector | None:
    return BrowserSelector.objects.filter(skill_id=skill_id, target=target).first()


def selector_remember(*, skill_id: int, target: str, role: str, name: str) -> None:
    """Keep the element the model found for `target` (role and name). A different element than
    the one kept replaces it with fresh counts; the same one clears its misses in a row."""
    row = selector_get(skill_id=skill_id, target=target)
    if row is None:
        try:
            with transaction.atomic():
                BrowserSelector.objects.create(
                    skill_id=skill_id, target=target, role=role, name=name[:200]
                )
        except IntegrityError:  # remembered by a concurrent run of the skill meanwhile
            pass
        return
    if (row.role, row.name) == (role, name[:200]):
        BrowserSelector.objects.filter(pk=row.pk).update(misses_in_row=0)
    else:
        BrowserSelector.objects.filter(pk=row.pk).update(
            role=role, name=name[:200], hits=0, misses=0, misses_in_row=0
        )


def selector_hit(*, selector_id: int) -> None:
    BrowserSelector.objects.filter(pk=selector_id).update(hits=F("hits") + 1, misses_in_row=0)


def selector_miss(*, run: MotorRun, selector_id: int, actor: str) -> bool:
    """Count a miss of the selector; at `SELECTOR_MAX_MISSES` in a row it is dropped and the
    drop is an event in the run's trace. True when it was dropped."""
    with transaction.atomic():
        BrowserSelector.objects.filter(pk=selector_id).update(
            misses=F("misses") + 1, misses_in_row=F("misses_in_row") + 1
        )
        row = BrowserSelector.objects.select_for_update().filter(pk=selector_id).first()
        if row is None or row.misses_in_row < SELECTOR_MAX_MISSES:
            return False
        row.delete()
        RunEvent.objects.create(
            run=run,
            from_status=run.status,
            to_status=run.status,
            actor=actor,
            detail={
                "event": "browser_selector_invalidated",
                "skill_id": row.skill_id,
                "target": row.target,
                "role": row.role,
                "name": row.name,
                "hits": row.hits,
                "misses": row.misses,
                "reason": f"not found {row.misses_in_row} times in a row",
            },
        )
        return True
