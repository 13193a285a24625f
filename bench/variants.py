"""Code-path variants bench/motor.py can compare (`--compare`), for the benchmark only.

The variant is chosen by the environment variable BENCH_MOTOR_VARIANT, which only the benchmark
reads: in its own process (where runs are started) through `use`, and in the worker processes it
starts through `bench._motor_tasks`, which applies it when the worker loads it. The runtime
itself has no such switch; a variant replaces one function of it in these processes only.

- `default`: the code as it is.
- `orm`: the loop's fenced writes (and a run's creation) as ORM transactions on PostgreSQL too,
  as on SQLite, instead of one statement each (runs.ledger).
- `commit-then-announce`: a new run's first message goes out after the run's commit, not while
  the commit is flushed (no creation lock held across the publish).
- `no-first-call-ahead`: a new run's first message carries no first LLM request; the worker
  asks the model once it has claimed the run.
- `plain-start`: both of the above.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

VARIABLE = "BENCH_MOTOR_VARIANT"
VARIANTS = ("default", "orm", "commit-then-announce", "no-first-call-ahead", "plain-start")

_originals: dict[str, Any] = {}


def use(variant: str) -> None:
    """Make `variant` the code path of this process (and of workers started after this)."""
    if variant not in VARIANTS:
        raise SystemExit(f"unknown variant {variant!r}: one of {', '.join(VARIANTS)}")
    os.environ[VARIABLE] = variant
    _apply(variant)


def apply_from_environment() -> str:
    """In a worker process: apply the variant the benchmark chose; returns its name."""
    variant = os.environ.get(VARIABLE) or "default"
    _apply(variant)
    return variant


def _apply(variant: str) -> None:
    import runs.ledger as ledger
    import runs.services as services

    _originals.setdefault("inputs", services.FirstCallAhead.__dict__["inputs"])
    _originals.setdefault("insert_announced", ledger._insert_announced)
    _originals.setdefault("single_statement", ledger._single_statement)

    announce_after = variant in ("commit-then-announce", "plain-start")
    no_ahead = variant in ("no-first-call-ahead", "plain-start")
    ledger._single_statement = (  # type: ignore[assignment]
        _never if variant == "orm" else _originals["single_statement"]
    )
    ledger._insert_announced = (  # type: ignore[assignment]
        _insert_then_announce if announce_after else _originals["insert_announced"]
    )
    services.FirstCallAhead.inputs = (  # type: ignore[method-assign]
        staticmethod(_no_inputs) if no_ahead else _originals["inputs"]
    )


def _never(choice: bool | None) -> bool:
    return False


def _no_inputs(run: Any) -> None:
    return None


def _insert_then_announce(
    run_id: str, sql: str, params: list[Any], announce: Callable[[], bool]
) -> None:
    """The insert in autocommit (its own commit), then the announcement."""
    import runs.ledger as ledger
    from runs.wakeups import wakeup_remember

    ledger._execute(sql, params)
    if not announce():
        wakeup_remember(run_id, 0)
