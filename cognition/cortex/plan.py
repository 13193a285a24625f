"""The execution plan shown before a standard-mode run of a skill (seed 003 §3.2), and the side
effects it is built from.

Side effects are read from what the skill's policy grants and what its deterministic review
found (skills.bundle.review), never from what the skill says about itself:
- `write:workspace` — the write or edit tool is granted;
- `shell:<tool>` — bash or code is granted; `shell:scripts`, `shell:skill-md` — the review saw
  scripts/ or shell blocks; `shell:<rule>` — a danger finding of the review (it runs something);
- `delete:<what>` — the skill's files hold a destructive command (rm -r, DROP TABLE, …);
- `credential:<NAME>` — a credential the policy requires or the files reference;
- `read:web:<domain>` — a domain the policy allows.

Severity levels (§3.2): read-only, write, destructive, credentials, shell; a plan lists every
level that applies (read-only only when none of the others does).
"""

from __future__ import annotations

import re
from typing import Any

from skills.bundle.types import SKILL_MD
from skills.errors import SkillNotFound
from skills.models import Policy, SkillFile, SkillVersion

from .models import Cortex, CortexCandidate, CortexLesson, LessonKind

#: most steps a plan lists
MAX_STEPS = 8
#: characters of one step kept
STEP_CHARS = 160
#: most characters of a skill's files scanned for destructive commands, per file
SCAN_CHARS = 200_000

SEVERITY_ORDER = ("read-only", "write", "destructive", "credentials", "shell")
_DESTRUCTIVE = (
    (re.compile(r"\brm\s+-[a-zA-Z]*[rf]", re.IGNORECASE), "files"),
    (re.compile(r"\b(drop|truncate)\s+(table|database|schema)\b", re.IGNORECASE), "database"),
    (re.compile(r"\bdelete\s+from\b", re.IGNORECASE), "rows"),
    (re.compile(r"\bgit\s+push\s+(-f|--force)", re.IGNORECASE), "git-history"),
    (re.compile(r"\b(shred|mkfs(\.\w+)?)\b"), "disk"),
    (re.compile(r"\bshutil\.rmtree\(|\bos\.remove\(|\bunlink\(", re.IGNORECASE), "files"),
)
_STEP = re.compile(r"^\s*(?:#{1,3}\s+(.+)|(?:\d+[.)]|[-*])\s+(.+))$")


def skill_md_chars_of(version: SkillVersion) -> int:
    """Characters of the version's SKILL.md (0 when it has none)."""
    data = (
        SkillFile.objects.filter(version=version, path=SKILL_MD).values_list("data", flat=True)
    ).first()
    return len(bytes(data).decode("utf-8", errors="replace")) if data is not None else 0


def _destructive(version: SkillVersion | None) -> list[str]:
    if version is None:
        return []
    found: set[str] = set()
    for data in SkillFile.objects.filter(version=version).values_list("data", flat=True):
        raw = bytes(data)
        if b"\0" in raw[:8192]:
            continue
        text = raw[:SCAN_CHARS].decode("utf-8", errors="replace")
        found |= {f"delete:{what}" for pattern, what in _DESTRUCTIVE if pattern.search(text)}
    return sorted(found)


def side_effects_for(*, policy: Policy | None) -> list[str]:
    """The side effects of the agent's policy for a skill and of its current version (see the
    module doc), sorted; [] without a policy."""
    if policy is None:
        return []
    tools = {str(t) for t in policy.tools or []}
    facts: dict[str, Any] = dict(policy.review_facts or {})
    effects: set[str] = set()
    if tools & {"write", "edit", "filesystem"}:
        effects.add("write:workspace")
    for tool in sorted(tools & {"bash", "shell", "code"}):
        effects.add(f"shell:{tool}")
    if facts.get("has_scripts"):
        effects.add("shell:scripts")
    if facts.get("has_shell_blocks"):
        effects.add("shell:skill-md")
    for finding in facts.get("suspicious") or []:
        if isinstance(finding, dict) and finding.get("severity") == "danger":
            effects.add(f"shell:{finding.get('rule')}")
    credentials = {str(c) for c in policy.required_credentials or []}
    credentials |= {str(c) for c in facts.get("referenced_credentials") or []}
    effects |= {f"credential:{c}" for c in credentials if c}
    effects |= {f"read:web:{d}" for d in policy.allowed_domains or [] if d}
    effects |= set(_destructive(policy.skill.current_version))
    return sorted(effects)


def severity_of(side_effects: list[str]) -> list[str]:
    """The severity levels that apply, in SEVERITY_ORDER."""
    levels = set()
    for effect in side_effects:
        prefix = effect.split(":", 1)[0]
        levels.add(
            {
                "write": "write",
                "delete": "destructive",
                "credential": "credentials",
                "shell": "shell",
            }.get(prefix, "")
        )
    levels.discard("")
    return [lv for lv in SEVERITY_ORDER if lv in levels] or ["read-only"]


def step_summary(skill_md: str) -> list[str]:
    """The SKILL.md body's headings and list items, in order, at most MAX_STEPS (the
    frontmatter skipped)."""
    body = skill_md
    if body.startswith("---"):
        end = body.find("\n---", 3)
        body = body[end + 4 :] if end != -1 else ""
    steps: list[str] = []
    in_code = False
    for line in body.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        match = None if in_code else _STEP.match(line)
        if match:
            text = " ".join((match.group(1) or match.group(2)).split())
            steps.append(text[:STEP_CHARS])
            if len(steps) >= MAX_STEPS:
                break
    return steps


def relevant_lessons(*, agent: Any, skill: str, region: str | None) -> list[dict[str, Any]]:
    """Lessons about `skill` or about its region, most confident first."""
    cortex = Cortex.objects.filter(agent_id=agent.pk).first()
    if cortex is None:
        return []
    lessons = CortexLesson.objects.filter(cortex=cortex).select_related("region")
    out = []
    for lesson in lessons:
        about_skill = lesson.kind == LessonKind.SKILL_QUALITY_WARNING and lesson.skill_name == skill
        about_region = lesson.region is not None and lesson.region.name == region
        if about_skill or about_region:
            out.append(
                {
                    "type": lesson.kind,
                    "region": lesson.region.name if lesson.region else None,
                    "slug": lesson.skill_name or None,
                    "key": lesson.key or None,
                    "action": lesson.action or None,
                    "detail": lesson.detail or None,
                    "confidence": round(lesson.confidence, 2),
                }
            )
    return out


def execution_plan(*, agent: Any, skill: str, task: str) -> dict[str, Any]:
    """See cognition.cortex.execution_plan. `SkillNotFound` when the agent holds no policy for
    `skill`."""
    from .perception import effective_weight, reflex_blocker

    policy = (
        Policy.objects.select_related("skill", "skill__current_version")
        .filter(agent_id=agent.pk, skill__name=skill)
        .first()
    )
    if policy is None or policy.skill.current_version is None:
        raise SkillNotFound(
            f"No skill named {skill!r} for agent {agent.name!r}.", details={"name": skill}
        )
    version = policy.skill.current_version
    data = (
        SkillFile.objects.filter(version=version, path=SKILL_MD).values_list("data", flat=True)
    ).first()
    skill_md = bytes(data).decode("utf-8", errors="replace") if data is not None else ""
    effects = side_effects_for(policy=policy)
    candidate = (
        CortexCandidate.objects.filter(region__cortex__agent_id=agent.pk, skill=policy.skill)
        .select_related("region")
        .order_by("-weight")
        .first()
    )
    region = candidate.region.name if candidate else None
    reflex_blocked = "not in the cortex"
    if candidate is not None:
        from django.utils import timezone

        effective = effective_weight(candidate.weight, candidate.last_used, now=timezone.now())
        reflex_blocked = reflex_blocker(
            candidate, effective=effective, current_version=version.number
        )
    facts = dict(policy.review_facts or {})
    return {
        "skill": policy.skill.name,
        "version": version.number,
        "task": task[:500],
        "steps": step_summary(skill_md),
        "side_effects": effects,
        "severity": severity_of(effects),
        "review": {
            "status": policy.status,
            "suspicious": [f for f in facts.get("suspicious") or [] if isinstance(f, dict)][:10],
        },
        "lessons": relevant_lessons(agent=agent, skill=policy.skill.name, region=region),
        "region": region,
        "reflex": not reflex_blocked,
        "reflex_blocked_by": reflex_blocked,
        "confirmation": "notify_only" if not reflex_blocked else "ask_user",
        "disabled": policy.disabled_at is not None,
    }
