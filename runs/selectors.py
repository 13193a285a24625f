"""Reads of the runtime's ledger."""

from __future__ import annotations

from django.db.models import QuerySet

from runs.models import ACTIVE_STATUSES, Attempt, MotorRun, Signal, Step


def run_get(*, run_id: str) -> MotorRun | None:
    return MotorRun.objects.filter(pk=run_id).first()


def run_active_for_agent(*, agent_id: int) -> MotorRun | None:
    """The agent's active run (created, running or awaiting something), if any."""
    return MotorRun.objects.filter(agent_id=agent_id, status__in=ACTIVE_STATUSES).first()


def attempt_current(*, run: MotorRun) -> Attempt:
    return Attempt.objects.get(run=run, index=run.current_attempt_index)


def step_list(*, run_id: str) -> QuerySet[Step]:
    """Every tool call of a run, attempt by attempt, in execution order."""
    return (
        Step.objects.filter(attempt__run_id=run_id)
        .select_related("attempt")
        .order_by("attempt__index", "iteration", "call_index")
    )


def signal_list(
    *, agent_id: int | None = None, after_id: int = 0, limit: int = 100
) -> list[Signal]:
    """Outbox rows with an id above `after_id` (the reader's cursor), oldest first."""
    queryset = Signal.objects.filter(id__gt=after_id)
    if agent_id is not None:
        queryset = queryset.filter(agent_id=agent_id)
    return list(queryset.order_by("id")[: max(1, min(limit, 1000))])
