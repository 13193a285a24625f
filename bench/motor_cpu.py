"""What the system under test costs while bench/motor.py measures it: CPU, memory, connections.

The machine may run other work, so the whole-machine CPU is only an upper bound. The CPU of the
system under test is attributed from each process's own counters in /proc (user + system
ticks): the worker processes and everything below them (the sandbox), the PostgreSQL backends
serving the bench database (their pids from pg_stat_activity, the script's own connections
left out by their application name) and redis-server's share over the same interval (the
broker; shared with whatever else uses that server).
"""

from __future__ import annotations

import glob
import json
import os
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

PG = "postgres://postgres@127.0.0.1:5432"
#: libpq's application name of this script's own connections (PGAPPNAME), left out of the count
SCRIPT_APP = "motor-bench-script"


def _redis_pid() -> int | None:
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if Path(f"/proc/{entry.name}/comm").read_text().strip() == "redis-server":
                    return int(entry.name)
            except OSError:
                continue
    return None


@dataclass
class Sampler:
    """Peak RSS of the worker processes and of their sandbox descendants, read from /proc, the
    peak PostgreSQL connections to the bench database, and each process's CPU ticks.

    A child of a `threads` worker that still runs the worker's own program is a fork on its way
    to exec bwrap (a session opening): its pages are the worker's, shared copy-on-write, so its
    RSS is counted in neither sum (a prefork worker's children are its pool processes).
    """

    roots: list[int]
    db_name: str
    prefork: bool = False
    peak_worker_kb: int = 0
    peak_sandbox_kb: int = 0
    peak_sandbox_procs: int = 0
    peak_db_connections: int = 0
    # pid -> (kind, first seen, last seen) CPU clock ticks (user + system) of the process
    cpu_ticks: dict[int, tuple[str, int, int]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._redis = _redis_pid()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        import psycopg

        page_kb = os.sysconf("SC_PAGE_SIZE") // 1024
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
            while True:
                stopping = self._stop.is_set()  # one last sample after stop()
                backends = {
                    int(pid)
                    for (pid,) in conn.execute(
                        "select pid from pg_stat_activity where datname = %s "
                        "and application_name <> %s",
                        (self.db_name, SCRIPT_APP),
                    ).fetchall()
                }
                parents: dict[int, int] = {}
                info: dict[int, tuple[str, int]] = {}
                ticks: dict[int, int] = {}
                # One raw read of /proc/<pid>/stat per process (RSS is its 24th field): with
                # hundreds of sandbox processes this loop is most of the script's own CPU.
                for entry in os.scandir("/proc"):
                    if not entry.name.isdigit():
                        continue
                    try:
                        fd = os.open(f"/proc/{entry.name}/stat", os.O_RDONLY)
                    except OSError:
                        continue
                    try:
                        stat = os.read(fd, 2048).decode()
                    except OSError:
                        continue
                    finally:
                        os.close(fd)
                    close = stat.rindex(")")
                    comm = stat[stat.index("(") + 1 : close]
                    rest = stat[close + 2 :].split()
                    pid = int(entry.name)
                    parents[pid] = int(rest[1])
                    ticks[pid] = int(rest[11]) + int(rest[12])
                    info[pid] = (comm, int(rest[21]) * page_kb)
                members = set(self.roots)
                changed = True
                while changed:
                    changed = False
                    for pid, ppid in parents.items():
                        if ppid in members and pid not in members:
                            members.add(pid)
                            changed = True
                worker_kb = sandbox_kb = procs = 0
                for pid in members:
                    if pid not in info:
                        continue
                    comm, kb = info[pid]
                    # worker = the worker processes and their prefork children; everything
                    # further down (bwrap, the helpers inside, even when they are python) is
                    # the sandbox
                    own_program = parents.get(pid) in self.roots and comm.startswith(
                        ("python", "celery")
                    )
                    if own_program and not self.prefork:
                        kind = "worker"  # a fork about to exec bwrap: CPU counted, RSS shared
                    elif pid in self.roots or own_program:
                        worker_kb += kb
                        kind = "worker"
                    else:
                        sandbox_kb += kb
                        procs += 1
                        kind = "sandbox"
                    self._tick(pid, kind, ticks[pid], counted_from_start=pid in self.roots)
                # long-lived servers: counted from the first sample that saw them
                for pid in backends:
                    if pid in ticks:
                        self._tick(pid, "postgres", ticks[pid], counted_from_start=True)
                if self._redis is not None and self._redis in ticks:
                    self._tick(self._redis, "redis", ticks[self._redis], counted_from_start=True)
                self.peak_worker_kb = max(self.peak_worker_kb, worker_kb)
                self.peak_sandbox_kb = max(self.peak_sandbox_kb, sandbox_kb)
                self.peak_sandbox_procs = max(self.peak_sandbox_procs, procs)
                self.peak_db_connections = max(self.peak_db_connections, len(backends))
                if stopping:
                    return
                self._stop.wait(0.25)

    def _tick(self, pid: int, kind: str, now: int, *, counted_from_start: bool) -> None:
        seen = self.cpu_ticks.get(pid)
        first = seen[1] if seen else (now if counted_from_start else 0)
        self.cpu_ticks[pid] = (kind, first, now)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def cpu_seconds(self, kind: str) -> float:
        """CPU time the processes of `kind` used while sampled (sandbox processes from their
        start; a process that ended between two samples loses at most 0.25 s of its time)."""
        hz = os.sysconf("SC_CLK_TCK")
        return sum(last - first for k, first, last in self.cpu_ticks.values() if k == kind) / hz

    def attributed(self) -> float:
        """CPU seconds of the system under test: workers, sandbox, PostgreSQL backends, Redis."""
        return sum(self.cpu_seconds(k) for k in ("worker", "sandbox", "postgres", "redis"))


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]
    return (sum(fields) - idle) / hz, sum(fields) / hz


def cpu_line(
    sampler: Sampler,
    iterations: int,
    machine_before: tuple[float, float],
    machine_after: tuple[float, float],
    own_s: float,
) -> str:
    """CPU per iteration: the system under test (and its parts), this script, the machine."""
    busy = machine_after[0] - machine_before[0]
    total = machine_after[1] - machine_before[1]
    per = 1000 / max(iterations, 1)
    parts = ", ".join(
        f"{label} {sampler.cpu_seconds(kind) * per:.1f}"
        for label, kind in (
            ("workers", "worker"),
            ("sandbox", "sandbox"),
            ("PostgreSQL backends", "postgres"),
            ("Redis", "redis"),
        )
    )
    return (
        f"CPU ms per iteration: system under test {sampler.attributed() * per:.1f} ({parts}); "
        f"this script (LLM stub, polling) {own_s * per:.1f}; whole machine {busy * per:.1f} "
        f"({busy / total:.0%} of {os.cpu_count()} cores busy)"
    )


def counts_read(prefix: str) -> Counter[str]:
    """The totals every counting worker process wrote (bench/_motor_tasks.py), summed."""
    total: Counter[str] = Counter()
    for path in glob.glob(f"{prefix}.*"):
        if path.endswith(".tmp"):
            continue
        try:
            total.update(json.loads(Path(path).read_text()))
        except (OSError, ValueError):
            continue
    return total


def counts_lines(before: Counter[str], after: Counter[str], iterations: int) -> list[str]:
    """Per-iteration statements and commands the workers sent between two readings."""
    delta = Counter({k: after[k] - before.get(k, 0) for k in after})
    per = max(iterations, 1)

    def line(prefix: str, label: str) -> str:
        items = sorted(
            ((k[len(prefix) :], v) for k, v in delta.items() if k.startswith(prefix) and v > 0),
            key=lambda kv: -kv[1],
        )
        trips = delta.get(f"{prefix}round trips", 0)
        words = ", ".join(f"{k} {v / per:.2f}" for k, v in items if k != "round trips")
        return f"{label} per iteration: round trips {trips / per:.2f}; {words}"

    return [line("sql ", "SQL"), line("redis ", "Redis")]
