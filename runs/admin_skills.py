"""The skills a completed run wrote, as the run console lists them: each with a link to its
review for the run's agent (where a person decides on it)."""

from __future__ import annotations

from typing import Any

from django.urls import reverse

from runs.models import MotorRun
from skills.models import Policy


def skills_written(run: MotorRun) -> list[dict[str, Any]]:
    """Created and updated skills with their policy's status and review link, then the ones
    extraction refused, with the reason. Empty when the run wrote none."""
    extracted = (run.result or {}).get("skills") or {}
    names = [("created", n) for n in extracted.get("created") or []]
    names += [("updated", n) for n in extracted.get("updated") or []]
    policies = {
        p.skill.name: p
        for p in Policy.objects.filter(
            agent_id=run.agent_id, skill__name__in=[n for _, n in names]
        ).select_related("skill")
    }
    rows: list[dict[str, Any]] = []
    for verb, name in names:
        policy = policies.get(name)
        rows.append(
            {
                "verb": verb,
                "name": name,
                "url": reverse("admin:skills_policy_review", args=[policy.pk]) if policy else "",
                "status": policy.get_status_display().lower() if policy else "",
            }
        )
    for failed in extracted.get("failed") or []:
        rows.append({"verb": "failed", "name": failed.get("name"), "reason": failed.get("reason")})
    return rows
