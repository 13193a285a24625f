"""What an outcome obliges the cortex to do after learning: release the skill (§4.5) or retry a
run that failed with an api_error once, after a wait (§3.4) — crash-safe.

The obligation is a `CortexFollowUp` row written in the learning's own transaction (an outbox),
so a worker that dies between the learning's commit and the work leaves the row behind instead
of skipping the work. Carrying one out is one transaction that first marks the row (`UPDATE …
WHERE done_at IS NULL`, which also takes SQLite's write lock before anything is read), does the
work and sets `done_at`: whoever comes second finds nothing to do, so each happens exactly once.
Three callers, whichever is first:

- the cortex hook, right after learning (and again on a redelivered signal);
- `cognition.cortex_follow_up`, queued on commit with the retry's wait as countdown;
- `cognition.cortex_follow_ups_sweep` (celery-beat, every MOTOR_REAPER_INTERVAL_SECONDS): every
  due row still pending, e.g. one whose worker died or whose task message was lost.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from runs.errors import RunError
from runs.models import MotorRun
from skills.disabling import policy_release
from skills.models import Policy
from skills.services import Actor

from .failures import RECOVERY, Classified
from .models import (
    Cortex,
    CortexCandidate,
    CortexFollowUp,
    CortexOutcome,
    FailureClass,
    FollowUpAction,
)

logger = logging.getLogger(__name__)

#: who the release and the retry are recorded as (policy audit, run trace)
ACTOR_LABEL = "skill cortex"

RETAIN_MIN_SUCCESSES = 3
RETAIN_MIN_WEIGHT = 0.8
RETAIN_MAX_SKILL_MD_CHARS = 8000


def retention_suggested(candidate: CortexCandidate) -> bool:
    """§4.5: successes ≥ 3, weight ≥ 0.8 and SKILL.md under 8,000 characters."""
    return (
        candidate.successes >= RETAIN_MIN_SUCCESSES
        and candidate.weight >= RETAIN_MIN_WEIGHT
        and candidate.skill_md_chars < RETAIN_MAX_SKILL_MD_CHARS
    )


def retry_wait_s() -> float:
    """The wait before the api_error retry (MOTOR_CORTEX_RETRY_WAIT_SECONDS; the seed's 3 s)."""
    return max(0.0, float(settings.MOTOR_CORTEX_RETRY_WAIT_SECONDS))


# --- planning (inside the learning's transaction) -------------------------------------------------


def _retry_allowed(cortex: Cortex, run: MotorRun) -> bool:
    """Once per run: not when the cortex retried this run before, nor when the run has no
    attempt left or is a review run."""
    if run.review or run.current_attempt_index + 1 >= run.max_attempts:
        return False
    return not CortexFollowUp.objects.filter(
        cortex=cortex, run_id=run.id, action=FollowUpAction.RETRY
    ).exists()


def follow_ups_plan(
    *,
    cortex: Cortex,
    outcome: CortexOutcome,
    candidate: CortexCandidate,
    run: MotorRun,
    classified: Classified | None,
    now: datetime,
) -> list[CortexFollowUp]:
    """Write the follow-ups `outcome` calls for, in the caller's (the learning's) transaction:
    a success releases the skill unless retention is suggested; a failure releases it when its
    recovery rule says so; an api_error retries the run once, after the wait. The retry's task
    is queued when the transaction commits."""
    rows: list[CortexFollowUp] = []

    def add(action: str, due_at: datetime) -> None:
        rows.append(
            CortexFollowUp.objects.create(
                cortex=cortex,
                outcome=outcome,
                action=action,
                skill_name=outcome.skill_name,
                run_id=run.id,
                due_at=due_at,
                created_at=now,
            )
        )

    if classified is None:
        if not retention_suggested(candidate):
            add(FollowUpAction.RELEASE, now)
    else:
        if RECOVERY[classified.failure_class].release:
            add(FollowUpAction.RELEASE, now)
        if classified.failure_class == FailureClass.API_ERROR and _retry_allowed(cortex, run):
            add(FollowUpAction.RETRY, now + timedelta(seconds=retry_wait_s()))
    for row in rows:
        if row.action == FollowUpAction.RETRY:
            transaction.on_commit(partial(_enqueue, row.pk, row.due_at))
    return rows


def _enqueue(follow_up_id: int, due_at: datetime) -> None:
    from cognition.tasks import cortex_follow_up_task

    countdown = max(0.0, (due_at - timezone.now()).total_seconds())
    try:
        cortex_follow_up_task.apply_async(args=[follow_up_id], countdown=countdown)
    except Exception:  # noqa: BLE001 - any broker failure; the sweep carries it out
        logger.warning("cortex follow-up %s not queued", follow_up_id, exc_info=True)


# --- carrying out -------------------------------------------------------------------------------


def _release(row: CortexFollowUp) -> str:
    agent_id = row.cortex.agent_id
    policy = Policy.objects.filter(agent_id=agent_id, skill__name=row.skill_name).first()
    if policy is None:
        return "no_policy"
    if MotorRun.objects.filter(
        agent_id=agent_id, skill_id=policy.skill_id, created_at__gt=row.created_at
    ).exists():
        # a release carried out late (after a crash) must not disable a skill taken up again
        # since: the later run's own outcome releases it
        return "superseded: the skill ran again since"
    released = policy_release(policy=policy, actor=Actor.system(ACTOR_LABEL))
    return "released" if released is not None else "already_released"


def _retry(row: CortexFollowUp) -> str:
    from runs.services import run_retry

    wait = (row.due_at - row.created_at).total_seconds()
    try:
        run_retry(
            run_id=row.run_id,
            guidance=(
                f"The previous attempt failed with an api_error (a transient failure of the remote "
                f"side); this is the skill cortex's one retry after {wait:g} s."
            ),
            actor=ACTOR_LABEL,
            detail={
                "cortex_retry": {
                    "failure_class": FailureClass.API_ERROR,
                    "waited_s": wait,
                    "outcome": row.outcome.key,
                }
            },
        )
    except RunError as exc:
        return f"not_retried: {exc}"[:300]
    return "retried"


def follow_up_carry_out(follow_up_id: int, *, now: datetime | None = None) -> str | None:
    """Carry out one follow-up if it is due and still pending: returns what happened, or None
    when there was nothing to do (done already, not due, gone)."""
    now = now or timezone.now()
    with transaction.atomic():
        claimed = CortexFollowUp.objects.filter(
            pk=follow_up_id, done_at=None, due_at__lte=now
        ).update(tries=F("tries") + 1)
        if not claimed:
            return None
        row = CortexFollowUp.objects.select_related("cortex", "outcome").get(pk=follow_up_id)
        result = _release(row) if row.action == FollowUpAction.RELEASE else _retry(row)
        row.done_at = timezone.now()
        row.result = result[:300]
        row.save(update_fields=["done_at", "result"])
    logger.info("cortex follow-up %s (%s %s): %s", row.pk, row.action, row.skill_name, result)
    return result


def follow_ups_for_outcome(key: str, *, agent_id: int, now: datetime | None = None) -> list[str]:
    """Carry out the due, pending follow-ups of the outcome `key` of `agent_id`'s cortex."""
    ids = CortexFollowUp.objects.filter(
        cortex__agent_id=agent_id, outcome__key=key, done_at=None
    ).values_list("id", flat=True)
    results = [follow_up_carry_out(i, now=now) for i in list(ids)]
    return [r for r in results if r is not None]


def follow_ups_sweep(*, now: datetime | None = None) -> dict[str, Any]:
    """Carry out every due follow-up still pending (the periodic task): {id: result}."""
    now = now or timezone.now()
    ids = list(
        CortexFollowUp.objects.filter(done_at=None, due_at__lte=now)
        .order_by("due_at", "id")
        .values_list("id", flat=True)[:500]
    )
    done: dict[str, Any] = {}
    for follow_up_id in ids:
        result = follow_up_carry_out(follow_up_id, now=now)
        if result is not None:
            done[str(follow_up_id)] = result
    return done
