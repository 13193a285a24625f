"""Motor runtime costs, measured against baselines from the same run.

Run by hand (root, on the machine with PostgreSQL, Redis and bwrap):

    uv run python -m bench.motor                 # all five parts
    uv run python -m bench.motor --parts 1,2     # only some parts
    uv run python -m bench.motor --quick         # fewer repetitions, smaller parts 4 and 5
    uv run python -m bench.motor --scale 10,50   # part 4 at each number of agents

The script creates its own PostgreSQL database (motor_bench_<pid>, dropped on exit), uses one
Redis database (--redis-db, flushed before and after), serves the LLM from a local stub server
in this process and starts its own Celery worker processes (`celery -A config worker`). A part
that cannot run is reported as "n/a" with the reason; the others still run.

Terms: an *iteration* is one LLM call of a run (what `max_iterations` counts). The scripted model
asks for one `read` of a small workspace file per iteration and answers on the last one.
Orchestration overhead of an iteration = the time between two consecutive LLM requests of a run,
minus the stub's own time on the first of them and minus the tool time the runtime recorded on
the Step (`duration_ms`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.motor_cpu import (  # noqa: E402 - after the path above
    Sampler,
    counts_lines,
    counts_read,
    cpu_line,
    machine_cpu,
)
from bench.motor_env import (  # noqa: E402 - after the path above
    Env,
    check_runs,
    environment,
    last_completion,
    require_completed,
    say,
    start_run,
    start_workers,
    stop_workers,
    wait_finished,
    workspace,
)

# ------------------------------------------------------------------------------ statistics


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def p95(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def fmt(value: float | None, width: int = 9, digits: int = 2) -> str:
    return f"{'n/a':>{width}}" if value is None else f"{value:{width}.{digits}f}"


def reason_of(exc: BaseException) -> str:
    if os.environ.get("BENCH_DEBUG"):
        traceback.print_exc()
    return f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:140]


# ------------------------------------------------------------------------------ part 1


def overhead_samples(env: Env, n: int, repeats: int) -> tuple[list[float], list[float], str]:
    """(overhead ms, tool ms, note) per iteration over `repeats` runs of n iterations.

    A run of n iterations makes n LLM requests, n - 1 of them asking for a read: n - 1 gaps.
    """
    from runs.models import Step

    overhead: list[float] = []
    tools: list[float] = []
    failed_total = 0
    for rep in range(repeats + 1):  # the first run warms the worker and is not counted
        tag = f"p1-{rep}"
        run_id = start_run(env, tag, reads=n - 1, iterations=n)
        wait_finished([run_id], 120)
        _, failed, _ = require_completed([run_id])
        if rep == 0:
            continue
        failed_total += failed
        served = env.stub.of(tag)
        steps = list(
            Step.objects.filter(attempt__run_id=run_id)
            .order_by("iteration")
            .values_list("duration_ms", flat=True)
        )
        if len(served) != n or len(steps) != n - 1:
            raise RuntimeError(f"expected {n} LLM requests / {n - 1} steps, saw {len(served)}")
        for i in range(n - 1):
            interval = (served[i + 1].received - served[i].received) * 1000
            llm = (served[i].answered - served[i].received) * 1000
            tool = float(steps[i] or 0)
            tools.append(tool)
            overhead.append(interval - llm - tool)
    note = f"{failed_total} failed tool calls" if failed_total else ""
    return overhead, tools, note


def lock_orm_transaction(run_id: str, samples: int) -> list[float]:
    """select_for_update of a run row + an update + an insert, in one transaction."""
    from django.db import transaction
    from django.utils import timezone

    from runs.models import MotorRun, RunEvent

    def once() -> None:
        with transaction.atomic():
            run = MotorRun.objects.select_for_update().get(pk=run_id)
            MotorRun.objects.filter(pk=run.pk).update(updated_at=timezone.now())
            RunEvent.objects.create(
                run=run, from_status=run.status, to_status=run.status, actor="bench", detail={}
            )

    for _ in range(10):
        once()
    out = []
    for _ in range(samples):
        start = time.perf_counter()
        once()
        out.append((time.perf_counter() - start) * 1000)
    return out


def langgraph_steps(db_url: str, n: int, repeats: int) -> list[float]:
    """Per-step wall time of a one-node graph looping n times, PostgresSaver, durability sync."""
    from typing import TypedDict

    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import END, START, StateGraph

    class State(TypedDict):
        count: int

    def step(state: State) -> dict[str, int]:
        return {"count": state["count"] + 1}

    builder = StateGraph(State)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", lambda s: "step" if s["count"] < n else END)
    out: list[float] = []
    url = db_url.replace("postgres://", "postgresql://", 1)
    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        graph = builder.compile(checkpointer=saver)
        for rep in range(repeats + 1):
            config = {"configurable": {"thread_id": f"bench-{rep}"}, "recursion_limit": n + 10}
            samples = []
            last = time.perf_counter()
            for _ in graph.stream({"count": 0}, config, durability="sync", stream_mode="updates"):
                now = time.perf_counter()
                samples.append((now - last) * 1000)
                last = now
            if len(samples) != n:
                raise RuntimeError(f"the graph ran {len(samples)} steps, not {n}")
            if rep:
                out.extend(samples)
    return out


def session_open_close(samples: int) -> list[float]:
    """A cold bwrap session opened (egress off) and closed, as each slice does for its tools."""
    from sandbox.backends import get_backend
    from sandbox.types import ExecRequest, SessionSpec

    backend = get_backend("bwrap")
    out = []
    with tempfile.TemporaryDirectory(prefix="bench-ws-") as ws:
        for i in range(samples + 2):
            start = time.perf_counter()
            session = backend.open(SessionSpec(workspace=Path(ws)))
            try:
                session.exec(ExecRequest(argv=["true"], timeout_s=10))
            finally:
                session.close()
            if i >= 2:
                out.append((time.perf_counter() - start) * 1000)
    return out


def parse_shape(shape: str) -> tuple[str, int, int]:
    """`pool:processes x concurrency` → (pool, processes, concurrency)."""
    pool, _, size = shape.partition(":")
    processes, _, concurrency = size.partition("x")
    return pool, int(processes), int(concurrency)


def part1(env: Env, n: int, repeats: int, shape: str) -> list[str]:
    lines: list[str] = []
    rows: dict[str, tuple[list[float], str]] = {}

    def measure(key: str, body: Callable[[], list[float]], label: str) -> None:
        say(f"measuring: {label} ...")
        try:
            rows[key] = (body(), label)
        except Exception as exc:  # noqa: BLE001 - a missing part is reported, not fatal
            rows[key] = ([], f"{label}: n/a ({reason_of(exc)})")

    note = ""
    try:
        pool, processes, concurrency = parse_shape(shape)
        start_workers(env, pool=pool, processes=processes, concurrency=concurrency)
        say(f"measuring: {repeats} runs of {n} iterations ...")
        overhead, tools, note = overhead_samples(env, n, repeats)
        rows["overhead"] = (
            overhead,
            f"orchestration overhead per iteration ({repeats} runs x {n - 1})",
        )
        rows["tool"] = (tools, "read tool time per iteration (Step.duration_ms)")
    except Exception as exc:  # noqa: BLE001
        rows["overhead"] = ([], f"orchestration overhead: n/a ({reason_of(exc)})")
    from runs.models import MotorRun

    some_run = MotorRun.objects.values_list("pk", flat=True).first()
    measure(
        "txn",
        lambda: lock_orm_transaction(
            str(some_run or start_run(env, "p1-lock", reads=0, iterations=1)), 200
        ),
        "bare lock + ORM checkpoint transaction",
    )
    measure(
        "lg", lambda: langgraph_steps(env.db_url, n, repeats), "LangGraph PostgresSaver step (sync)"
    )
    measure("bwrap", lambda: session_open_close(20), "bwrap session open + call + close")

    lines += table(
        f"Part 1 - per-iteration cost, one run at a time, worker {shape}",
        rows,
    )
    if note:
        lines.append(f"  note: {note}")
    ov = median(rows["overhead"][0])
    ratios = [
        ("overhead / lock+ORM transaction", ov, median(rows["txn"][0]), "<=", 2.5),
        ("overhead / LangGraph PostgresSaver step", ov, median(rows["lg"][0]), "<=", 3.0),
    ]
    lines += ratio_table(ratios)
    lines.append(
        "  (the bwrap row is what a slice pays when it must open its run's sandbox session cold;"
        " a warm session reused across slices pays only the call)"
    )
    return lines


# ------------------------------------------------------------------------------ part 2


#: seconds part 2 waits after each run before timing the next start
SETTLE_S = 0.05


def part2(env: Env, samples: int, shape: str) -> list[str]:
    from config.celery import app

    rows: dict[str, tuple[list[float], str]] = {}
    try:
        if not env.workers:
            pool, processes, concurrency = parse_shape(shape)
            start_workers(env, pool=pool, processes=processes, concurrency=concurrency)
        say("measuring: start -> first LLM request ...")
        first: list[float] = []
        for i in range(samples + 2):
            tag = f"p2-{i}"
            # the agent and the workspace exist before the clock starts: only run_start is timed
            prepared = (next(env.agents), workspace(env))
            started = time.perf_counter()
            run_id = start_run(env, tag, reads=0, iterations=1, prepared=prepared)
            deadline = time.monotonic() + 30
            while (hit := env.stub.first_request(tag)) is None:
                if time.monotonic() > deadline:
                    raise RuntimeError("no LLM request within 30 s of run_start")
                time.sleep(0.0005)
            wait_finished([run_id], 30)
            # A finished run still has work queued behind it (its signal's delivery, the brain's
            # wake-up): let the worker go idle, so the next start is timed alone, as the Celery
            # round trip below is.
            time.sleep(SETTLE_S)
            if i >= 2:
                first.append((hit.received - started) * 1000)
        rows["first"] = (first, "run_start -> first LLM request")
    except Exception as exc:  # noqa: BLE001
        rows["first"] = ([], f"run_start -> first LLM request: n/a ({reason_of(exc)})")
    try:
        say("measuring: Celery apply_async + get of a no-op ...")
        # The baseline under the same conditions as the starts: each after SETTLE_S of idle
        # (a round trip from idle processes pays every process's wake-up) ...
        trip: list[float] = []
        for i in range(samples + 2):
            time.sleep(SETTLE_S)
            started = time.perf_counter()
            app.send_task("bench.noop").get(timeout=30)
            if i >= 2:
                trip.append((time.perf_counter() - started) * 1000)
        rows["noop"] = (
            trip,
            f"Celery apply_async + get, no-op, after {SETTLE_S * 1000:.0f} ms idle",
        )
        # ... and back to back, every process still awake: for reference
        hot: list[float] = []
        for i in range(samples * 3 + 5):
            started = time.perf_counter()
            app.send_task("bench.noop").get(timeout=30)
            if i >= 5:
                hot.append((time.perf_counter() - started) * 1000)
        rows["hot"] = (hot, "Celery apply_async + get, no-op, back to back")
    except Exception as exc:  # noqa: BLE001
        rows["noop"] = ([], f"Celery no-op round trip: n/a ({reason_of(exc)})")
    lines = table(f"Part 2 - start latency, same worker ({shape})", rows)
    lines += ratio_table(
        [
            (
                "start -> first LLM request / Celery round trip",
                median(rows["first"][0]),
                median(rows["noop"][0]),
                "<=",
                2.0,
            )
        ]
    )
    first, hot = median(rows["first"][0]), median(rows.get("hot", ([], ""))[0])
    if first is not None and hot:
        lines.append(
            f"  (against the back-to-back round trip, every process already awake: {first / hot:.2f})"
        )
    return lines


# ------------------------------------------------------------------------------ part 3


def noop_throughput(count: int) -> float:
    from config.celery import app

    started = time.perf_counter()
    results = [app.send_task("bench.noop") for _ in range(count)]
    for result in results:
        result.get(timeout=120)
    return count / (time.perf_counter() - started)


def part3(env: Env, agents: int, iterations: int, shape: str) -> list[str]:
    lines = [f"Part 3 - throughput, {agents} agents x {iterations} iterations, worker {shape}"]
    motor = celery = None
    detail = cpu = ""
    sampler: Sampler | None = None
    try:
        pool, processes, concurrency = parse_shape(shape)
        start_workers(env, pool=pool, processes=processes, concurrency=concurrency)
        say(f"measuring: {agents} x {iterations} iterations ...")
        sampler = Sampler([w.pid for w in env.workers], env.db_name, prefork=pool == "prefork")
        machine_before, own_before = machine_cpu(), sum(os.times()[:2])
        started = time.time()
        ids = [
            start_run(env, f"p3-{i}", reads=iterations - 1, iterations=iterations)
            for i in range(agents)
        ]
        wait_finished(ids, 600)
        machine_after, own_after = machine_cpu(), sum(os.times()[:2])
        sampler.stop()
        done, failed, summary = require_completed(ids)
        motor = done / (last_completion(ids) - started)
        detail = f"{done} iterations, {summary}" + (
            f", {failed} failed tool calls" if failed else ""
        )
        cpu = cpu_line(sampler, done, machine_before, machine_after, own_after - own_before)
    except Exception as exc:  # noqa: BLE001
        detail = f"n/a ({reason_of(exc)})"
    finally:
        if sampler is not None:
            sampler.stop()
    try:
        say("measuring: Celery no-op throughput ...")
        noop_throughput(100)
        celery = noop_throughput(1000)
    except Exception as exc:  # noqa: BLE001
        detail += f"; no-op: n/a ({reason_of(exc)})"
    lines.append(f"  motor iterations per second        {fmt(motor)}   ({detail})")
    lines.append(f"  Celery no-op tasks per second      {fmt(celery)}")
    if cpu:
        lines.append(f"    ({cpu})")
    lines += ratio_table([("motor iterations/s / Celery no-op tasks/s", motor, celery, ">=", 0.4)])
    return lines


# ------------------------------------------------------------------------------ part 4


@dataclass
class Outcome:
    config: str
    rate: float | None = None
    detail: str = ""
    worker_mb: float | None = None
    sandbox_mb: float | None = None
    sandbox_procs: int = 0
    db_connections: int = 0
    cpu: str = ""
    #: CPU ms per iteration: the system under test's, the whole machine's
    cpu_sut_ms: float | None = None
    cpu_machine_ms: float | None = None
    counts: list[str] = field(default_factory=list)


def slow_llm_case(
    env: Env, config: str, agents: int, iterations: int, delay_s: float, tag: str = "p4"
) -> Outcome:
    pool, shape = config.split(":")
    processes, concurrency = (int(x) for x in shape.split("x"))
    outcome = Outcome(config)
    sampler: Sampler | None = None
    try:
        env.stub.delay_s = 0.0
        start_workers(env, pool=pool, processes=processes, concurrency=concurrency)
        env.stub.delay_s = delay_s
        sampler = Sampler([w.pid for w in env.workers], env.db_name, prefork=pool == "prefork")
        say(f"measuring: {config}, {agents} agents x {iterations} iterations, LLM {delay_s} s ...")
        ids: list[str] = []
        counted = counts_read(env.count_prefix) if env.count_prefix else None
        machine_before, own_before = machine_cpu(), sum(os.times()[:2])
        started = time.time()
        for i in range(agents):
            ids.append(
                start_run(env, f"{tag}-{config}-{i}", reads=iterations - 1, iterations=iterations)
            )
        wait_finished(ids, 60 + agents * iterations * delay_s)
        machine_after, own_after = machine_cpu(), sum(os.times()[:2])
        sampler.stop()
        done, failed, summary = check_runs(ids)
        took = last_completion(ids) - started
        outcome.rate = done / took
        outcome.detail = f"{done} iterations in {took:.1f} s; runs: {summary}"
        if failed:
            outcome.detail += f"; {failed} failed tool calls"
        outcome.cpu = cpu_line(sampler, done, machine_before, machine_after, own_after - own_before)
        outcome.cpu_sut_ms = sampler.attributed() * 1000 / max(done, 1)
        outcome.cpu_machine_ms = (machine_after[0] - machine_before[0]) * 1000 / max(done, 1)
        if counted is not None:
            time.sleep(0.5)  # the workers rewrite their counts every 0.25 s
            outcome.counts = counts_lines(counted, counts_read(env.count_prefix), done)
    except Exception as exc:  # noqa: BLE001
        outcome.detail = f"n/a ({reason_of(exc)})"
    finally:
        env.stub.delay_s = 0.0
        if sampler is not None:
            sampler.stop()
            outcome.worker_mb = sampler.peak_worker_kb / 1024
            outcome.sandbox_mb = sampler.peak_sandbox_kb / 1024
            outcome.sandbox_procs = sampler.peak_sandbox_procs
            outcome.db_connections = sampler.peak_db_connections
        stop_workers(env)
    return outcome


def part4(
    env: Env,
    configs: list[str],
    agents: int,
    iterations: int,
    delay_s: float,
    *,
    part: int = 4,
) -> list[str]:
    """Parts 4 and 5: `agents` runs of `iterations` at once, the LLM answering after `delay_s`,
    once per worker shape in `configs`."""
    ideal = agents / delay_s
    lines = [
        f"Part {part} - slow LLM ({delay_s:g} s per reply), {agents} agents x {iterations} "
        f"iterations at once, one host; ideal {ideal:.0f} iterations/s"
    ]
    outcomes = []
    for config in configs:
        outcomes.append(slow_llm_case(env, config, agents, iterations, delay_s, tag=f"p{part}"))
        o = outcomes[-1]
        say(f"{config}: {fmt(o.rate, 1, 1)} iterations/s ({o.detail})")
    width = max(len(o.config) for o in outcomes)
    lines.append(
        f"  {'pool:processes x concurrency':<{max(width, 28)}}  {'iter/s':>7}  {'of ideal':>8}  "
        f"{'target':>6}  {'verdict':<7}  {'worker RSS MB':>13}  {'sandbox RSS MB':>14}  "
        f"{'sandbox procs':>13}  {'DB conns':>8}"
    )
    for o in outcomes:
        share = o.rate / ideal if o.rate is not None else None
        verdict = "n/a" if share is None else ("met" if share >= 0.7 else "NOT met")
        lines.append(
            f"  {o.config:<{max(width, 28)}}  {fmt(o.rate, 7, 1)}  {fmt(share, 8)}  {'>=0.7':>6}  "
            f"{verdict:<7}  {fmt(o.worker_mb, 13, 0)}  {fmt(o.sandbox_mb, 14, 0)}  "
            f"{o.sandbox_procs:>13}  {o.db_connections:>8}"
        )
        lines.append(f"    ({o.detail})")
        if o.cpu:
            lines.append(f"    ({o.cpu})")
        lines += [f"    ({line})" for line in o.counts]
    return lines


def scale(env: Env, config: str, sizes: list[int], iterations: int, delay_s: float) -> list[str]:
    """What it costs as it grows: part 4 at each number of agents, one worker shape."""
    lines = [
        f"Scale - {iterations} iterations per agent, LLM {delay_s:g} s, worker {config}",
        f"  {'agents':>6}  {'iter/s':>7}  {'of ideal':>8}  {'CPU ms/iter (SUT)':>17}  "
        f"{'(machine)':>9}  {'worker RSS MB':>13}  {'sandbox RSS MB':>14}  {'DB conns':>8}",
    ]
    for agents in sizes:
        o = slow_llm_case(env, config, agents, iterations, delay_s, tag=f"s{agents}")
        say(f"{agents} agents: {fmt(o.rate, 1, 1)} iterations/s ({o.detail})")
        share = o.rate * delay_s / agents if o.rate is not None else None
        lines.append(
            f"  {agents:>6}  {fmt(o.rate, 7, 1)}  {fmt(share, 8)}  {fmt(o.cpu_sut_ms, 17, 1)}  "
            f"{fmt(o.cpu_machine_ms, 9, 1)}  {fmt(o.worker_mb, 13, 0)}  "
            f"{fmt(o.sandbox_mb, 14, 0)}  {o.db_connections:>8}"
        )
        if o.rate is None:
            lines.append(f"    ({o.detail})")
    return lines


# ------------------------------------------------------------------------------ report


def table(title: str, rows: dict[str, tuple[list[float], str]]) -> list[str]:
    width = max(len(label) for _, label in rows.values() if not label.endswith(")") or True)
    width = min(width, 60)
    lines = [title, f"  {'measurement':<{width}}  {'n':>4}  {'median ms':>9}  {'p95 ms':>9}"]
    lines.append(f"  {'-' * width}  {'-' * 4}  {'-' * 9}  {'-' * 9}")
    for samples, label in rows.values():
        if not samples:
            lines.append(f"  {label}")
        else:
            lines.append(
                f"  {label:<{width}}  {len(samples):>4}  {fmt(median(samples))}  "
                f"{fmt(p95(samples))}"
            )
    return lines


def ratio_table(ratios: list[tuple[str, float | None, float | None, str, float]]) -> list[str]:
    width = max(len(r[0]) for r in ratios)
    lines = [f"  {'ratio (medians)':<{width}}  {'value':>7}  {'target':>7}  verdict"]
    lines.append(f"  {'-' * width}  {'-' * 7}  {'-' * 7}  {'-' * 7}")
    for label, a, b, op, target in ratios:
        if a is None or b is None or b == 0:
            lines.append(
                f"  {label:<{width}}  {'n/a':>7}  {op}{target:<5}  n/a (a part is missing)"
            )
            continue
        value = a / b
        met = value <= target if op == "<=" else value >= target
        lines.append(
            f"  {label:<{width}}  {value:7.2f}  {op}{target:<5}  {'met' if met else 'NOT met'}"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--parts", default="1,2,3,4,5", help="comma-separated parts to run")
    parser.add_argument("--iterations", type=int, default=20, help="N of part 1 (default 20)")
    parser.add_argument("--repeats", type=int, default=3, help="part 1 runs of N (default 3)")
    parser.add_argument("--agents", type=int, default=100, help="agents of part 4 (default 100)")
    parser.add_argument(
        "--worker",
        default="threads:1x8",
        help="worker shape of parts 1 and 2, pool:processes x concurrency (default threads:1x8)",
    )
    parser.add_argument(
        "--worker3",
        default="threads:2x8",
        help="worker shape of part 3 (default threads:2x8: two worker processes)",
    )
    parser.add_argument(
        "--pools",
        default="threads:2x50,threads:1x100",
        help="part 4 worker shapes, pool:processes x concurrency (default threads:2x50,"
        "threads:1x100); PostgreSQL sees at most processes x MOTOR_DB_POOL_MAX_SIZE connections",
    )
    parser.add_argument(
        "--pools5",
        default="threads:2x100",
        help="part 5 worker shapes (default threads:2x100: two default worker processes)",
    )
    parser.add_argument("--agents5", type=int, default=200, help="agents of part 5 (default 200)")
    parser.add_argument(
        "--run-iterations", type=int, default=10, help="iterations per run in parts 4 and 5"
    )
    parser.add_argument("--delay", type=float, default=1.0, help="parts 4 and 5 LLM delay (s)")
    parser.add_argument(
        "--scale",
        default="",
        metavar="SIZES",
        help="instead of the parts: part 4 at each of these agent counts (e.g. 10,50,100,200) "
        "with the worker shape of part 5",
    )
    parser.add_argument(
        "--count",
        action="store_true",
        help="count the SQL statements and Redis commands the workers send per iteration "
        "(parts 4 and 5; wraps the client libraries in the workers, so CPU reads higher)",
    )
    parser.add_argument("--redis-db", type=int, default=13, help="Redis database (flushed)")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, 30 agents")
    args = parser.parse_args()
    parts = {p.strip() for p in args.parts.split(",")}
    repeats = 1 if args.quick else args.repeats
    agents = 30 if args.quick else args.agents
    print("bench/motor.py: measuring (several minutes)", file=sys.stderr)

    def show(lines: list[str]) -> None:
        # each part is printed as soon as it is measured, so a later failure loses nothing
        print("\n".join(["", *lines]), flush=True)

    try:
        with environment(args.redis_db) as env:
            if args.count:
                env.count_prefix = str(env.data_dir / "counts")
            if args.scale:
                sizes = [int(n) for n in args.scale.split(",") if n.strip()]
                show(scale(env, args.pools5.split(",")[0], sizes, 10, args.delay))
                return 0
            if "1" in parts:
                show(part1(env, args.iterations, repeats, args.worker))
            if "2" in parts:
                show(part2(env, 10 if args.quick else 30, args.worker))
            if "3" in parts:
                show(part3(env, 8, 20, args.worker3))
            if "4" in parts:
                configs = [c.strip() for c in args.pools.split(",") if c.strip()]
                show(part4(env, configs, agents, args.run_iterations, args.delay))
            if "5" in parts:
                configs = [c.strip() for c in args.pools5.split(",") if c.strip()]
                agents5 = 60 if args.quick else args.agents5
                show(part4(env, configs, agents5, args.run_iterations, args.delay, part=5))
    except KeyboardInterrupt:
        print("interrupted; cleaned up", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the environment itself could not be set up
        print(f"bench/motor.py cannot run here: {reason_of(exc)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
