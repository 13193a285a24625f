"""Testing an MCP skill's server before it may be deployed: the MCP handshake and its pytest file,
each in a throwaway sandbox with the production limits and the manifest's proposed egress."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from skills.bundle import Bundle, McpManifest

#: the whole probe's hard limit, sandbox start included (seconds)
PROBE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ToolSpec:
    """One tool a server offers (from ``tools/list``)."""

    name: str
    description: str
    input_schema: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }


@dataclass(frozen=True)
class ProbeResult:
    """What a probe found: the tools (empty on failure), the tail of the server's stderr (with
    every credential value replaced by its placeholder) and the reason it failed, if it did."""

    tools: tuple[ToolSpec, ...] = ()
    stderr_tail: str = ""
    error: str | None = None
    duration_ms: int = 0
    connections: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class TestRun:
    """One run of ``pytest scripts/test_server.py``: passed, its exit code, its combined output
    (credential values replaced) and whether the hard limit ended it."""

    passed: bool
    exit_code: int | None
    output: str
    timed_out: bool = False
    duration_ms: int = 0


def probe_server(
    files: Mapping[str, bytes] | Bundle,
    manifest: McpManifest,
    *,
    credentials: Mapping[str, str] | None = None,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> ProbeResult:
    """Spawn the server of `files` in an ephemeral sandbox, ``initialize`` + ``tools/list`` it,
    stop it. Never raises for a bad server: the failure is the result's `error`."""
    raise NotImplementedError


def run_server_tests(
    files: Mapping[str, bytes] | Bundle,
    manifest: McpManifest,
    *,
    credentials: Mapping[str, str] | None = None,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> TestRun:
    """Run ``python -m pytest scripts/test_server.py`` in an ephemeral sandbox under a hard
    limit of `timeout_s` seconds."""
    raise NotImplementedError
