"""Deployed MCP servers: warm call, cold start and idle cost, against the same FastMCP server run
over stdio without a sandbox, measured in the same run.

Run by hand (root, bwrap, the skill runtime built by sandbox/image/runtime.sh):

    uv run python -m bench.mcp                 # default sample counts, 50 idle servers
    uv run python -m bench.mcp --quick         # fewer samples, 10 idle servers

The sandboxed side is what a worker runs for a deployed skill (forge.runtime): a bwrap session
of its own with the run sessions' limits, the skill's files and the runtime bound read-only,
the server's stdio through two FIFOs, the mcp SDK's ClientSession on the host (sandbox.mcp).
The baseline is the mcp SDK's own stdio client spawning the same server with the same
interpreter, no sandbox. Targets (issue 17): warm call <= 1.5x, cold start <= 2x, idle CPU ~0.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

from sandbox.mcp import McpClient, ProcessSpec, SandboxedProcess  # noqa: E402
from sandbox.types import Limits, SessionSpec  # noqa: E402

WORKSPACE_BYTES = int(os.environ.get("BENCH_WORKSPACE_BYTES", str(1024 * 1024)))
RUNTIME = Path(os.environ.get("MOTOR_SKILL_RUNTIME", "/opt/motor-cortex-runtime"))
SERVER = '''\
from mcp.server.fastmcp import FastMCP

mcp = FastMCP("bench")


@mcp.tool()
def echo(text: str) -> dict:
    """Repeat a text."""
    return {"echo": text}


if __name__ == "__main__":
    mcp.run(transport="stdio")
'''


def stats(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return statistics.median(ordered), p95


# ---------------------------------------------------------------------------- baseline


class Plain:
    """The server over the SDK's stdio client, no sandbox, driven from one event loop."""

    def __init__(self, script: Path) -> None:
        self.script = script

    async def cold(self) -> float:
        started = time.perf_counter()
        params = StdioServerParameters(
            command=str(RUNTIME / "bin/python3"), args=[str(self.script)]
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await session.list_tools()
            return time.perf_counter() - started

    async def warm(self, calls: int) -> list[float]:
        params = StdioServerParameters(
            command=str(RUNTIME / "bin/python3"), args=[str(self.script)]
        )
        samples = []
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await session.call_tool("echo", {"text": "warm-up"})
            for i in range(calls):
                started = time.perf_counter()
                await session.call_tool("echo", {"text": f"call {i}"})
                samples.append(time.perf_counter() - started)
        return samples


# ---------------------------------------------------------------------------- sandboxed


def sandboxed_spec(files_dir: Path) -> ProcessSpec:
    """What forge.sandboxing builds for a deployed server without network."""
    return ProcessSpec(
        argv=[f"{RUNTIME}/bin/python3", "/skill/scripts/server.py"],
        session=SessionSpec(
            workspace=Path("/nonexistent"),
            limits=Limits(
                workspace_bytes=WORKSPACE_BYTES,
                cpu_seconds=3600,
                idle_timeout_s=1e9,
                quota_interval_s=1.0,
            ),
            readonly_mounts=((files_dir, "/skill"), (RUNTIME, str(RUNTIME))),
        ),
        env={
            "PATH": f"{RUNTIME}/bin:/usr/bin:/bin",
            "HOME": "/tmp",
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        },
        cwd="/skill",
    )


def start_sandboxed(files_dir: Path, root: Path) -> tuple[SandboxedProcess, McpClient]:
    process = SandboxedProcess(sandboxed_spec(files_dir), backend="bwrap", workspace_root=root)
    process.start()
    client = McpClient(process)
    client.connect(60)
    return process, client


def sandboxed_cold(files_dir: Path, root: Path) -> float:
    started = time.perf_counter()
    process, client = start_sandboxed(files_dir, root)
    try:
        client.list_tools(30)
        return time.perf_counter() - started
    finally:
        client.close()
        process.close()


def sandboxed_warm(files_dir: Path, root: Path, calls: int) -> list[float]:
    process, client = start_sandboxed(files_dir, root)
    try:
        client.call_tool("echo", {"text": "warm-up"}, 30)
        samples = []
        for i in range(calls):
            started = time.perf_counter()
            client.call_tool("echo", {"text": f"call {i}"}, 30)
            samples.append(time.perf_counter() - started)
        return samples
    finally:
        client.close()
        process.close()


def _tree(pid: int) -> list[int]:
    out = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            out.extend(_tree(int(child)))
    return out


def _cpu_and_rss(pids: list[int]) -> tuple[float, int]:
    tick = os.sysconf("SC_CLK_TCK")
    cpu, rss = 0.0, 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cpu += (int(fields[11]) + int(fields[12])) / tick
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1]) * 1024
        except (OSError, IndexError, ValueError):
            continue
    return cpu, rss


def idle(files_dir: Path, root: Path, servers: int, seconds: float) -> dict[str, float]:
    started: list[tuple[SandboxedProcess, McpClient]] = []
    try:
        for _ in range(servers):
            started.append(start_sandboxed(files_dir, root))
        for _process, client in started:
            client.call_tool("echo", {"text": "once"}, 30)

        def pids() -> list[int]:
            out: list[int] = []
            for process, _client in started:
                assert process.session is not None
                out.extend(_tree(process.session.inner._proc.pid))  # type: ignore[attr-defined]
            return out

        cpu_before, _ = _cpu_and_rss(pids())
        host_before = time.process_time()
        time.sleep(seconds)
        cpu_after, rss = _cpu_and_rss(pids())
        host_after = time.process_time()
        return {
            "servers": servers,
            "seconds": seconds,
            "sandbox_cpu_per_server_second": (cpu_after - cpu_before) / (servers * seconds),
            "host_cpu_per_server_second": (host_after - host_before) / (servers * seconds),
            "rss_per_server_mb": rss / servers / 1e6,
        }
    finally:
        for process, client in started:
            client.close()
            process.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--idle-servers", type=int, default=None)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    args = parser.parse_args(argv)
    cold_n, warm_n = (5, 100) if args.quick else (15, 500)
    idle_n = args.idle_servers or (10 if args.quick else 50)
    if not (RUNTIME / "bin/python3").exists():
        print(f"n/a: no skill runtime at {RUNTIME} (run sandbox/image/runtime.sh)")
        return 1
    with tempfile.TemporaryDirectory(prefix="bench-mcp-") as tmp:
        root = Path(tmp)
        os.chmod(root, 0o711)  # noqa: S103 - the sandbox uid traverses to its mounts
        files_dir = root / "skill"
        (files_dir / "scripts").mkdir(parents=True)
        (files_dir / "scripts/server.py").write_text(SERVER)
        for path in (files_dir, files_dir / "scripts"):
            path.chmod(0o755)  # noqa: S103 - read by the sandbox uid
        (files_dir / "scripts/server.py").chmod(0o644)
        plain = Plain(files_dir / "scripts/server.py")

        rows: list[tuple[str, list[float]]] = []

        def measure(name: str, fn: Callable[[], Any]) -> None:
            value = fn()
            rows.append((name, value if isinstance(value, list) else [value]))

        measure("cold, plain stdio", lambda: [asyncio.run(plain.cold()) for _ in range(cold_n)])
        measure("cold, sandboxed", lambda: [sandboxed_cold(files_dir, root) for _ in range(cold_n)])
        measure("warm call, plain stdio", lambda: asyncio.run(plain.warm(warm_n)))
        measure("warm call, sandboxed", lambda: sandboxed_warm(files_dir, root, warm_n))
        print(f"load average before idle part: {os.getloadavg()}")
        print(f"{'measurement':28} {'n':>5} {'median ms':>10} {'p95 ms':>10}")
        medians: dict[str, float] = {}
        for name, samples in rows:
            median, p95 = stats(samples)
            medians[name] = median
            print(f"{name:28} {len(samples):5d} {median * 1000:10.2f} {p95 * 1000:10.2f}")
        warm = medians["warm call, sandboxed"] / medians["warm call, plain stdio"]
        cold = medians["cold, sandboxed"] / medians["cold, plain stdio"]
        print(
            f"warm call ratio {warm:.2f}x (target <= 1.5x: {'met' if warm <= 1.5 else 'NOT met'})"
        )
        print(f"cold start ratio {cold:.2f}x (target <= 2x: {'met' if cold <= 2 else 'NOT met'})")
        result = idle(files_dir, root, idle_n, args.idle_seconds)
        print(
            f"idle: {result['servers']:.0f} servers for {result['seconds']:.0f} s: "
            f"sandbox CPU {result['sandbox_cpu_per_server_second'] * 1000:.3f} ms per server-second, "
            f"host CPU {result['host_cpu_per_server_second'] * 1000:.3f} ms per server-second, "
            f"RSS {result['rss_per_server_mb']:.1f} MB per server"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
