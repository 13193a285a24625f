"""The spare-sandbox pool's part of bench/sandbox.py (sandbox/pool.py): a new run's first call
with a spare to adopt against a warm call, what idle spares cost in CPU, and their memory."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.sandbox_measure import (
    Row,
    measure,
    own_cpu_ms,
    print_ratios,
    print_rows,
    process_cpu_ms,
    tree_pids,
)
from sandbox.types import ExecRequest, NetworkPolicy, SessionSpec

TRUE = ["/usr/bin/true"]


@contextmanager
def pool_of(backend_name: str, size: int, root: Path) -> Iterator[Any]:
    from sandbox.backends import get_backend
    from sandbox.pool import SessionPool

    pool = SessionPool(get_backend(backend_name), size=size, slot_root=root / ".pool").start()
    try:
        if not pool.wait_full(120):
            raise RuntimeError("the pool did not fill in 120 s")
        yield pool
    finally:
        pool.close()


def first_call_pooled(backend_name: str, n: int, *, domains: tuple[str, ...] = ()) -> list[float]:
    """Per sample: a new run's workspace (one small file), a spare adopted for it and its first
    call of `true`, timed from the adoption to the answer. The pool (2 spares) is full before
    each sample, as it is while it has spares."""
    out: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-pool-") as tmp:
        root = Path(tmp)
        with pool_of(backend_name, 2, root) as pool:
            for i in range(n + 2):
                if not pool.wait_full(120):
                    raise RuntimeError("the pool did not refill in 120 s")
                time.sleep(0.2)
                workspace = root / f"run-{i}"
                workspace.mkdir()
                (workspace / "notes.txt").write_text("a small file\n")
                spec = SessionSpec(
                    workspace=workspace,
                    network=NetworkPolicy(allowed_domains=domains),
                    session_id=f"bench-run-{i}",
                )
                start = time.perf_counter()
                session = pool.take(spec)
                if session is None:
                    raise RuntimeError("the pool had no spare to adopt")
                try:
                    result = session.exec(ExecRequest(argv=TRUE, timeout_s=10))
                    elapsed = (time.perf_counter() - start) * 1000
                finally:
                    session.close()
                if result.exit_code != 0:
                    raise RuntimeError(f"`true` failed in an adopted spare: {result}")
                if i >= 2:  # the first two warm the page cache
                    out.append(elapsed)
    return out


def warm_call_after_idle(backend_name: str, n: int, gap_s: float = 0.2) -> list[float]:
    """A warm session's call of `true` after `gap_s` without a call, as a run's calls come after
    a model turn (the tight-loop warm call of bench/sandbox.py finds every cache hot)."""
    from sandbox.backends import get_backend

    out: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-pool-") as tmp:
        session = get_backend(backend_name).open(SessionSpec(workspace=Path(tmp)))
        try:
            request = ExecRequest(argv=TRUE, timeout_s=10)
            for i in range(n + 2):
                time.sleep(gap_s)
                start = time.perf_counter()
                result = session.exec(request)
                if i >= 2:
                    out.append((time.perf_counter() - start) * 1000)
                if result.exit_code != 0:
                    raise RuntimeError(f"`true` failed in the sandbox: {result}")
        finally:
            session.close()
    return out


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def idle_pool(
    spares: int, seconds: float
) -> tuple[list[float], list[float], list[float], list[float]]:
    """A full bwrap pool of `spares` left alone for `seconds`. Returns ([CPU of each spare's
    processes, ms per second], [this process's CPU (the refill thread among it), ms per second
    per spare], [RSS of each spare's processes, MB], [PSS of each, MB])."""
    with (
        tempfile.TemporaryDirectory(prefix="bench-pool-") as tmp,
        pool_of("bwrap", spares, Path(tmp)) as pool,
    ):
        time.sleep(0.5)  # let the last start settle
        trees = [tree_pids(s.pid) for s in pool.spares()]
        before = [sum(process_cpu_ms(p) for p in tree) for tree in trees]
        host_before = own_cpu_ms()
        time.sleep(seconds)
        host = own_cpu_ms() - host_before
        after = [sum(process_cpu_ms(p) for p in tree) for tree in trees]
        rss = [sum(_rss_kb(p) for p in tree) / 1024 for tree in trees]
        pss = [sum(_pss_kb(p) for p in tree) / 1024 for tree in trees]
    per_spare = [(a - b) / seconds for a, b in zip(after, before, strict=True)]
    return per_spare, [host / seconds / spares], rss, pss


def pool_rows(rows: dict[str, Row], k: int) -> None:
    """A new run's first call with a spare to adopt (sandbox/pool.py), per backend, and the warm
    call it is held against (after an idle gap, as between model turns)."""
    for key, name, body in (
        (
            "idle_warm_bwrap",
            "warm bwrap call after 0.2 s idle (as after a model turn)",
            lambda: warm_call_after_idle("bwrap", 30 // k),
        ),
        (
            "pooled_bwrap",
            "new run's first call, spare adopted (bwrap)",
            lambda: first_call_pooled("bwrap", 30 // k),
        ),
        (
            "pooled_bwrap_net",
            "  the same with an allowlist (its egress proxy starts)",
            lambda: first_call_pooled("bwrap", 30 // k, domains=("example.com",)),
        ),
        (
            "idle_warm_docker",
            "warm docker call after 0.2 s idle",
            lambda: warm_call_after_idle("docker", 20 // k),
        ),
        (
            "pooled_docker",
            "new run's first call, spare adopted (docker)",
            lambda: first_call_pooled("docker", 20 // k),
        ),
    ):
        rows[key] = measure(name, body)


def pool_cpu_rows(spares: int, seconds: float) -> dict[str, Row]:
    """What a full bwrap pool of `spares` costs while nothing adopts one."""
    got: dict[str, tuple[list[float], ...]] = {}

    def part(which: int) -> Callable[[], list[float]]:
        def body() -> list[float]:
            if not got:
                got["x"] = idle_pool(spares, seconds)
            return got["x"][which]

        return body

    rows = {
        "pool_idle": measure(
            f"idle spare, CPU ms per second ({spares} spares, {seconds:g} s)", part(0)
        ),
        "pool_idle_host": measure("  the host side of it (refill thread), per spare", part(1)),
        "pool_rss": measure("idle spare's RSS, MB (bwrap + supervisor)", part(2)),
        "pool_pss": measure("  its PSS, MB (shared pages split among the spares)", part(3)),
    }
    return rows


def print_pool(rows: dict[str, Row], cpu: dict[str, Row]) -> None:
    """The pool's rows of `rows` (none with --cpu-only), their ratios, and the idle pool."""
    shown = {k: v for k, v in rows.items() if k.startswith(("pooled", "warm", "idle_warm"))}
    if not shown:
        print_rows(cpu, "an idle pool", unit="")
        return
    print_rows(shown, "spare sandboxes")
    bwrap, docker = "(bwrap)", "(docker)"
    print_ratios(
        rows,
        [
            (
                f"first call, spare adopted / warm call after idle {bwrap}",
                "pooled_bwrap",
                "idle_warm_bwrap",
                "<=",
                2.0,
            ),
            (
                f"first call, spare adopted / tight-loop warm call {bwrap}",
                "pooled_bwrap",
                "warm_bwrap",
                "",
                None,
            ),
            (
                f"  with an allowlist / warm call after idle {bwrap}",
                "pooled_bwrap_net",
                "idle_warm_bwrap",
                "",
                None,
            ),
            (
                f"first call, spare adopted / warm call after idle {docker}",
                "pooled_docker",
                "idle_warm_docker",
                "<=",
                2.0,
            ),
            (
                f"first call, spare adopted / tight-loop warm call {docker}",
                "pooled_docker",
                "warm_docker",
                "",
                None,
            ),
        ],
    )
    print_rows(cpu, "an idle pool", unit="")
