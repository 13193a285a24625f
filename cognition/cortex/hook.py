"""The cortex learns of every run's end from its motor_result signal.

Registered as a brain hook (cognition.brain_hooks), so signal delivery calls it once per
committed signal, at least once, from a Celery task, whatever brain the agent uses (the built-in
one or a webhook). The outcome's key is the signal's id: a redelivered signal finds its outcome
in the ledger and teaches nothing twice. After learning, the cleanup rules run
(cognition.cortex.cleanup). The built-in brain calls `learn_from_signal` itself too before it
tells the user about the run, so what it says already counts this outcome; whichever comes
first learns, the other is a no-op.

What the learning obliges the cortex to do next (release the skill, retry an api_error once) is
written in the learning's transaction and carried out here right after; a worker that dies in
between leaves it to the redelivered signal or the periodic sweep (cognition.cortex.follow_ups).
"""

from __future__ import annotations

import logging

from runs.crashpoints import crash_point
from runs.models import MotorRun, Signal, SignalKind

from .learning import LearnResult, learn

logger = logging.getLogger(__name__)

#: the name the hook is registered under
CORTEX_HOOK_NAME = "skill_cortex"


def outcome_key(signal_id: int) -> str:
    return f"signal:{signal_id}"


def learn_from_signal(signal_id: int) -> LearnResult | None:
    """Learn from the run a motor_result signal reports (a no-op for other signals, runs
    without a skill, runs still going, and signals seen before); then carry out what the
    learning left to do (the release, the due follow-ups of a signal learned before)."""
    from .cleanup import cleanup_after
    from .follow_ups import follow_ups_for_outcome

    # One narrow read decides most signals (a run without a skill teaches nothing); only a
    # skill's run is loaded whole.
    found = (
        Signal.objects.filter(pk=signal_id, kind=SignalKind.MOTOR_RESULT, run__isnull=False)
        .values_list("run_id", "run__skill_id")
        .first()
    )
    if found is None or found[1] is None:
        return None
    run = (
        MotorRun.objects.select_related("agent", "skill_version", "skill")
        .filter(pk=found[0])
        .first()
    )
    if run is None or run.skill_id is None:
        return None
    result = learn(agent=run.agent, run=run, key=outcome_key(signal_id))
    # test-only: a worker killed between the learning's commit and the release (runs.crashpoints)
    crash_point("cortex_after_learning")
    if result is None:
        # learned before (a redelivery): what that learning left undone is done now
        follow_ups_for_outcome(outcome_key(signal_id), agent_id=run.agent_id)
    else:
        cleanup_after(agent=run.agent, result=result)
        logger.info(
            "cortex: run %s of %s %s (weight %.3f -> %.3f)",
            run.id,
            result.skill,
            "succeeded" if result.success else f"failed ({result.failure_class})",
            result.weight_before,
            result.weight_after,
        )
    return result


def connect() -> None:
    """Register the hook (called from CognitionConfig.ready)."""
    from cognition.brain_hooks import register_brain_hook

    def hook(signal_id: int) -> None:
        learn_from_signal(signal_id)

    register_brain_hook(CORTEX_HOOK_NAME, hook)


def outcome_facts(signal_id: int) -> dict[str, object] | None:
    """What the cortex learned from a motor_result signal, for the brain's event: learns it
    first when the hook has not yet (idempotent), then reads the ledger. None when the run was
    not of a cortex skill."""
    from .cleanup import retention_suggested
    from .failures import RECOVERY
    from .models import CortexCandidate, CortexFollowUp, CortexOutcome, FollowUpAction

    learn_from_signal(signal_id)
    outcome = CortexOutcome.objects.filter(key=outcome_key(signal_id)).first()
    if outcome is None:
        return None
    candidate = (
        CortexCandidate.objects.filter(
            region__cortex=outcome.cortex_id, skill__name=outcome.skill_name
        )
        .order_by("-weight")
        .first()
    )
    recovery = RECOVERY.get(outcome.failure_class) if outcome.failure_class else None
    retries = list(
        CortexFollowUp.objects.filter(
            cortex_id=outcome.cortex_id, run_id=outcome.run_id, action=FollowUpAction.RETRY
        ).values_list("outcome_id", "due_at", "created_at")
    )
    own = [(due - made).total_seconds() for o, due, made in retries if o == outcome.pk]
    return {
        "skill": outcome.skill_name,
        "region": outcome.region_name,
        "success": outcome.success,
        "failure_class": outcome.failure_class or None,
        "weight_before": round(outcome.weight_before, 4),
        "weight_after": round(outcome.weight_after, 4),
        "recovery": recovery.as_dict() if recovery else None,
        # api_error: the cortex retries the run itself once, after `retry_in_s`; a failure of
        # that retry says `retried: true` (no retry is left)
        "retry_in_s": own[0] if own else None,
        "retried": bool(retries) and not own and bool(outcome.failure_class),
        "retention_suggested": bool(
            outcome.success and candidate is not None and retention_suggested(candidate)
        ),
    }
