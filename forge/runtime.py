"""The deployed servers this worker process runs: started on first use, warm while used, stopped
when idle, superseded, disabled or removed; restarted with backoff when they crash.

Nothing here is the truth: the database is (forge.models). A process keeps a `LiveServer` per
DeployedServer row it has called, keyed by the row's id; a row that is no longer deployed gets
no new call, and its server is stopped once its calls in flight are done (the drain of a hot
reload). A worker restart loses these processes and nothing else: the next call starts the
server again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from forge import sandboxing
from sandbox.mcp import CallOutcome, McpClient, McpError, SandboxedProcess
from sandbox.types import ConnectionReport, SandboxError
from skills.bundle import McpManifest

logger = logging.getLogger(__name__)

#: how often the reaper looks for idle or stale servers (seconds)
REAP_INTERVAL_S = 5.0


@dataclass
class ServerPlan:
    """Everything needed to (re)start one deployed row's server, read from the database by the
    caller: files, manifest, the approved domains and limits, resolved credential values."""

    server_id: int
    files: Mapping[str, bytes]
    manifest: McpManifest
    allowed_domains: tuple[str, ...]
    limits: Mapping[str, Any]
    credentials: Mapping[str, str] = field(repr=False, default_factory=dict)


class ServerFailed(Exception):
    """The server could not be started or died; `stderr_tail` is what it said (unredacted: the
    caller redacts before anything is stored)."""

    def __init__(self, message: str, stderr_tail: str = "") -> None:
        super().__init__(message)
        self.stderr_tail = stderr_tail


class LiveServer:
    """One running server: its sandboxed process and the MCP connection to it."""

    def __init__(self, plan: ServerPlan) -> None:
        self.plan = plan
        self.denied: list[str] = []
        self._lock = threading.Lock()
        self.in_flight = 0
        self.last_used = time.monotonic()
        self._files_dir = sandboxing.write_files(plan.files)
        spec = sandboxing.process_spec(
            files_dir=self._files_dir,
            manifest=plan.manifest,
            allowed_domains=plan.allowed_domains,
            limits=sandboxing.limits_for(plan.limits),
            credentials=plan.credentials,
            on_connection=self._connection,
        )
        self.process = SandboxedProcess(
            spec, backend=sandboxing.backend_name(), workspace_root=self._files_dir.parent
        )
        self.client: McpClient | None = None

    def _connection(self, report: ConnectionReport) -> None:
        if report.verdict == "denied":
            with self._lock:
                self.denied.append(f"{report.host}:{report.port} ({report.reason})")

    def take_denied(self) -> list[str]:
        """The egress attempts the proxy refused since the last call of this."""
        with self._lock:
            denied, self.denied = self.denied, []
        return denied

    def start(self, timeout_s: float) -> None:
        """Start the process and do the handshake; ServerFailed when either fails."""
        try:
            self.process.start()
            self.client = McpClient(self.process)
            self.client.connect(timeout_s)
        except (SandboxError, McpError) as exc:
            tail = self._stop_for_tail()
            raise ServerFailed(f"the server did not start: {exc}", tail) from exc

    def _stop_for_tail(self) -> str:
        self.close()
        return self.process.stderr_tail()

    @property
    def alive(self) -> bool:
        return self.client is not None and self.process.alive

    def call(self, tool: str, arguments: dict[str, Any], timeout_s: float) -> CallOutcome:
        assert self.client is not None
        with self._lock:
            self.in_flight += 1
            self.last_used = time.monotonic()
        try:
            return self.client.call_tool(tool, arguments, timeout_s)
        finally:
            with self._lock:
                self.in_flight -= 1
                self.last_used = time.monotonic()

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        self.process.close()
        sandboxing.remove_files(self._files_dir)


class ServerPool:
    """This process's live servers (thread-safe). `call` starts a server when needed; the
    reaper thread stops idle ones and those `is_current` says are no longer deployed."""

    def __init__(self) -> None:
        self._servers: dict[int, LiveServer] = {}
        self._starting: dict[int, threading.Lock] = {}
        self._lock = threading.Lock()
        self._reaper: threading.Thread | None = None
        self.is_current: Callable[[set[int]], set[int]] | None = None

    def __len__(self) -> int:
        with self._lock:
            return len(self._servers)

    def get(self, server_id: int) -> LiveServer | None:
        with self._lock:
            return self._servers.get(server_id)

    def ensure(self, plan_of: Callable[[], ServerPlan], server_id: int) -> LiveServer:
        """The live server of `server_id`, started now (from `plan_of()`) when there is none or
        it died. One start at a time per server in this process."""
        with self._lock:
            live = self._servers.get(server_id)
            if live is not None and live.alive:
                return live
            gate = self._starting.setdefault(server_id, threading.Lock())
        with gate:
            with self._lock:
                live = self._servers.get(server_id)
                if live is not None and live.alive:
                    return live
                if live is not None:
                    self._servers.pop(server_id, None)
            if live is not None:
                live.close()
            live = LiveServer(plan_of())
            try:
                live.start(timeout_s=float(getattr(settings, "FORGE_START_TIMEOUT_SECONDS", 30)))
            except ServerFailed:
                raise
            with self._lock:
                self._servers[server_id] = live
                self._ensure_reaper()
            return live

    def stop(self, server_id: int) -> None:
        """Stop `server_id`'s server now (its calls in flight fail)."""
        with self._lock:
            live = self._servers.pop(server_id, None)
        if live is not None:
            live.close()

    def stop_all(self) -> None:
        with self._lock:
            servers = list(self._servers.values())
            self._servers.clear()
        for live in servers:
            live.close()

    def reap(self, now: float | None = None) -> list[int]:
        """Stop every server idle longer than the idle timeout, dead, or no longer current
        (once its calls in flight are done). Returns their ids."""
        now = time.monotonic() if now is None else now
        idle_s = float(getattr(settings, "FORGE_SERVER_IDLE_TIMEOUT_SECONDS", 600))
        with self._lock:
            snapshot = dict(self._servers)
        current = self.is_current(set(snapshot)) if self.is_current and snapshot else set(snapshot)
        stopped: list[int] = []
        for server_id, live in snapshot.items():
            stale = server_id not in current
            idle = live.in_flight == 0 and now - live.last_used > idle_s
            if (stale and live.in_flight == 0) or idle or not live.alive:
                with self._lock:
                    if self._servers.get(server_id) is live:
                        del self._servers[server_id]
                live.close()
                stopped.append(server_id)
        return stopped

    def _ensure_reaper(self) -> None:
        if self._reaper is None or not self._reaper.is_alive():
            self._reaper = threading.Thread(
                target=self._reap_loop, name="forge-reaper", daemon=True
            )
            self._reaper.start()

    def _reap_loop(self) -> None:
        while True:
            time.sleep(REAP_INTERVAL_S)
            try:
                self.reap()
            except Exception:  # noqa: BLE001 - the reaper must survive anything
                logger.exception("forge server reaper failed")
            with self._lock:
                if not self._servers:
                    self._reaper = None
                    return


#: the process-wide pool
pool = ServerPool()


__all__ = ["LiveServer", "ServerFailed", "ServerPlan", "ServerPool", "pool"]
