"""The cortex learns of every run's end from its motor_result signal.

Registered as a brain hook (cognition.brain_hooks), so signal delivery calls it once per
committed signal, at least once, from a Celery task, whatever brain the agent uses (the built-in
one or a webhook). The outcome's key is the signal's id: a redelivered signal finds its outcome
in the ledger and teaches nothing twice. After learning, the cleanup rules run
(cognition.cortex.cleanup). The built-in brain calls `learn_from_signal` itself too before it
tells the user about the run, so what it says already counts this outcome; whichever comes
first learns, the other is a no-op.
"""

from __future__ import annotations

import logging

from runs.models import MotorRun, Signal, SignalKind

from .learning import LearnResult, learn

logger = logging.getLogger(__name__)

#: the name the hook is registered under
CORTEX_HOOK_NAME = "skill_cortex"


def outcome_key(signal_id: int) -> str:
    return f"signal:{signal_id}"


def learn_from_signal(signal_id: int) -> LearnResult | None:
    """Learn from the run a motor_result signal reports (a no-op for other signals, runs
    without a skill, runs still going, and signals seen before); then apply cleanup."""
    from .cleanup import cleanup_after

    signal = Signal.objects.filter(pk=signal_id, kind=SignalKind.MOTOR_RESULT).first()
    if signal is None or not signal.run_id:
        return None
    run = (
        MotorRun.objects.select_related("agent", "skill_version", "skill")
        .filter(pk=signal.run_id)
        .first()
    )
    if run is None or run.skill_id is None:
        return None
    result = learn(agent=run.agent, run=run, key=outcome_key(signal_id))
    if result is not None:
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
    from .models import CortexCandidate, CortexOutcome

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
    return {
        "skill": outcome.skill_name,
        "region": outcome.region_name,
        "success": outcome.success,
        "failure_class": outcome.failure_class or None,
        "weight_before": round(outcome.weight_before, 4),
        "weight_after": round(outcome.weight_after, 4),
        "recovery": recovery.as_dict() if recovery else None,
        "retention_suggested": bool(
            outcome.success and candidate is not None and retention_suggested(candidate)
        ),
    }
