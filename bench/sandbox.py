"""Sandbox start-up and call costs, measured against baselines from the same run.

Run by hand (root, on a machine with bwrap, a Docker engine and the sandbox image):

    uv run python -m bench.sandbox            # default sample counts
    uv run python -m bench.sandbox --quick    # fewer samples
    uv run python -m bench.sandbox --cpu-only # only the CPU measurements (bwrap)
    uv run python -m bench.sandbox --pool-only  # only the spare-sandbox pool (and warm calls)

Prints the median and p95 of each measurement, then the ratios the design targets. The CPU part
counts what the sandbox's own processes (bwrap, the supervisor with its threads, the file server,
the commands) spend on one session's lifecycle and while sessions sit idle. A part that
cannot run here (no bwrap, no engine, no image, not root for the TLS upstream) is reported as
"n/a" with the reason; the rest still runs.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.sandbox_measure import (  # noqa: E402
    Row,
    measure,
    own_cpu_ms,
    print_ratios,
    print_rows,
    process_cpu_ms,
    timed,
    tree_pids,
)
from bench.sandbox_pool import pool_cpu_rows, pool_rows, print_pool  # noqa: E402
from sandbox.types import ExecRequest, NetworkPolicy, SessionSpec  # noqa: E402

IMAGE = os.environ.get("SANDBOX_DOCKER_IMAGE", "motor-cortex-sandbox:local")
# the same binary by the same absolute path everywhere (/usr is shared with the sandboxes and
# the image is Debian too), so a warm call and the plain exec run exactly the same `true` and
# neither pays a PATH search the other does not
TRUE = ["/usr/bin/true"]


def plain_exec(n: int) -> list[float]:
    return timed(lambda: subprocess.run(TRUE, check=True), n)


def raw_bwrap_argv() -> list[str]:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise RuntimeError("bwrap is not installed")
    argv = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--clearenv"]
    argv += ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64", "sbin"):
        target = os.readlink(f"/{name}") if os.path.islink(f"/{name}") else None
        if target:
            argv += ["--symlink", target, f"/{name}"]
        elif os.path.isdir(f"/{name}"):
            argv += ["--ro-bind", f"/{name}", f"/{name}"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "/usr/bin/true"]
    return argv


def raw_bwrap(n: int) -> list[float]:
    argv = raw_bwrap_argv()
    return timed(lambda: subprocess.run(argv, check=True, env={}), n)


@contextmanager
def workspace() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="bench-ws-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def warm_call(backend_name: str, n: int) -> list[float]:
    backend = make_backend(backend_name)
    with workspace() as ws:
        session = backend.open(SessionSpec(workspace=ws))
        try:
            request = ExecRequest(argv=TRUE, timeout_s=10)

            def call() -> None:
                result = session.exec(request)
                if result.exit_code != 0:
                    raise RuntimeError(f"`true` failed in the sandbox: {result}")

            return timed(call, n)
        finally:
            session.close()


def warm_read(backend_name: str, n: int) -> list[float]:
    """The `read` file tool on a small file, through the tool executor, in a warm session."""
    from sandbox.tools.executors import execute_tool

    backend = make_backend(backend_name)
    with workspace() as ws:
        (ws / "notes.txt").write_text("a small file\n" * 8)
        session = backend.open(SessionSpec(workspace=ws))
        try:

            def call() -> None:
                result = execute_tool(session, "read", {"path": "notes.txt"}, network_enabled=False)
                if not result.ok:
                    raise RuntimeError(f"read failed in the sandbox: {result.output}")

            return timed(call, n)
        finally:
            session.close()


def cold_network_session(n: int) -> list[float]:
    backend = make_backend("bwrap")
    policy = NetworkPolicy(allowed_domains=("example.com",))
    out: list[float] = []
    with workspace() as ws:
        for i in range(n + 2):
            start = time.perf_counter()
            session = backend.open(SessionSpec(workspace=ws, network=policy))
            try:
                result = session.exec(ExecRequest(argv=TRUE, timeout_s=10))
                elapsed = (time.perf_counter() - start) * 1000
            finally:
                session.close()
            if result.exit_code != 0:
                raise RuntimeError(f"`true` failed in a cold session: {result}")
            if i >= 2:  # the first two warm the page cache and the imports
                out.append(elapsed)
    return out


def docker_run(n: int) -> list[float]:
    if shutil.which("docker") is None:
        raise RuntimeError("the docker CLI is not installed")
    probe = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True)
    if probe.returncode != 0:
        raise RuntimeError(f"image {IMAGE} missing (run sandbox/image/build.sh)")
    argv = ["docker", "run", "--rm", "--network", "none", IMAGE, "true"]
    return timed(lambda: subprocess.run(argv, check=True, capture_output=True), n, warmup=1)


def make_backend(name: str) -> object:
    from sandbox.backends import get_backend

    return get_backend(name)


def tls_pair(n: int) -> tuple[list[float], list[float]]:
    """(proxied, direct): a new TLS connection (TCP connect + handshake) to the same local TLS
    server, once through a CONNECT tunnel of our egress proxy and once directly."""
    from sandbox.egress import EgressProxy
    from tests.fixtures.upstream import running_upstream, send_connect

    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-tls-")))
        upstream = stack.enter_context(running_upstream(tmp))
        context = upstream.client_context()
        socket_path = tmp / "egress.sock"
        proxy = EgressProxy(
            session_id="bench",
            policy=NetworkPolicy(allowed_domains=("api.allowed.test",)),
            socket_path=socket_path,
            resolver=upstream.resolver(),
        )
        stack.callback(proxy.close)

        def proxied() -> None:
            answer = send_connect(socket_path, "api.allowed.test:443")
            if answer.status != 200 or answer.sock is None:
                raise RuntimeError(f"the proxy answered {answer.status}")
            with context.wrap_socket(answer.sock, server_hostname="api.allowed.test"):
                pass

        def direct() -> None:
            raw = socket.create_connection((upstream.ip, 443), timeout=10)
            with context.wrap_socket(raw, server_hostname="api.allowed.test"):
                pass

        # interleave the two so that drift on the machine hits both alike
        proxied_ms: list[float] = []
        direct_ms: list[float] = []
        for fn in (proxied, direct):
            fn()
        for _ in range(n):
            for fn, out in ((proxied, proxied_ms), (direct, direct_ms)):
                start = time.perf_counter()
                fn()
                out.append((time.perf_counter() - start) * 1000)
        return proxied_ms, direct_ms


# ------------------------------------------------------------------------------ CPU


def children_cpu_ms() -> float:
    """CPU (user + system) of this process's waited-for descendants so far, in ms. A session's
    bwrap is our child and waits for the supervisor, so after close() this counts both up to
    and including their exits. It does not count what the PID namespace's init takes down when
    it is killed (the file server): the kernel reaps those without adding their time to anyone,
    so `lifecycle_cpu` samples them just before the close."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000


def session_tree(session: object) -> tuple[int, list[int]]:
    """(bwrap's pid, [the supervisor, the file server, ...]) of a bwrap session."""
    inner = getattr(session, "inner", session)
    bwrap_pid: int = inner._proc.pid  # noqa: SLF001
    pids = tree_pids(bwrap_pid)
    return bwrap_pid, [p for p in pids if p != bwrap_pid]


def baseline_cpu(argv: list[str], n: int) -> list[float]:
    """CPU of each of `n` runs of `argv` (a plain subprocess, waited for), in ms."""
    subprocess.run(argv, check=True, env={})
    out: list[float] = []
    for _ in range(n):
        before = children_cpu_ms()
        subprocess.run(argv, check=True, env={})
        out.append(children_cpu_ms() - before)
    return out


@dataclass
class LifecycleCpu:
    """Per lifecycle, in ms: every sandbox process until it was reaped (see `children_cpu_ms`),
    and the parts of it sampled while the processes were still alive; `teardown` is what bwrap
    and the supervisor spent after that sample (the close: their exits)."""

    total: list[float]
    bwrap: list[float]
    supervisor_ready: list[float]
    supervisor_reads: list[float]
    file_server: list[float]
    teardown: list[float]
    host: list[float]


def lifecycle_cpu(n: int, reads: int = 10) -> LifecycleCpu:
    """`n` times: open a bwrap session, `reads` `read` calls of a small file, close; what the
    run loop does for one run of `reads` iterations."""
    from sandbox.tools.executors import execute_tool

    backend = make_backend("bwrap")
    out = LifecycleCpu([], [], [], [], [], [], [])
    with workspace() as ws:
        (ws / "notes.txt").write_text("a small file\n" * 8)
        for i in range(n + 2):
            kids_before, host_before = children_cpu_ms(), own_cpu_ms()
            session = backend.open(SessionSpec(workspace=ws))
            try:
                bwrap_pid, inside = session_tree(session)
                ready = sum(process_cpu_ms(p) for p in inside)
                for _ in range(reads):
                    result = execute_tool(
                        session, "read", {"path": "notes.txt"}, network_enabled=False
                    )
                    if not result.ok:
                        raise RuntimeError(f"read failed in the sandbox: {result.output}")
                _bwrap_pid, inside = session_tree(session)
                supervisor_pid = inside[0] if inside else 0
                supervisor = process_cpu_ms(supervisor_pid)
                others = sum(process_cpu_ms(p) for p in inside[1:])
                bwrap = process_cpu_ms(bwrap_pid)
            finally:
                session.close()
            # bwrap and the supervisor, exits included, + the rest as sampled before the close
            total = children_cpu_ms() - kids_before + others
            host = own_cpu_ms() - host_before
            if i < 2:  # the first two warm the page cache
                continue
            out.total.append(total)
            out.bwrap.append(bwrap)
            out.supervisor_ready.append(ready)
            out.supervisor_reads.append(supervisor - ready)
            out.file_server.append(others)
            out.teardown.append(total - bwrap - supervisor - others)
            out.host.append(host)
    return out


def lifecycle_from_a_big_process(megabytes: int, n: int) -> LifecycleCpu:
    """`lifecycle_cpu` while this process holds `megabytes` more of touched memory and a few
    hundred thousand more objects, as a worker does: without the launcher, opening a session forks the opener."""
    ballast = [bytearray(1024 * 1024) for _ in range(megabytes)]
    for block in ballast:
        for i in range(0, len(block), 4096):
            block[i] = 1
    objects = [{"n": i} for i in range(megabytes * 1000)]
    try:
        return lifecycle_cpu(n)
    finally:
        del ballast, objects


def slow_file_call_cpu(n: int) -> tuple[list[float], list[float]]:
    """A file call that takes tens of milliseconds (a grep without a match through 300 files of
    60 KB). Returns (the supervisor's CPU during each call, [each call's wall time]), in ms:
    what a supervisor spends waiting for its file server, which should be next to nothing."""
    from sandbox.tools.executors import execute_tool

    backend = make_backend("bwrap")
    supervisor_ms: list[float] = []
    wall_ms: list[float] = []
    with workspace() as ws:
        for i in range(300):
            (ws / f"f{i}.txt").write_text(f"lorem ipsum dolor sit amet {i}\n" * 2000)
        session = backend.open(SessionSpec(workspace=ws))
        try:
            for i in range(n + 1):
                _bwrap_pid, inside = session_tree(session)
                before = process_cpu_ms(inside[0])
                start = time.perf_counter()
                result = execute_tool(
                    session, "grep", {"pattern": "no-such-text-[0-9]+"}, network_enabled=False
                )
                elapsed = (time.perf_counter() - start) * 1000
                if not result.ok:
                    raise RuntimeError(f"grep failed in the sandbox: {result.output}")
                if i >= 1:  # the first one forks the file server
                    supervisor_ms.append(process_cpu_ms(inside[0]) - before)
                    wall_ms.append(elapsed)
        finally:
            session.close()
    return supervisor_ms, wall_ms


def idle_cpu(sessions: int, seconds: float) -> tuple[list[float], list[float]]:
    """Open `sessions` bwrap sessions with the egress bridge on, one read in each (so each
    holds a resident file server), then let them sit for `seconds`. Returns (per session: the
    CPU its sandbox processes used in that time, ms per second; [this process's CPU in that
    time, ms per second per session]: the host side, egress proxies and spawner thread)."""
    from sandbox.tools.executors import execute_tool

    backend = make_backend("bwrap")
    policy = NetworkPolicy(allowed_domains=("example.com",))
    with ExitStack() as stack:
        opened = []
        for _ in range(sessions):
            ws = stack.enter_context(workspace())
            (ws / "notes.txt").write_text("a small file\n")
            session = backend.open(SessionSpec(workspace=ws, network=policy))
            stack.callback(session.close)
            result = execute_tool(session, "read", {"path": "notes.txt"}, network_enabled=True)
            if not result.ok:
                raise RuntimeError(f"read failed in the sandbox: {result.output}")
            opened.append(session)
        time.sleep(0.5)  # let the last start-up settle
        trees = [tree_pids(s._proc.pid) for s in opened]  # noqa: SLF001
        before = [sum(process_cpu_ms(p) for p in tree) for tree in trees]
        host_before = own_cpu_ms()
        time.sleep(seconds)
        host = own_cpu_ms() - host_before
        after = [sum(process_cpu_ms(p) for p in tree) for tree in trees]
        alive = [tree_pids(s._proc.pid) for s in opened]  # noqa: SLF001
        if any(sorted(a) != sorted(t) for a, t in zip(alive, trees, strict=True)):
            raise RuntimeError("a session's processes changed while it was idle")
    per_session = [(a - b) / seconds for a, b in zip(after, before, strict=True)]
    return per_session, [host / seconds / sessions]


# ------------------------------------------------------------------------------ report


def cpu_rows(k: int, idle_sessions: int, idle_seconds: float, fat_mb: int) -> dict[str, Row]:
    rows: dict[str, Row] = {}
    python = ["/usr/bin/python3", "-I", "-S", "-c", "pass"]
    rows["cpu_python"] = measure(
        "plain subprocess `python3 -I -S -c pass`", lambda: baseline_cpu(python, 60 // k)
    )
    rows["cpu_raw_bwrap"] = measure(
        "raw `bwrap --unshare-all ... true`", lambda: baseline_cpu(raw_bwrap_argv(), 60 // k)
    )
    life: dict[str, LifecycleCpu] = {}

    def part(name: str) -> Callable[[], list[float]]:
        def body() -> list[float]:
            if not life:
                life["x"] = lifecycle_cpu(30 // k)
            return list(getattr(life["x"], name))

        return body

    for key, name in (
        ("total", "session lifecycle: open, 10 reads, close"),
        ("bwrap", "  of which bwrap (outside the namespaces)"),
        ("supervisor_ready", "  the supervisor until ready"),
        ("supervisor_reads", "  the supervisor during the 10 reads"),
        ("file_server", "  the file server"),
        ("teardown", "  the close (exits of bwrap and the supervisor)"),
        ("host", "the host side of it (this process)"),
    ):
        rows[f"cpu_{key}"] = measure(name, part(key))
        if life == {} and rows[f"cpu_{key}"].error:
            break
    fat: dict[str, LifecycleCpu] = {}

    def fat_part(name: str) -> list[float]:
        if not fat:
            fat["x"] = lifecycle_from_a_big_process(fat_mb, 10 // k or 3)
        return list(getattr(fat["x"], name))

    if fat_mb:
        rows["cpu_fat_total"] = measure(
            f"the lifecycle opened by a process of {fat_mb} MB more",
            lambda: fat_part("total"),
        )
        rows["cpu_fat_host"] = measure("  the host side of it", lambda: fat_part("host"))
    slow: dict[str, tuple[list[float], list[float]]] = {}

    def slow_part(which: int) -> list[float]:
        if not slow:
            slow["x"] = slow_file_call_cpu(20 // k)
        return slow["x"][which]

    rows["cpu_slow_call"] = measure(
        "the supervisor while a slow file call runs (grep)", lambda: slow_part(0)
    )
    rows["cpu_slow_call_wall"] = measure("  that call's wall time (not CPU)", lambda: slow_part(1))
    idle: dict[str, tuple[list[float], list[float]]] = {}

    def idle_part(which: int) -> list[float]:
        if not idle:
            idle["x"] = idle_cpu(idle_sessions, idle_seconds)
        return idle["x"][which]

    rows["cpu_idle"] = measure(
        f"idle session, per second ({idle_sessions} open for {idle_seconds:g} s, bridge on)",
        lambda: idle_part(0),
    )
    rows["cpu_idle_host"] = measure(
        "  the host side of it, per session and second", lambda: idle_part(1)
    )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--cpu-only", action="store_true", help="only the CPU measurements")
    parser.add_argument(
        "--pool-only", action="store_true", help="only the pool's rows and the warm calls"
    )
    parser.add_argument("--pool-spares", type=int, default=8, help="spares left idle")
    parser.add_argument("--idle-sessions", type=int, default=20, help="sessions left idle")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="how long they idle")
    parser.add_argument(
        "--fat-mb", type=int, default=300, help="memory of the big opener (0: skip that row)"
    )
    args = parser.parse_args()
    k = 4 if args.quick else 1
    print("bench/sandbox.py: measuring (this takes a minute or two)", file=sys.stderr)

    rows: dict[str, Row] = {}

    def add(key: str, name: str, body: Callable[[], list[float]]) -> None:
        rows[key] = measure(name, body)

    if args.pool_only:
        add("warm_bwrap", "warm bwrap session call of `true`", lambda: warm_call("bwrap", 200 // k))
        add(
            "warm_docker",
            "warm docker session call of `true`",
            lambda: warm_call("docker", 100 // k),
        )
        pool_rows(rows, k)
        pool_cpu = pool_cpu_rows(args.pool_spares, args.idle_seconds)
        print_pool(rows, pool_cpu)
        return 0

    if not args.cpu_only:
        add("plain", "plain subprocess exec of `true`", lambda: plain_exec(200 // k))
        add("raw_bwrap", "raw `bwrap --unshare-all ... true`", lambda: raw_bwrap(100 // k))
        add("warm_bwrap", "warm bwrap session call of `true`", lambda: warm_call("bwrap", 200 // k))
        add("read_bwrap", "warm bwrap read of a small file", lambda: warm_read("bwrap", 200 // k))
        add(
            "cold_bwrap",
            "cold bwrap session + first call (egress bridge on)",
            lambda: cold_network_session(30 // k),
        )
        add("docker_run", f"`docker run --rm {IMAGE} true`", lambda: docker_run(10 // k or 3))
        add(
            "warm_docker",
            "warm docker session call of `true`",
            lambda: warm_call("docker", 100 // k),
        )
        add(
            "read_docker", "warm docker read of a small file", lambda: warm_read("docker", 100 // k)
        )
        tls: dict[str, list[float]] = {}

        def tls_body(which: int) -> list[float]:
            if not tls:
                proxied, direct = tls_pair(100 // k)
                tls["proxied"], tls["direct"] = proxied, direct
            return tls["proxied"] if which == 0 else tls["direct"]

        add("tls_proxied", "new TLS connection through our proxy", lambda: tls_body(0))
        add("tls_direct", "new TLS connection direct", lambda: tls_body(1))
        if not tls and rows["tls_proxied"].error:
            rows["tls_direct"].error = rows["tls_proxied"].error
        pool_rows(rows, k)

    cpu = cpu_rows(k, args.idle_sessions, args.idle_seconds, args.fat_mb)
    pool_cpu = pool_cpu_rows(args.pool_spares, args.idle_seconds)

    if rows:
        print_rows(rows)
        print_ratios(
            rows,
            [
                ("warm bwrap call / plain exec", "warm_bwrap", "plain", "<=", 1.5),
                ("warm bwrap read / warm bwrap `true` call", "read_bwrap", "warm_bwrap", "<=", 1.5),
                (
                    "warm docker read / warm docker `true` call",
                    "read_docker",
                    "warm_docker",
                    "<=",
                    1.5,
                ),
                ("cold bwrap session / raw bwrap", "cold_bwrap", "raw_bwrap", "<=", 2.0),
                ("docker run / cold bwrap session", "docker_run", "cold_bwrap", ">=", 30.0),
                ("proxied / direct TLS connection", "tls_proxied", "tls_direct", "<=", 1.6),
            ],
        )
    print_pool(rows, pool_cpu)
    print_rows(cpu, "CPU (user + system) of the sandbox processes")
    print_ratios(
        cpu,
        [
            ("lifecycle / plain `python3 -I -S -c pass`", "cpu_total", "cpu_python", "", None),
            ("lifecycle / raw bwrap", "cpu_total", "cpu_raw_bwrap", "", None),
            (
                "lifecycle opened by a big process / by this one",
                "cpu_fat_total",
                "cpu_total",
                "",
                None,
            ),
            (
                "supervisor during a slow file call / its wall time",
                "cpu_slow_call",
                "cpu_slow_call_wall",
                "<=",
                0.05,
            ),
            (
                "idle session for 1 s / `python3 -I -S -c pass`",
                "cpu_idle",
                "cpu_python",
                "<=",
                0.01,
            ),
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
