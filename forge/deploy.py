"""Deploying a skill version as an MCP server: the database says what is deployed; any worker
starts the server on first use (forge.runtime)."""

from __future__ import annotations

from typing import Any


class DeployError(Exception):
    """A version cannot be deployed (not an MCP skill, not approved, its server failed)."""


def deploy_version(skill_version: Any, *, actor: str) -> Any:
    """Make `skill_version` (a SkillVersion or its id) the deployed version of its skill:
    probe its server, register its tools, supersede the previous version (whose in-flight calls
    drain). Returns the DeployedServer row. Raises DeployError."""
    raise NotImplementedError


def undeploy(skill: Any, *, actor: str, reason: str = "") -> None:
    """Stop offering `skill`'s tools and stop its servers on every worker (they notice on next
    use or at their idle check)."""
    raise NotImplementedError
