"""The tools a deployed server registered, for the skill index (reading only).

The index (skills.index, a layer below this one) builds each entry with the MCP tools' names and
docstrings as `tools/list` gave them (`McpTool`), through the tool source registered here; a
newly deployed server — a new version registering its tools — re-indexes its skill once the
deployment commits (lexically at once, its embedding by the usual task).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from skills.index.documents import ToolTerms
from skills.index.store import tool_source_register, tools_reindex

from .models import DeployedServer, McpTool


def registered_tools(version_ids: list[int]) -> dict[int, list[ToolTerms]]:
    """Version id -> the tools its deployed server registered (name, description)."""
    out: dict[int, list[ToolTerms]] = {}
    rows = (
        McpTool.objects.filter(server__version_id__in=version_ids)
        .order_by("server__version_id", "name")
        .values_list("server__version_id", "name", "description")
    )
    for version_id, name, description in rows:
        out.setdefault(version_id, []).append(ToolTerms(name=name, docstring=description or ""))
    return out


def _on_server_saved(
    sender: Any, instance: DeployedServer, created: bool = False, **_: Any
) -> None:
    if created:
        skill_id = instance.skill_id
        # the tools are written after the server row, in the same transaction
        transaction.on_commit(lambda: tools_reindex(skill_id=skill_id))


def connect() -> None:
    """Register the tool source and the re-index on deployment (from ForgeConfig.ready)."""
    from django.db.models.signals import post_save

    tool_source_register("forge", registered_tools)
    post_save.connect(_on_server_saved, sender=DeployedServer, dispatch_uid="forge-index-tools")
