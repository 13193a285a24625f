"""Celery entry points of the runtime. Thin: take ids, call one service, return."""

from __future__ import annotations

from typing import Any

from celery import shared_task


@shared_task(
    name="runs.run_step",
    bind=True,
    acks_late=True,
    # Safe because a slice is idempotent by construction: it reads the ledger in the database,
    # holds a fenced lease, and never re-runs a recorded tool call. Poison slices are capped by
    # the redelivery counter in the database, not by the broker.
    reject_on_worker_lost=True,
    ignore_result=True,
    # its log context: the slice binds the run's agent, skill and attempt from its claim
    binds_run_context=True,
)
def run_step_task(self: Any, run_id: str, token: int | None = None, ahead: object = None) -> str:
    """Advance one run by one slice. A missing, finished or already served run is a no-op.

    `ahead` is ignored: a new run's first message from an earlier version may carry its first
    LLM request, which that version sent while the run was claimed.
    """
    from runs.services import run_step

    return run_step(run_id=run_id, expected_token=token).value


@shared_task(name="runs.run_reap", ignore_result=True)
def run_reap_task() -> dict[str, list[str]]:
    """Periodic (celery-beat, every minute): wake stalled runs, time out unanswered questions."""
    from runs.metrics import REAPER_ACTIONS
    from runs.services import run_reap

    report = dict(run_reap())
    REAPER_ACTIONS.labels(action="woken").inc(len(report.get("woken", ())))
    REAPER_ACTIONS.labels(action="timed_out").inc(len(report.get("timed_out", ())))
    return report


@shared_task(name="runs.sandbox_orphans_kill", ignore_result=True)
def sandbox_orphans_kill_task() -> list[str]:
    """Periodic (celery-beat): kill the sandboxes (and the browsers in them) of ended runs."""
    from runs.sessions import orphan_sandboxes_kill

    return orphan_sandboxes_kill()


@shared_task(name="runs.run_reemit_pending_questions", ignore_result=True)
def run_reemit_pending_questions_task(asked_before: str | None = None) -> int:
    """Run once at service start: re-signal every run still awaiting input (asked before
    `asked_before`, an ISO 8601 time, when given)."""
    from datetime import datetime

    from runs.services import run_reemit_pending_questions

    cutoff = datetime.fromisoformat(asked_before) if asked_before else None
    return len(run_reemit_pending_questions(asked_before=cutoff))


@shared_task(name="runs.run_failure_hint", ignore_result=True)
def run_failure_hint_task(run_id: str, attempt_index: int) -> str:
    """After a failure: add the LLM's short hint to the attempt's failure summary (best effort)."""
    from runs.failures import run_failure_hint

    return run_failure_hint(run_id=run_id, attempt_index=attempt_index)


@shared_task(name="runs.artifacts_purge", ignore_result=True)
def artifacts_purge_task() -> int:
    """Periodic (celery-beat): delete run artifacts older than their retention period."""
    from runs.artifacts import artifacts_purge

    return artifacts_purge()


@shared_task(name="runs.tool_audit_purge", ignore_result=True)
def tool_audit_purge_task() -> int:
    """Periodic (celery-beat): delete tool-call audit rows older than their retention."""
    from runs.audit import tool_audit_purge

    return tool_audit_purge()


@shared_task(name="runs.layers_collect", ignore_result=True)
def layers_collect_task() -> dict[str, int]:
    """Periodic (celery-beat): remove dependency layers no approved skill version needs."""
    from runs.layers import layers_collect

    return layers_collect()


@shared_task(name="runs.wakeups_send_pending", ignore_result=True)
def wakeups_send_pending_task() -> int:
    """Periodic (celery-beat): send the run wake-ups the broker refused while unreachable."""
    from runs.wakeups import wakeups_send_pending

    return wakeups_send_pending()
