"""Builders for the core.* tests: skills in every status, clean mutex keys, workspace roots."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cognition.models import Agent
from runs.models import MotorRun
from runs.mutex import redis_client
from skills.models import Policy, PolicyStatus
from skills.policy_edits import policy_create, policy_update
from skills.reviewing import policy_approve, policy_review
from skills.services import Actor
from tests.skills.admin_support import import_skill


@pytest.fixture(autouse=True)
def _clean_mutex_keys() -> Iterator[None]:
    """No mutex key of another test's run may make an agent look busy here."""
    client = redis_client()
    for key in client.scan_iter(match="motor:mutex:*"):
        client.delete(key)
    yield
    for key in client.scan_iter(match="motor:mutex:*"):
        client.delete(key)


@pytest.fixture
def workspaces(settings, tmp_path: Path) -> Path:
    root = tmp_path / "workspaces"
    root.mkdir()
    settings.MOTOR_WORKSPACES_DIR = root
    return root


def skill_in_status(root: Path, *, agent: Agent, approver, status: str) -> Policy:
    """The weather-report skill for `agent` with a policy in `status`.

    Its policy grants code and read, the domain api.open-meteo.com and needs WEATHER_TOKEN.
    """
    if status == PolicyStatus.NEEDS_REAPPROVAL:
        other = import_skill(root, agent=_other_agent(agent))
        policy = policy_create(skill=other.skill, agent=agent, actor=Actor.system("test"))
    else:
        policy = import_skill(root, agent=agent)
    policy = policy_update(
        policy=policy,
        actor=Actor.system("test"),
        allowed_domains=["api.open-meteo.com"],
        required_credentials=["WEATHER_TOKEN"],
        tools=["code", "read"],
    )
    actor = Actor(user=approver, label=f"admin:{approver.username}")
    if status in (PolicyStatus.REVIEWED, PolicyStatus.APPROVED):
        policy = policy_review(policy=policy, actor=actor)
    if status == PolicyStatus.APPROVED:
        policy = policy_approve(policy=policy, actor=actor)
    policy.refresh_from_db()
    assert policy.status == status
    return policy


def _other_agent(agent: Agent) -> Agent:
    return Agent.objects.create(name=f"{agent.name}-importer", owner=agent.owner)


def run_count() -> int:
    return MotorRun.objects.count()


def workspace_entries(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())
