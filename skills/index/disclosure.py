"""Progressive disclosure (seed 002 §9): what a model is shown of its candidate skills.

First one line per candidate (`candidate_lines`, for the brain's <available_skills> and the
motor's tool list), then, on demand, the whole SKILL.md of one of them (`skill_describe`, for a
`core.skill describe` action) — and, for MCP skills, their tools' schemas once the manifest
lists them (`mcp_tool_schemas`, the hook).
"""

from __future__ import annotations

from html import escape
from typing import Any

from skills.bundle.types import SKILL_MD
from skills.errors import SkillNotFound
from skills.models import Policy, Skill, SkillFile

from .search import NOT_YET_YOURS, SkillHit, SkillSearchResult

#: Longest description shown on a candidate's line; the rest is one describe away.
LINE_DESCRIPTION_CHARS = 200


def candidate_line(hit: SkillHit) -> str:
    """One candidate as an XML-ish line (name, status, score; the description cut to
    LINE_DESCRIPTION_CHARS), escaped for a prompt."""
    description = " ".join(hit.description.split())
    if len(description) > LINE_DESCRIPTION_CHARS:
        description = description[: LINE_DESCRIPTION_CHARS - 1] + "…"
    status = f' status="{escape(hit.status)}"' if hit.status else ""
    disabled = ' disabled="true"' if hit.disabled else ""
    return (
        f'<skill name="{escape(hit.name)}"{status}{disabled} score="{hit.score:.4f}">'
        f"{escape(description, quote=False)}</skill>"
    )


def candidate_lines(result: SkillSearchResult) -> list[str]:
    """One line per hit, best first."""
    return [candidate_line(hit) for hit in result.hits]


def mcp_tool_schemas(*, version_id: int) -> list[dict[str, Any]]:
    """Hook: the JSON schemas of an MCP skill's tools. Empty until MCP skills store their
    manifest (see `documents.mcp_tool_terms`)."""
    return []


def skill_describe(*, name: str, agent: Any | None) -> dict[str, Any]:
    """The full description of one skill `agent` may see (None: staff, every skill): its
    current version's SKILL.md text, version number, the agent's policy status (or
    not_yet_yours) and the MCP tool schemas. `SkillNotFound` when the skill does not exist or the
    agent may not see it (the same answer, so names of others' skills do not leak)."""
    skill = Skill.objects.filter(name=name).select_related("current_version").first()
    status: str | None = None
    if skill is not None and agent is not None:
        own = Policy.objects.filter(skill=skill, agent_id=agent.pk).values_list("status", flat=True)
        status = own.first()
        if status is None:
            shared = Policy.objects.filter(skill=skill, agent__owner_id=agent.owner_id).exists()
            status = NOT_YET_YOURS if shared else None
            if not shared:
                skill = None
    if skill is None or skill.current_version is None:
        raise SkillNotFound(f"No skill {name!r} that you may see.", details={"skill": name})
    version = skill.current_version
    data = (
        SkillFile.objects.filter(version=version, path=SKILL_MD).values_list("data", flat=True)
    ).first()
    return {
        "name": skill.name,
        "version": version.number,
        "status": status,
        "description": version.description,
        "skill_md": bytes(data).decode("utf-8", errors="replace") if data is not None else "",
        "tools": mcp_tool_schemas(version_id=version.pk),
    }
