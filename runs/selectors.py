"""Reads of the runtime's ledger."""

from __future__ import annotations

import json
from typing import Any

from django.db.models import OuterRef, QuerySet, Subquery, Sum

from runs.accounting import run_usage
from runs.host_models import RunPlacement
from runs.models import ACTIVE_STATUSES, Attempt, MotorRun, RunEvent, RunStatus, Signal, Step


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


def signal_list(*, agent_id: int, after_seq: int = 0, limit: int = 100) -> list[Signal]:
    """The agent's signals after its cursor `after_seq`, oldest first (at most 1000).

    `seq` is handed out under a per-agent lock held to commit (runs.outbox), so a page read after
    a cursor never misses a signal that commits later with a smaller number.
    """
    queryset = Signal.objects.filter(agent_id=agent_id, seq__gt=after_seq)
    return list(queryset.order_by("seq")[: max(1, min(limit, 1000))])


#: the execution log returned by `run_log` is cut to its last 16 KB (seed 001 core.task log)
LOG_TAIL_BYTES = 16 * 1024


def run_list(
    *, agent_id: int, status: str | None = None, limit: int = 20
) -> tuple[list[dict[str, Any]], int]:
    """The agent's runs, newest first, as {id, status, task, started_at, completed_at,
    iterations, tools}; plus the total before `limit` (1..100)."""
    queryset = MotorRun.objects.filter(agent_id=agent_id)
    if status:
        queryset = queryset.filter(status=status)
    total = queryset.count()
    iterations = (
        Attempt.objects.filter(run=OuterRef("pk"))
        .values("run")
        .annotate(total=Sum("iteration"))
        .values("total")
    )
    # summed from the attempts (not MotorRun.iterations) so runs recorded before that column
    # existed report theirs too
    rows = queryset.annotate(attempt_iterations=Subquery(iterations)).order_by("-created_at")[
        : max(1, min(limit, 100))
    ]
    return (
        [
            {
                "id": run.id,
                "status": run.status,
                "task": run.task,
                "started_at": run.started_at,
                "completed_at": run.completed_at,
                "iterations": run.attempt_iterations or 0,
                "tools": run.tools,
            }
            for run in rows
        ],
        total,
    )


#: characters of a tool call's output shown with its step in a run's details
OUTPUT_EXCERPT_CHARS = 200


def output_excerpt(result: dict[str, Any] | None) -> str:
    """The first OUTPUT_EXCERPT_CHARS characters of a recorded call's output, whitespace runs
    folded to one space, "…" appended when cut; "" while the call is in flight."""
    text = " ".join(str((result or {}).get("output") or "").split())
    if len(text) <= OUTPUT_EXCERPT_CHARS:
        return text
    return text[: OUTPUT_EXCERPT_CHARS - 1] + "…"


def run_status(*, run_id: str) -> dict[str, Any] | None:
    """Full details of one run: status, result, the current attempt, its steps and question."""
    run = run_get(run_id=run_id)
    if run is None:
        return None
    attempt = attempt_current(run=run)
    return {
        "id": run.id,
        "status": run.status,
        "task": run.task,
        "tools": run.tools,
        "allowed_domains": run.allowed_domains,
        "result": run.result,
        "attempt": {
            "index": attempt.index,
            "number": attempt.index + 1,
            "status": attempt.status,
            "iteration": attempt.iteration,
            "max_iterations": attempt.max_iterations,
            "failure": attempt.failure,
        },
        "attempts": run.current_attempt_index + 1,
        "max_attempts": run.max_attempts,
        "usage": run_usage(run),
        "pending_question": attempt.pending_question or None,
        "missing_credentials": list(run.missing_credentials),
        "paused": run_paused(run_id=run.id) if run.status == RunStatus.RUNNING else None,
        "steps": [
            {
                "attempt": step.attempt.index,
                "attempt_number": step.attempt.index + 1,
                "iteration": step.iteration,
                "call_index": step.call_index,
                "call_number": step.call_index + 1,
                "tool": step.tool,
                "arguments": step.arguments,
                "state": step.state,
                "ok": (step.result or {}).get("ok"),
                "error_code": (step.result or {}).get("error_code"),
                "duration_ms": step.duration_ms,
                "output_excerpt": output_excerpt(step.result),
            }
            for step in step_list(run_id=run.id)
        ],
        "created_at": run.created_at,
        "started_at": run.started_at,
        "completed_at": run.completed_at,
    }


def run_paused(*, run_id: str) -> dict[str, str] | None:
    """Why a running run waits for its infrastructure ({reason, since}: its workspace snapshot
    storage was unreachable, runs.placement), or None while nothing holds it back."""
    row = (
        RunPlacement.objects.filter(pk=run_id, paused_at__isnull=False)
        .values_list("paused_reason", "paused_at")
        .first()
    )
    if row is None:
        return None
    return {"reason": row[0], "since": row[1].isoformat()}


def run_log(*, run_id: str) -> str | None:
    """A plain-text execution log (transitions and tool calls in time order), last 16 KB."""
    if not MotorRun.objects.filter(pk=run_id).exists():
        return None
    entries: list[tuple[Any, str]] = []
    for event in RunEvent.objects.filter(run_id=run_id):
        detail = event.detail if isinstance(event.detail, dict) else {}
        if detail.get("event") == "browser_selector_invalidated":
            # not a move of the run: a selector of its skill dropped (runs.browser_memory)
            entries.append(
                (
                    event.created_at,
                    f"browser_selector_invalidated: {detail.get('target')!r} "
                    f"({detail.get('role')} {detail.get('name')!r}) dropped, {detail.get('reason')}",
                )
            )
            continue
        entries.append(
            (event.created_at, f"{event.from_status or '-'} -> {event.to_status} by {event.actor}")
        )
    for step in step_list(run_id=run_id):
        result = step.result or {}
        outcome = (
            "in flight"
            if step.result is None
            else ("ok" if result.get("ok") else f"error {result.get('error_code')}")
        )
        output = str(result.get("output", ""))[:500]
        entries.append(
            (
                step.created_at,
                f"attempt {step.attempt.index + 1}, iteration {step.iteration}, "
                f"call {step.call_index + 1}: {step.tool} {json.dumps(step.arguments, sort_keys=True)[:1000]} -> {outcome}"
                + (f"\n  {output}" if output else ""),
            )
        )
    entries.sort(key=lambda entry: entry[0])
    text = "\n".join(f"{at.isoformat()} {line}" for at, line in entries)
    data = text.encode()
    if len(data) <= LOG_TAIL_BYTES:
        return text
    return data[-LOG_TAIL_BYTES:].decode(errors="ignore")
