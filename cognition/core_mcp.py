"""The deployed MCP tools as tools of the built-in brain: offered as OpenAI function schemas
named `<skill>__<tool>` (the same schemas a motor run granted them is offered) and called
through forge.calling, the one call path of every MCP tool call.

The same gates as a run's call: the database at call time (the server deployed, an approved
policy of the agent bound to the deployed content; otherwise the model is told the tool's state
and why), the credential values of the server redacted from the result, the result envelope with
its provenance (anything a server with network access returned is marked untrusted web data),
usage counted on the tool. A tool not declared read-only changes something outside, so it runs
only on a person's word: the consent gate's `mcp.call_write` (a human's own turn, or an agent
relaying its user's message when trusted to) — never on a run's result or a schedule.
"""

from __future__ import annotations

from typing import Any

from forge.calling import mcp_tool_call, tool_known
from forge.models import TOOL_SEPARATOR, McpTool, Semantics, ServerStatus
from forge.selectors import deployed_tool_schemas
from runs.metrics import tool_call_record
from runs.tools import tool_message_content

from .consent import consent_check
from .errors import CognitionError
from .models import Agent
from .principals import Principal


def mcp_tool_schemas(agent: Agent) -> list[dict[str, Any]]:
    """The function schemas of the deployed MCP tools `agent` may call."""
    return deployed_tool_schemas(agent.pk)


def is_mcp_tool(name: str) -> bool:
    """`name` is a tool some deployed MCP server offered (now or before)."""
    return TOOL_SEPARATOR in name and tool_known(name)


def mcp_call(
    *,
    principal: Principal,
    agent: Agent,
    name: str,
    arguments: dict[str, Any],
    trigger: str | None,
) -> dict[str, Any]:
    """Call deployed tool `name` for `agent`. Errors as data, like core_dispatch: `{"ok": True,
    "result": {tool, output, provenance, duration_ms}}` or `{"ok": False, "error": {code,
    message, details: {tool, state}}}`."""
    semantics = (
        McpTool.objects.filter(qualified_name=name, server__status=ServerStatus.DEPLOYED)
        .values_list("semantics", flat=True)
        .first()
    )
    if semantics is not None and semantics != Semantics.READ:
        try:
            consent_check(
                principal=principal,
                action="mcp.call_write",
                trigger=None if trigger is None else str(trigger),
            )
        except CognitionError as exc:
            details = {**exc.details, "tool": name, "semantics": semantics}
            return {
                "ok": False,
                "error": {
                    "code": exc.code,
                    "message": f"tool {name} may change something outside (declared "
                    f"{semantics}): {exc.message}",
                    "details": details,
                },
            }
    result = mcp_tool_call(name, arguments, agent_id=agent.pk)
    tool_call_record(
        tool=name,
        duration_s=int(result.get("duration_ms") or 0) / 1000,
        ok=bool(result.get("ok")),
        error_code=str(result.get("error_code") or ""),
    )
    if not result.get("ok"):
        return {
            "ok": False,
            "error": {
                "code": str(result.get("error_code") or "tool_error"),
                "message": str(result.get("output") or ""),
                "details": {
                    "tool": name,
                    "state": str(result.get("tool_state") or "deployed"),
                    "retryable": bool(result.get("retryable")),
                },
            },
        }
    return {
        "ok": True,
        "result": {
            "tool": name,
            # marked as untrusted web data when the server has network access
            "output": tool_message_content(result),
            "provenance": result.get("provenance"),
            "duration_ms": result.get("duration_ms"),
        },
    }


__all__ = ["is_mcp_tool", "mcp_call", "mcp_tool_schemas"]
