"""Code-path variants bench/motor.py can compare (`--compare`), for the benchmark only.

The variant is chosen by the environment variable BENCH_MOTOR_VARIANT, which only the benchmark
reads: in its own process (where runs are started) through `use`, and in the worker processes it
starts through `bench._motor_tasks`, which applies it when the worker loads it. The runtime
itself has no such switch; a variant replaces one function of it in these processes only.

- `default`: the code as it is.
- `no-first-call-ahead`: a new run's first message carries no first LLM request; the worker
  asks the model once it has claimed the run.

(The write path through the ORM and the announcement of a new run before its commit were
compared the same way, see docs/design-notes.md; they left the code, and their variants with it.)
"""

from __future__ import annotations

import os
from typing import Any

VARIABLE = "BENCH_MOTOR_VARIANT"
VARIANTS = ("default", "no-first-call-ahead")

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
    import runs.services as services

    _originals.setdefault("inputs", services.FirstCallAhead.__dict__["inputs"])
    services.FirstCallAhead.inputs = (  # type: ignore[method-assign]
        staticmethod(_no_inputs) if variant == "no-first-call-ahead" else _originals["inputs"]
    )


def _no_inputs(run: Any) -> None:
    return None
