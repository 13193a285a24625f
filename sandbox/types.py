"""Typed contracts shared by every sandbox backend, the egress proxy and the tool executors.

This package is a plain library: it never imports Django, Celery, DRF or the project's apps.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol


class ErrorCode(enum.StrEnum):
    """Machine-readable reason a tool call did not succeed."""

    TIMEOUT = "timeout"
    DENIED = "denied"  # refused by a rule (allowlist, path confinement, seccomp, ...)
    NETWORK_BLOCKED = "network_blocked"  # the egress proxy refused the destination
    NOT_FOUND = "not_found"
    INVALID_ARGS = "invalid_args"
    EXIT_NONZERO = "exit_nonzero"
    OUTPUT_TRUNCATED = "output_truncated"
    OOM = "oom"
    SANDBOX_ERROR = "sandbox_error"  # the sandbox could not be set up or broke down
    TOO_LARGE = "too_large"  # a file or request exceeded a size cap
    HTTP_ERROR = "http_error"  # fetch got a 4xx/5xx answer
    CONFLICT = "conflict"  # edit: the text to replace is missing or ambiguous


Provenance = Literal["user", "web", "internal"]

#: error codes worth retrying as-is (transient conditions)
RETRYABLE_CODES = frozenset({ErrorCode.TIMEOUT, ErrorCode.SANDBOX_ERROR, ErrorCode.HTTP_ERROR})


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The result envelope of ARCHITECTURE.md, plus process facts.

    `output` is what the LLM sees; it never contains a credential value (they are replaced by
    `<credential:NAME>` before a result leaves this library).
    """

    ok: bool
    output: str
    error_code: ErrorCode | None = None
    retryable: bool = False
    provenance: Provenance = "internal"
    duration_ms: int = 0
    cost: float = 0.0
    exit_code: int | None = None
    timed_out: bool = False
    truncated: bool = False

    def to_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "output": self.output,
            "error_code": self.error_code.value if self.error_code else None,
            "retryable": self.retryable,
            "provenance": self.provenance,
            "duration_ms": self.duration_ms,
            "cost": self.cost,
            "exit_code": self.exit_code,
            "timed_out": self.timed_out,
            "truncated": self.truncated,
        }


@dataclass(frozen=True, slots=True)
class Limits:
    """Resource limits of one session. Units are in the field names."""

    memory_bytes: int = 512 * 1024 * 1024
    max_processes: int = 64
    output_bytes: int = 32 * 1024
    file_size_bytes: int = 64 * 1024 * 1024
    workspace_bytes: int = 256 * 1024 * 1024
    tmp_bytes: int = 64 * 1024 * 1024
    open_files: int = 256
    cpu_seconds: int = 600
    default_timeout_s: float = 60.0
    idle_timeout_s: float = 900.0
    #: seconds between two measurements of the workspace during a command (quota); a
    #: long-lived server whose workspace holds only its FIFOs is measured less often
    quota_interval_s: float = 0.05


@dataclass(frozen=True, slots=True)
class NetworkPolicy:
    """Where a session may connect through the egress proxy.

    `allowed_domains` holds exact host names, `*.domain` (strict subdomains only) and IP literals
    (matched only when listed literally). An empty list means no network at all.
    """

    allowed_domains: tuple[str, ...] = ()
    allowed_ports: tuple[int, ...] = (443, 80)
    max_tunnels: int = 32
    max_total_bytes: int = 256 * 1024 * 1024
    connect_timeout_s: float = 10.0
    idle_timeout_s: float = 60.0

    @property
    def enabled(self) -> bool:
        return bool(self.allowed_domains)


@dataclass(frozen=True, slots=True)
class ConnectionReport:
    """One connection attempt seen by the egress proxy. No bodies, no headers."""

    session_id: str
    host: str
    port: int
    resolved_ip: str | None
    verdict: Literal["allowed", "denied"]
    reason: str
    bytes_up: int
    bytes_down: int
    duration_ms: int


ConnectionCallback = Callable[[ConnectionReport], None]


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """Everything a backend needs to open a session. Nothing is inherited from the host process:
    the sandbox environment is built from `environment` alone."""

    workspace: Path
    network: NetworkPolicy = field(default_factory=NetworkPolicy)
    limits: Limits = field(default_factory=Limits)
    environment: Mapping[str, str] = field(default_factory=dict)
    readonly_mounts: Sequence[tuple[Path, str]] = ()  # (host path, path inside)
    session_id: str = ""
    on_connection: ConnectionCallback | None = None
    #: commands may create socketpair(AF_UNIX) — what an asyncio program (an MCP server) needs;
    #: socket(AF_UNIX) stays refused (sandbox/inside/seccomp.py)
    allow_unix_pairs: bool = False


@dataclass(frozen=True, slots=True)
class ExecRequest:
    """A raw command to run inside a session."""

    argv: Sequence[str]
    stdin: bytes = b""
    timeout_s: float | None = None
    env: Mapping[str, str] = field(default_factory=dict)  # per-call extras (credentials)
    cwd: str = "/workspace"
    output_limit: int | None = None
    #: a helper living across calls (the supervisor's "resident", e.g. "browser"): `stdin` is its
    #: request and the result's stdout its answer; None for a command
    resident: str | None = None
    #: stop that resident (and every process it started) instead of calling it
    resident_stop: bool = False


@dataclass(frozen=True, slots=True)
class ExecResult:
    """What a raw command did."""

    exit_code: int | None
    stdout: bytes
    stderr: bytes
    duration_ms: int
    timed_out: bool = False
    truncated: bool = False
    oom: bool = False
    signal: int | None = None
    workspace_exceeded: bool = False  # the call pushed the workspace over Limits.workspace_bytes


class Session(Protocol):
    """One resident sandbox for one run."""

    id: str
    backend: str

    def exec(self, request: ExecRequest) -> ExecResult: ...

    def close(self) -> None: ...

    @property
    def closed(self) -> bool: ...


class Backend(Protocol):
    name: str

    def open(self, spec: SessionSpec) -> Session: ...


class SandboxError(Exception):
    """A sandbox could not be set up or broke down. Never fall back to running unsandboxed."""
