"""What a run costs and what it used (seed 001 "Energy Model", Phase 2; "Run Trace" totals).

Energy: a run costs `base + max(0, iterations - free) × per_iteration`, with the rates of its mode
(a run granted the browser tool has its own). The base is taken when the run is created
(cognition.energy); each iteration past the free ones is taken by the write that records its
model reply (runs.ledger), so what the run's `energy_cost` says is what the agent lost.

Usage: each attempt counts its LLM calls and the tokens their answers reported (`usage`); its tool
calls are its Step rows. A run's totals are the sums over its attempts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connections
from django.db.models import Count, Q

#: decimal places energy amounts are kept to (0.35 - 0.15 must not become 0.19999999999999998)
ENERGY_PRECISION = 6


@dataclass(frozen=True, slots=True)
class EnergyRates:
    """The cost of one mode: `base` on creation, then `per_iteration` for every iteration past
    the first `free_iterations` (energy units of the 0.0-1.0 scale)."""

    base: float
    free_iterations: int
    per_iteration: float

    def iteration_cost(self, iteration: int) -> float:
        """What the run's `iteration`-th iteration (1-based, counted over all its attempts)
        costs beyond the base."""
        return self.per_iteration if iteration > self.free_iterations else 0.0

    def total(self, iterations: int) -> float:
        """base + max(0, iterations - free) × per_iteration."""
        extra = max(0, iterations - self.free_iterations) * self.per_iteration
        return round(self.base + extra, ENERGY_PRECISION)


def energy_rates(*, mode: str, tools: Iterable[str] = ()) -> EnergyRates:
    """The configured rates of a run of `mode` ("oneshot" or "agentic") granted `tools`."""
    if mode == "oneshot":
        return EnergyRates(float(settings.MOTOR_ENERGY_ONESHOT_COST), 0, 0.0)
    if "browser" in set(tools):
        return EnergyRates(
            float(settings.MOTOR_ENERGY_BROWSER_BASE),
            int(settings.MOTOR_ENERGY_BROWSER_FREE_ITERATIONS),
            float(settings.MOTOR_ENERGY_BROWSER_PER_ITERATION),
        )
    return EnergyRates(
        float(settings.MOTOR_ENERGY_AGENTIC_BASE),
        int(settings.MOTOR_ENERGY_AGENTIC_FREE_ITERATIONS),
        float(settings.MOTOR_ENERGY_AGENTIC_PER_ITERATION),
    )


def run_rates(run: Any) -> EnergyRates:
    """The rates of an agentic `run` (a MotorRun)."""
    return energy_rates(mode="agentic", tools=run.tools)


def _usage_query(run_id: str) -> Any:
    from runs.layer_step import INSTALL_TOOL
    from runs.models import Attempt, StepState

    # the dependency install is a step of the trace, not a call the model made
    called = ~Q(steps__tool=INSTALL_TOOL)
    return (
        Attempt.objects.filter(run_id=run_id)
        .annotate(
            calls=Count("steps", filter=called),
            # a done call whose envelope says not ok (JSON: the key compares as JSON false)
            failed=Count(
                "steps",
                filter=called & Q(steps__state=StepState.DONE, steps__result__ok=False),
            ),
        )
        .values(*_USAGE_COLUMNS)
    )


_USAGE_COLUMNS = (
    "index",
    "iteration",
    "llm_calls",
    "prompt_tokens",
    "completion_tokens",
    "energy_cost",
    "calls",
    "failed",
)
#: stands for the run id in the compiled usage query (a value no run id takes)
_RUN_ID_MARK = "~run id~"


@cache
def _usage_sql(alias: str, vendor: str) -> tuple[str, tuple[Any, ...], int] | None:
    """The usage query compiled for the database `alias` (of `vendor`), its parameters, and
    where the run id goes in them; None when the run id is not one plain parameter."""
    query = _usage_query(_RUN_ID_MARK).query
    sql, params = query.get_compiler(using=alias).as_sql()
    marks = [i for i, param in enumerate(params) if param == _RUN_ID_MARK]
    if len(marks) != 1:
        return None
    return sql, tuple(params), marks[0]


def _usage_rows(run_id: str) -> list[dict[str, Any]]:
    from runs.models import Attempt

    # Building and compiling the query (its joins, filtered counts and JSON lookup) costs
    # several times its execution; only the run id changes between runs.
    alias = Attempt.objects.db
    connection = connections[alias]
    compiled = _usage_sql(alias, connection.vendor)
    if compiled is None:
        return list(_usage_query(run_id))
    sql, params, mark = compiled
    args = list(params)
    args[mark] = run_id
    with connection.cursor() as cursor:
        cursor.execute(sql, args)
        return [dict(zip(_USAGE_COLUMNS, row, strict=True)) for row in cursor.fetchall()]


def attempts_usage(run_id: str) -> dict[int, dict[str, Any]]:
    """attempt index -> {iterations, llm_calls, tool_calls, tool_errors, prompt_tokens,
    completion_tokens, total_tokens, energy_cost} of each attempt of `run_id`. One query."""
    usage: dict[int, dict[str, Any]] = {}
    for row in _usage_rows(run_id):
        usage[row["index"]] = {
            "iterations": row["iteration"],
            "llm_calls": row["llm_calls"],
            "tool_calls": row["calls"],
            "tool_errors": row["failed"],
            "prompt_tokens": row["prompt_tokens"],
            "completion_tokens": row["completion_tokens"],
            "total_tokens": row["prompt_tokens"] + row["completion_tokens"],
            "energy_cost": round(row["energy_cost"], ENERGY_PRECISION),
        }
    return usage


def run_usage(run: Any) -> dict[str, Any]:
    """The run's totals over all its attempts, with the energy it cost (base included) and,
    under `attempts`, each attempt's own numbers in index order."""
    per_attempt = attempts_usage(run.pk)
    totals: dict[str, Any] = {
        "iterations": 0,
        "llm_calls": 0,
        "tool_calls": 0,
        "tool_errors": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "total_tokens": 0,
    }
    for numbers in per_attempt.values():
        for key in totals:
            totals[key] += numbers[key]
    return {
        **totals,
        "energy_cost": round(run.energy_cost, ENERGY_PRECISION),
        "attempts": [{"index": index, **per_attempt[index]} for index in sorted(per_attempt)],
    }


def usage_of(usage: object) -> tuple[int, int]:
    """(prompt tokens, completion tokens) of a chat-completions answer's `usage` object; 0 for
    what it does not report."""
    if not isinstance(usage, dict):
        return 0, 0
    counts = []
    for key in ("prompt_tokens", "completion_tokens"):
        value = usage.get(key)
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        counts.append(value if ok else 0)
    return counts[0], counts[1]
