"""Deployed MCP tools as a tool kind of the call pipeline: one manifest per tool, named
`<skill>__<tool>`, and one executor for all of them.

`tools_sync` makes this process's registry match the database's deployed tools (runs calls it
through `runs.tools.tool_sources_refresh` whenever a tool name it does not know comes up; forge
after every change it commits). The executor checks the database again at every call
(forge.calling): a call never reaches a server whose row is not deployed, nor one whose content
no approved policy of the run's agent is bound to, however stale a process's registry is. A
name some server offered before (now disabled, failed, removed or replaced) still reaches the
executor (`executor_of_known`), which tells the model why it cannot be called.
"""

from __future__ import annotations

import logging
import threading

from forge.calling import mcp_tool_call, tool_known
from forge.models import TOOL_SEPARATOR, McpTool, Semantics, ServerStatus
from runs.pipeline import (
    CallContext,
    Executor,
    ToolManifest,
    tool_kind_register,
    tool_kind_unregister,
)
from runs.pipeline.executors import Outcome

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
    """Calls a deployed tool in its server (started in this worker when needed); a tool whose
    server is not deployed or not approved for the run's agent gets why (forge.calling)."""

    def execute(self, call: CallContext) -> Outcome:
        return mcp_tool_call(call.name, call.arguments, agent_id=call.run.agent_id)


def executor_of_known(name: str) -> Executor | None:
    """The executor for a name no manifest of this process knows but some deployed server
    offered (now disabled, failed, removed or replaced): its calls are told why."""
    if TOOL_SEPARATOR not in name:
        return None
    return EXECUTOR if tool_known(name) else None


EXECUTOR = McpToolExecutor()


__all__ = ["EXECUTOR", "McpToolExecutor", "executor_of_known", "registered", "tools_sync"]
