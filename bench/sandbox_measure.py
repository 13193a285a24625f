"""What bench/sandbox.py and bench/sandbox_pool.py share: a row of samples, timing and
measuring one, the CPU of processes from /proc, and printing rows and ratios."""

from __future__ import annotations

import os
import resource
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Row:
    name: str
    samples: list[float]  # milliseconds
    error: str = ""

    @property
    def median(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None

    @property
    def p95(self) -> float | None:
        if not self.samples:
            return None
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def timed(fn: Callable[[], object], n: int, *, warmup: int = 3) -> list[float]:
    for _ in range(warmup):
        fn()
    out: list[float] = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def measure(name: str, body: Callable[[], list[float]]) -> Row:
    print(f"  measuring: {name} ...", file=sys.stderr, flush=True)
    try:
        return Row(name, body())
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - a missing part is reported, not fatal
        reason = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:120]
        if os.environ.get("BENCH_DEBUG"):
            traceback.print_exc()
        return Row(name, [], reason)


# ------------------------------------------------------------------------------ the parts


def own_cpu_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return (usage.ru_utime + usage.ru_stime) * 1000


def tree_pids(root: int) -> list[int]:
    """`root` and its live descendants (through every thread's children list)."""
    out: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as fh:
                    todo.extend(int(p) for p in fh.read().split())
            except (OSError, ValueError):
                continue
    return out


def process_cpu_ms(pid: int) -> float:
    """CPU the live process `pid` has used so far, all its threads, in ms (schedstat: ns
    resolution, where /proc/<pid>/stat counts clock ticks of 10 ms). Threads that already ended
    are not counted (the supervisor's threads live as long as it does)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                total += int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e6


def fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:9.3f}" if abs(value) < 0.1 else f"{value:9.2f}"


def print_rows(rows: dict[str, Row], title: str = "measurement", unit: str = "ms") -> None:
    width = max(len(title), *(len(r.name) for r in rows.values()))
    print()
    print(f"{title:<{width}}  {'n':>4}  {'median ' + unit:>9}  {'p95 ' + unit:>9}")
    print(f"{'-' * width}  {'-' * 4}  {'-' * 9}  {'-' * 9}")
    for row in rows.values():
        if row.error:
            print(f"{row.name:<{width}}  {'':>4}  n/a ({row.error})")
        else:
            print(f"{row.name:<{width}}  {len(row.samples):>4}  {fmt(row.median)}  {fmt(row.p95)}")


def print_ratios(
    rows: dict[str, Row], ratios: list[tuple[str, str, str, str, float | None]]
) -> None:
    """Ratios of medians; a target of None prints the value without a verdict."""
    print()
    ratios = [r for r in ratios if r[1] in rows and r[2] in rows]
    rwidth = max(len(r[0]) for r in ratios)
    print(f"{'ratio (medians)':<{rwidth}}  {'value':>7}  {'target':>7}  verdict")
    print(f"{'-' * rwidth}  {'-' * 7}  {'-' * 7}  {'-' * 7}")
    for label, top, bottom, op, target in ratios:
        a, b = rows[top].median, rows[bottom].median
        if a is None or b is None or b == 0:
            missing = rows[top].name if a is None else rows[bottom].name
            shown = f"{op}{target:<5}" if target is not None else ""
            print(f"{label:<{rwidth}}  {'n/a':>7}  {shown:>7}  n/a (missing: {missing})")
            continue
        value = a / b
        if target is None:
            print(f"{label:<{rwidth}}  {value:7.2f}")
            continue
        met = value <= target if op == "<=" else value >= target
        print(f"{label:<{rwidth}}  {value:7.2f}  {op}{target:<5}  {'met' if met else 'NOT met'}")
