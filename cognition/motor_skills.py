"""The skill index in the motor's tool list (seed 002 §9, stage 2): a run bound to no skill is
shown the agent's approved skills that fit its task, one line each, and may read one in full
with the `skill_describe` tool (progressive disclosure, as `core.skill describe` is for the
brain).

Only skills the agent holds an *approved*, enabled policy for are listed or described: a
SKILL.md nobody approved is text from outside, and the motor's system prompt follows what it
says. `skill_describe` is a tool kind registered with the call pipeline (a host executor: a
database read inside the call's transaction), granted by core.act only to runs that got
candidates.
"""

from __future__ import annotations

from typing import Any

from runs.pipeline import CallContext, Executor, ToolManifest, tool_kind_register
from runs.tools import envelope, tool_manifest
from skills.errors import SkillNotFound
from skills.index.disclosure import candidate_line, skill_describe
from skills.index.search import SkillSearchQueryInvalid, skill_search
from skills.models import PolicyStatus

from .core import _SKILL_NAME

SKILL_DESCRIBE = "skill_describe"
#: most characters of a SKILL.md returned to the model (the rest is cut, and said so)
MAX_DESCRIBE_CHARS = 40_000

MANIFEST = ToolManifest(
    name=SKILL_DESCRIBE,
    description="Read the whole SKILL.md of one of the skills listed in <available_skills>.",
    parameters={
        "type": "object",
        "properties": {"name": {"type": "string", "description": "The skill's name."}},
        "required": ["name"],
        "additionalProperties": False,
    },
    idempotent=True,
)


def _usable(status: str | None, disabled: bool) -> bool:
    return status == PolicyStatus.APPROVED and not disabled


def run_skill_candidates(*, agent: Any, task: str) -> str:
    """The candidate lines for a run of `agent` on `task` bound to no skill: the index's top-k
    (MOTOR_SKILL_SEARCH_TOP_K) among the agent's approved, enabled skills; empty when none."""
    try:
        hits = skill_search(query=task, agent=agent, include_shared=False).hits
    except SkillSearchQueryInvalid:
        return ""
    return "\n".join(candidate_line(hit) for hit in hits if _usable(hit.status, hit.disabled))


class SkillDescribeExecutor(Executor):
    """Answers with the current SKILL.md of one of the run's agent's approved skills."""

    host = True

    def execute(self, call: CallContext) -> dict[str, Any]:
        name = call.arguments.get("name")
        if not isinstance(name, str) or not _SKILL_NAME.fullmatch(name):
            return envelope(
                ok=False, output="name: the name of a listed skill", error_code="invalid_arguments"
            )
        try:
            described = skill_describe(name=name, agent=call.run.agent)
        except SkillNotFound as exc:
            return envelope(ok=False, output=exc.message, error_code="skill_not_found")
        disabled = call.run.agent.skill_policies.filter(
            skill__name=name, disabled_at__isnull=False
        ).exists()
        if not _usable(described["status"], disabled):
            return envelope(
                ok=False,
                output=f"Skill {name!r} is not approved for this agent; it cannot be used here.",
                error_code="skill_not_approved",
            )
        text = described["skill_md"]
        if len(text) > MAX_DESCRIBE_CHARS:
            text = text[:MAX_DESCRIBE_CHARS] + f"\n… [cut: {len(described['skill_md'])} characters]"
        return envelope(
            ok=True,
            output=f'<skill name="{name}" version="{described["version"]}">\n{text}\n</skill>',
        )


def register() -> None:
    """Register the skill_describe tool kind once per process (the app's ready())."""
    if tool_manifest(SKILL_DESCRIBE) is None:
        tool_kind_register(MANIFEST, SkillDescribeExecutor())
