"""Testing an MCP skill's server before it may be deployed: the MCP handshake and its pytest file,
each in a throwaway sandbox with the production limits and the manifest's proposed egress."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge import sandboxing
from runs.credentials import redact
from sandbox.mcp import McpClient, McpError, McpTimeout, SandboxedProcess
from sandbox.session import open_session
from sandbox.types import ConnectionReport, ExecRequest, SandboxError
from skills.bundle import Bundle, McpManifest
from skills.bundle.manifest import TEST_SCRIPT

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
    files: Mapping[str, bytes] | Bundle | Path,
    manifest: McpManifest,
    *,
    credentials: Mapping[str, str] | None = None,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> ProbeResult:
    """Spawn the server of `files` in an ephemeral sandbox (production limits, egress to the
    manifest's proposed domains only), ``initialize`` + ``tools/list`` it from the host with the
    ``mcp`` SDK client, stop it. Never raises for a bad server: the failure is the result's
    `error` (a server that does not answer is killed at `timeout_s`, the whole probe's limit).
    `credentials` maps the server's environment variables to values; they are redacted from
    everything returned."""
    secrets = _secrets(manifest, credentials)
    started = time.monotonic()
    reports: list[dict[str, Any]] = []
    files_dir = sandboxing.write_files(files)
    process: SandboxedProcess | None = None
    client: McpClient | None = None
    tools: tuple[ToolSpec, ...] = ()
    error: str | None = None
    try:
        spec = sandboxing.process_spec(
            files_dir=files_dir,
            manifest=manifest,
            allowed_domains=manifest.allowed_domains,
            limits=sandboxing.limits_for(manifest.sandbox.to_dict()),
            credentials=credentials or {},
            on_connection=lambda report: reports.append(_report(report)),
        )
        process = SandboxedProcess(
            spec,
            backend=sandboxing.backend_name(),
            workspace_root=files_dir.parent,
        )
        process.start()
        client = McpClient(process)
        client.connect(max(0.1, timeout_s - (time.monotonic() - started)))
        listed = client.list_tools(max(0.1, timeout_s - (time.monotonic() - started)))
        tools = tuple(ToolSpec(t.name, t.description, t.input_schema) for t in listed)
        error = schema_problem(tools)
    except SandboxError as exc:
        error = f"the sandbox could not start: {exc}"
    except McpTimeout as exc:
        where = "initialize" if "initialize" in str(exc) else "tools/list"
        error = f"the server did not answer {where} within the probe's limit of {timeout_s:g} s"
    except McpError as exc:
        error = str(exc)
    finally:
        if client is not None:
            client.close()
        if process is not None:
            process.close()
        sandboxing.remove_files(files_dir)
    stderr = process.stderr_tail() if process is not None else ""
    if error is not None:
        tools = ()
    return ProbeResult(
        tools=tools,
        stderr_tail=redact(stderr, secrets),
        error=redact(error, secrets) if error is not None else None,
        duration_ms=int((time.monotonic() - started) * 1000),
        connections=tuple(reports),
    )


def schema_problem(tools: tuple[ToolSpec, ...]) -> str | None:
    """Why a server's tool list cannot be offered to a model (a bad name, a duplicate, an input
    schema that is not a valid JSON Schema object), or None."""
    import jsonschema

    seen: set[str] = set()
    for tool in tools:
        if not _TOOL_NAME.match(tool.name):
            return f"tool name {tool.name!r} is not usable (letters, digits, '_' and '-', 1-64)"
        if tool.name in seen:
            return f"tool {tool.name!r} is listed twice"
        seen.add(tool.name)
        schema = tool.input_schema
        if not isinstance(schema, dict) or schema.get("type") != "object":
            return f"tool {tool.name!r}: its input schema must be a JSON Schema of type object"
        validator = jsonschema.validators.validator_for(schema)
        try:
            validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            return f"tool {tool.name!r}: its input schema is not valid JSON Schema: {exc.message}"
    return None


def run_server_tests(
    files: Mapping[str, bytes] | Bundle | Path,
    manifest: McpManifest,
    *,
    credentials: Mapping[str, str] | None = None,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> TestRun:
    """Run ``python -m pytest scripts/test_server.py`` in an ephemeral sandbox (the server's
    limits and proposed egress) under a hard limit of `timeout_s` seconds, sandbox start
    included; its output has every credential value replaced by its placeholder."""
    secrets = _secrets(manifest, credentials)
    started = time.monotonic()
    files_dir = sandboxing.write_files(files)
    try:
        spec = sandboxing.process_spec(
            files_dir=files_dir,
            manifest=manifest,
            allowed_domains=manifest.allowed_domains,
            limits=sandboxing.limits_for(manifest.sandbox.to_dict()),
            credentials=credentials or {},
        )
        workspace = files_dir.parent / f"{files_dir.name}-ws"
        workspace.mkdir(mode=0o700)
        session_spec = dataclasses.replace(spec.session, workspace=workspace, allow_unix_pairs=True)
        try:
            session = open_session(session_spec, sandboxing.backend_name())
        except SandboxError as exc:
            return TestRun(False, None, f"the sandbox could not start: {exc}")
        try:
            remaining = max(1.0, timeout_s - (time.monotonic() - started))
            result = session.exec(
                ExecRequest(
                    argv=[
                        spec.argv[0],
                        "-m",
                        "pytest",
                        "-q",
                        "--tb=short",
                        "-p",
                        "no:cacheprovider",
                        f"{sandboxing.SKILL_DIR}/{TEST_SCRIPT}",
                    ],
                    timeout_s=remaining,
                    env=spec.env,
                    cwd=sandboxing.SKILL_DIR,
                )
            )
        except SandboxError as exc:
            return TestRun(False, None, f"the sandbox failed: {exc}")
        finally:
            session.close()
            sandboxing.remove_files(workspace)
    finally:
        sandboxing.remove_files(files_dir)
    output = (result.stdout + result.stderr).decode("utf-8", "replace")
    if result.timed_out:
        output += f"\n[killed at the {timeout_s:g} s limit]"
    return TestRun(
        passed=result.exit_code == 0 and not result.timed_out,
        exit_code=result.exit_code,
        output=redact(output, secrets),
        timed_out=result.timed_out,
        duration_ms=int((time.monotonic() - started) * 1000),
    )


_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}\Z")


def _secrets(manifest: McpManifest, credentials: Mapping[str, str] | None) -> dict[str, str]:
    """{vault name: value} for redaction (the placeholder names the vault entry)."""
    values = dict(credentials or {})
    return {manifest.auth.get(env, env): value for env, value in values.items() if value}


def _report(report: ConnectionReport) -> dict[str, Any]:
    return {
        "host": report.host,
        "port": report.port,
        "verdict": report.verdict,
        "reason": report.reason,
    }
