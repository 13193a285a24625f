"""The service's Prometheus metrics that processes count themselves (prometheus-client).

Every process (web workers, Celery workers and their children, beat) runs in prometheus-client's
multiprocess mode: config/settings.py points PROMETHEUS_MULTIPROC_DIR at a directory of this
host under MOTOR_METRICS_DIR before anything imports prometheus_client, each process writes its
samples to its own files there, and the /metrics endpoint (cognition.ops.metrics) adds up the
files of every host. Numbers that live in the database (runs by status, pending approvals and
deliveries, schedule skips) are read at scrape time instead (cognition.ops.collectors).

Labels carry only bounded values: model and tool names, outcomes, error codes, reasons.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import Counter, Gauge, Histogram

#: seconds; LLM answers take 0.5-10 s, tool calls from milliseconds to minutes
LLM_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0)
TOOL_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
WEBHOOK_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

LLM_REQUEST_SECONDS = Histogram(
    "motor_llm_request_seconds",
    "Time of one LLM chat completion (retries included), by model and outcome (ok, error).",
    ["model", "outcome"],
    buckets=LLM_BUCKETS,
)
LLM_TOKENS = Counter(
    "motor_llm_tokens",
    "Tokens the LLM reported in its answers' usage, by model and kind (prompt, completion).",
    ["model", "kind"],
)
ITERATIONS = Counter(
    "motor_iterations",
    "Loop iterations (one LLM answer recorded for a run); rate() gives iterations per second.",
)
TOOL_CALL_SECONDS = Histogram(
    "motor_tool_call_seconds",
    "Time of one tool call, by tool.",
    ["tool"],
    buckets=TOOL_BUCKETS,
)
TOOL_CALL_FAILURES = Counter(
    "motor_tool_call_failures",
    "Tool calls that returned an error, by tool and error code.",
    ["tool", "error_code"],
)
SANDBOX_STARTS = Counter(
    "motor_sandbox_session_starts",
    "Run sandbox sessions handed to a slice: cold (opened now), pooled (a spare adopted) or warm"
    " (kept from before).",
    ["kind"],
)
SANDBOX_SESSIONS_OPEN = Gauge(
    "motor_sandbox_sessions_open",
    "Run sandbox sessions open in the worker processes (as of each process's last open/close).",
    multiprocess_mode="livesum",
)
EGRESS_DECISIONS = Counter(
    "motor_egress_decisions",
    "Egress proxy decisions on sandbox connections, by decision (allowed, denied) and reason.",
    ["decision", "reason"],
)
REAPER_ACTIONS = Counter(
    "motor_reaper_actions",
    "What the reaper did: runs woken (lost wake-up, dead holder) and runs timed out.",
    ["action"],
)
WEBHOOK_SECONDS = Histogram(
    "motor_webhook_seconds",
    "Time of one webhook delivery attempt, by outcome (delivered, retry, failed).",
    ["outcome"],
    buckets=WEBHOOK_BUCKETS,
)
ENERGY_REFUSALS = Counter(
    "motor_energy_refusals",
    "Runs refused because the agent's energy was too low, by mode (oneshot, agentic).",
    ["mode"],
)


@contextmanager
def llm_timer(model: str) -> Iterator[None]:
    """Times the block as one LLM request of `model`; an exception counts as an error."""
    started = time.monotonic()
    outcome = "error"
    try:
        yield
        outcome = "ok"
    finally:
        LLM_REQUEST_SECONDS.labels(model=model, outcome=outcome).observe(time.monotonic() - started)


def llm_usage_record(model: str, usage: object) -> None:
    """Count the prompt and completion tokens of an answer's `usage` object (if it has one)."""
    if not isinstance(usage, dict):
        return
    for kind in ("prompt", "completion"):
        value = usage.get(f"{kind}_tokens")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            LLM_TOKENS.labels(model=model, kind=kind).inc(value)


def tool_call_record(*, tool: str, duration_s: float, ok: bool, error_code: str = "") -> None:
    """Count one finished tool call."""
    TOOL_CALL_SECONDS.labels(tool=tool).observe(max(duration_s, 0.0))
    if not ok:
        TOOL_CALL_FAILURES.labels(tool=tool, error_code=error_code or "unknown").inc()
