"""Deployed MCP tools as a tool kind of the call pipeline: one manifest per tool, named
`<skill>__<tool>`, and one executor for all of them.

`tools_sync` makes this process's registry match the database's deployed tools (runs calls it
through `runs.tools.tool_sources_refresh` whenever a tool name it does not know comes up; forge
after every change it commits). The executor checks the database again at every call: a call
never reaches a server whose row is not deployed, nor one whose content no approved policy of
the run's agent is bound to, however stale a process's registry is.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.conf import settings

from forge.models import DeployedServer, McpTool, Semantics, ServerStatus
from forge.runtime import ServerFailed, pool
from runs.db import release_db_connection
from runs.pipeline import (
    CallContext,
    Executor,
    ToolManifest,
    tool_kind_register,
    tool_kind_unregister,
)
from runs.pipeline.executors import Outcome
from runs.tools import envelope
from sandbox.mcp import McpError, McpTimeout
from skills.models import Policy, PolicyStatus

logger = logging.getLogger(__name__)

_lock = threading.Lock()
#: qualified names this process registered
_registered: dict[str, ToolManifest] = {}


def tool_manifest_of(tool: McpTool) -> ToolManifest:
    schema = dict(tool.input_schema or {"type": "object", "properties": {}})
    description = (
        tool.description or f"{tool.name} (MCP skill {tool.qualified_name.split('__')[0]})"
    )
    return ToolManifest(
        name=tool.qualified_name,
        description=description,
        parameters=schema,
        # a read tool may be retried and needs no approval under the run's approval rule; a
        # write tool (or one the manifest does not declare) is never repeated unasked
        idempotent=tool.semantics == Semantics.READ,
    )


def tools_sync() -> None:
    """Register every deployed tool and unregister every other one this process registered."""
    rows = list(
        McpTool.objects.filter(server__status=ServerStatus.DEPLOYED).only(
            "qualified_name", "name", "description", "input_schema", "semantics"
        )
    )
    wanted = {row.qualified_name: tool_manifest_of(row) for row in rows}
    with _lock:
        for name in list(_registered):
            if _registered[name] != wanted.get(name):
                tool_kind_unregister(name)
                del _registered[name]
        for name, manifest in wanted.items():
            if name not in _registered:
                try:
                    tool_kind_register(manifest, EXECUTOR)
                except ValueError:
                    logger.warning("MCP tool %s clashes with a known tool; not offered", name)
                    continue
                _registered[name] = manifest


def registered() -> list[str]:
    with _lock:
        return sorted(_registered)


class McpToolExecutor(Executor):
    """Calls a deployed tool in its server (started in this worker when needed)."""

    def execute(self, call: CallContext) -> Outcome:
        started = time.monotonic()
        try:
            return self._execute(call, started)
        finally:
            # the pipeline runs world calls without a database connection
            release_db_connection()

    def _execute(self, call: CallContext, started: float) -> dict[str, Any]:
        from forge import services

        tool = (
            McpTool.objects.select_related("server", "server__version", "server__skill")
            .filter(qualified_name=call.name, server__status=ServerStatus.DEPLOYED)
            .first()
        )
        if tool is None:
            tools_sync()
            return envelope(
                ok=False,
                output=f"tool {call.name!r} is no longer deployed (disabled, removed, failed or "
                "replaced); list the tools again",
                error_code="not_found",
            )
        server = tool.server
        if not _approved_for(server, call.run.agent_id):
            return envelope(
                ok=False,
                output=f"tool {call.name!r}: the skill's deployed version is not approved for "
                "this agent",
                error_code="denied",
            )
        timeout_s = float(
            server.limits.get("call_timeout_s")
            or getattr(settings, "FORGE_CALL_TIMEOUT_SECONDS", 60)
        )
        secrets: dict[str, str] = {}

        def plan() -> Any:
            built = services.server_plan(server)
            secrets.update(
                {server.credentials.get(env, env): v for env, v in built.credentials.items()}
            )
            return built

        live = pool.get(server.pk)
        if live is None or not live.alive:
            if server.crash_count:
                # restarted with backoff: 1 s, 2 s, 4 s... after consecutive crashes
                time.sleep(min(2 ** (server.crash_count - 1), 8))
            try:
                live = pool.ensure(plan, server.pk)
            except ServerFailed as exc:
                failed = services.server_record_crash(
                    server.pk, message=str(exc), stderr_tail=exc.stderr_tail, secrets=secrets
                )
                services.tool_record_call(tool.pk, ok=False, error=str(exc))
                note = " It is now marked failed." if failed else ""
                return envelope(
                    ok=False,
                    output=f"{exc}{note}",
                    error_code="sandbox_error",
                    retryable=not failed,
                )
            except Exception as exc:  # noqa: BLE001 - e.g. credentials that cannot be resolved
                services.tool_record_call(tool.pk, ok=False, error=str(exc))
                return envelope(
                    ok=False, output=f"the server cannot start: {exc}", error_code="sandbox_error"
                )
        secrets.update(
            {server.credentials.get(env, env): v for env, v in live.plan.credentials.items()}
        )
        release_db_connection()
        try:
            outcome = live.call(tool.name, call.arguments, timeout_s)
        except McpTimeout as exc:
            pool.stop(server.pk)  # a hung server is not reused
            services.tool_record_call(tool.pk, ok=False, error=str(exc))
            return envelope(ok=False, output=str(exc), error_code="timeout", retryable=True)
        except McpError as exc:
            message = str(exc)
            if not live.process.alive:
                pool.stop(server.pk)
                failed = services.server_record_crash(
                    server.pk,
                    message=message,
                    stderr_tail=live.process.stderr_tail(),
                    secrets=secrets,
                )
                if failed:
                    message += " The server crashed too often and is now marked failed."
            services.tool_record_call(tool.pk, ok=False, error=message)
            return envelope(
                ok=False,
                output=message,
                error_code="sandbox_error",
                retryable=tool.semantics == Semantics.READ,
            )
        denied = live.take_denied()
        output = outcome.text
        if denied:
            output += "\n[egress refused: " + ", ".join(denied) + "]"
        services.tool_record_call(
            tool.pk, ok=not outcome.is_error, error=outcome.text if outcome.is_error else ""
        )
        return envelope(
            ok=not outcome.is_error,
            output=output,
            error_code="tool_error" if outcome.is_error else None,
            # anything the server fetched came from the web; a server without network computed it
            provenance="web" if server.allowed_domains else "internal",
            duration_ms=int((time.monotonic() - started) * 1000),
        )


def _approved_for(server: DeployedServer, agent_id: int) -> bool:
    """The run's agent holds an approved policy bound to the deployed content."""
    return Policy.objects.filter(
        skill_id=server.skill_id,
        agent_id=agent_id,
        status=PolicyStatus.APPROVED,
        approved_content_hash=server.content_hash,
    ).exists()


EXECUTOR = McpToolExecutor()


__all__ = ["EXECUTOR", "McpToolExecutor", "registered", "tools_sync"]
