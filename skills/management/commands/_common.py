"""Helpers shared by the skills management commands."""

from __future__ import annotations

from django.apps import apps
from django.core.management.base import CommandError
from django.db.models import Model

from skills.install import InstallResult


def agent_by_name(name: str | None) -> Model | None:
    """The cognition Agent called `name` (looked up through the app registry: skills does not
    import the cognition app)."""
    if not name:
        return None
    agent_model = apps.get_model("cognition", "Agent")
    try:
        return agent_model.objects.get(name=name)
    except agent_model.DoesNotExist:
        raise CommandError(f"No agent named {name!r}.") from None


def describe(result: InstallResult) -> str:
    if result.skill_created:
        what = "created"
    elif result.version_created:
        what = "new version"
    else:
        what = "unchanged"
    line = f"{result.skill.name}: {what} (v{result.version.number}, {result.version.content_hash})"
    if result.policy is not None:
        line += f", policy {result.policy.status}"
    return line
