"""Sandbox start-up and call costs, measured against baselines from the same run.

Run by hand (root, on a machine with bwrap, a Docker engine and the sandbox image):

    uv run python -m bench.sandbox            # default sample counts
    uv run python -m bench.sandbox --quick    # fewer samples

Prints the median and p95 of each measurement, then the ratios the design targets. A part that
cannot run here (no bwrap, no engine, no image, not root for the TLS upstream) is reported as
"n/a" with the reason; the rest still runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sandbox.types import ExecRequest, NetworkPolicy, SessionSpec  # noqa: E402

IMAGE = os.environ.get("SANDBOX_DOCKER_IMAGE", "motor-cortex-sandbox:local")
# the same binary by the same absolute path everywhere (/usr is shared with the sandboxes and
# the image is Debian too), so a warm call and the plain exec run exactly the same `true` and
# neither pays a PATH search the other does not
TRUE = ["/usr/bin/true"]


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


# ------------------------------------------------------------------------------ report


def fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:9.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    args = parser.parse_args()
    k = 4 if args.quick else 1
    print("bench/sandbox.py: measuring (this takes a minute or two)", file=sys.stderr)

    rows: dict[str, Row] = {}

    def add(key: str, name: str, body: Callable[[], list[float]]) -> None:
        rows[key] = measure(name, body)

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
    add("warm_docker", "warm docker session call of `true`", lambda: warm_call("docker", 100 // k))
    add("read_docker", "warm docker read of a small file", lambda: warm_read("docker", 100 // k))
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

    width = max(len(r.name) for r in rows.values())
    print()
    print(f"{'measurement':<{width}}  {'n':>4}  {'median ms':>9}  {'p95 ms':>9}")
    print(f"{'-' * width}  {'-' * 4}  {'-' * 9}  {'-' * 9}")
    for row in rows.values():
        if row.error:
            print(f"{row.name:<{width}}  {'':>4}  n/a ({row.error})")
        else:
            print(f"{row.name:<{width}}  {len(row.samples):>4}  {fmt(row.median)}  {fmt(row.p95)}")

    ratios = [
        ("warm bwrap call / plain exec", "warm_bwrap", "plain", "<=", 1.5),
        ("warm bwrap read / warm bwrap `true` call", "read_bwrap", "warm_bwrap", "<=", 1.5),
        ("warm docker read / warm docker `true` call", "read_docker", "warm_docker", "<=", 1.5),
        ("cold bwrap session / raw bwrap", "cold_bwrap", "raw_bwrap", "<=", 2.0),
        ("docker run / cold bwrap session", "docker_run", "cold_bwrap", ">=", 30.0),
        ("proxied / direct TLS connection", "tls_proxied", "tls_direct", "<=", 1.6),
    ]
    print()
    rwidth = max(len(r[0]) for r in ratios)
    print(f"{'ratio (medians)':<{rwidth}}  {'value':>7}  {'target':>7}  verdict")
    print(f"{'-' * rwidth}  {'-' * 7}  {'-' * 7}  {'-' * 7}")
    for label, top, bottom, op, target in ratios:
        a, b = rows[top].median, rows[bottom].median
        if a is None or b is None or b == 0:
            missing = rows[top].name if a is None else rows[bottom].name
            print(f"{label:<{rwidth}}  {'n/a':>7}  {op}{target:<5}  n/a (missing: {missing})")
            continue
        value = a / b
        met = value <= target if op == "<=" else value >= target
        print(f"{label:<{rwidth}}  {value:7.2f}  {op}{target:<5}  {'met' if met else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
