"""Reads of deployed MCP servers: the management list, a server's code, the tool schemas an
agent is offered."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, QuerySet

from forge.errors import ServerNotFound
from forge.models import LIVE_STATUSES, DeployedServer, McpTool, ServerStatus
from forge.registry import tool_manifest_of
from skills.models import Policy, PolicyStatus


def servers_for(agent_id: int | None) -> QuerySet[DeployedServer]:
    """The live servers (deployed, disabled, failed) an agent runs, or every one (None)."""
    servers = (
        DeployedServer.objects.filter(status__in=LIVE_STATUSES)
        .select_related("skill", "version")
        .annotate(tool_count=Count("tools"))
        .order_by("skill__name")
    )
    return servers if agent_id is None else servers.filter(agent_id=agent_id)


def server_of(skill_name: str, agent_id: int | None) -> DeployedServer:
    server = servers_for(agent_id).filter(skill__name=skill_name).first()
    if server is None:
        raise ServerNotFound(
            f"No deployed MCP server for skill {skill_name!r}.", details={"skill": skill_name}
        )
    return server


def server_dict(server: DeployedServer) -> dict[str, Any]:
    """A server as the API lists it: status, tool count, failure rate, its policy."""
    rate = server.failure_rate
    count = getattr(server, "tool_count", None)
    return {
        "skill": server.skill.name,
        "version": server.version.number,
        "status": server.status,
        "tool_count": count if count is not None else server.tools.count(),
        "failure_rate": round(rate, 3) if rate is not None else None,
        "failure": server.failure,
        "status_by": server.status_by,
        "status_at": server.status_at.isoformat() if server.status_at else None,
        "allowed_domains": list(server.allowed_domains),
        "credentials": sorted(set(server.credentials.values())),
        "deployed_at": server.created_at.isoformat(),
        "tools": [
            {
                "name": tool.qualified_name,
                "description": tool.description,
                "semantics": tool.semantics,
                "calls": tool.calls,
                "failures": tool.failures,
                "last_error": tool.last_error,
            }
            for tool in server.tools.all()
        ],
    }


def server_code(server: DeployedServer) -> dict[str, str]:
    """The deployed version's text files, read-only ({path: text}; binary files named only)."""
    out: dict[str, str] = {}
    for item in server.version.files.order_by("path"):
        data = bytes(item.data)
        out[item.path] = (
            f"<binary file, {len(data)} bytes>"
            if b"\0" in data
            else data.decode("utf-8", "replace")
        )
    return out


def deployed_tool_schemas(agent_id: int) -> list[dict[str, Any]]:
    """OpenAI function schemas of the deployed MCP tools `agent_id` may call (an approved,
    enabled policy of the agent is bound to the deployed content)."""
    approved = {
        (skill_id, content_hash)
        for skill_id, content_hash in Policy.objects.filter(
            agent_id=agent_id, status=PolicyStatus.APPROVED, disabled_at__isnull=True
        ).values_list("skill_id", "approved_content_hash")
    }
    tools = McpTool.objects.filter(server__status=ServerStatus.DEPLOYED).select_related("server")
    return [
        tool_manifest_of(tool).schema()
        for tool in tools.order_by("qualified_name")
        if (tool.server.skill_id, tool.server.content_hash) in approved
    ]
