"""core.skill and core.task list through the dispatcher: the same rules as the REST endpoints."""
# ruff: noqa: F811 - pytest fixtures imported from core_support are parameters here

from __future__ import annotations

import pytest

from cognition.brain.prompts import available_skills
from cognition.principals import Principal
from cognition.services import agent_create
from cognition.tools import core_dispatch
from skills.models import Policy, PolicyStatus

from .conftest import state_snapshot
from .core_support import _clean_mutex_keys, skill_in_status, workspaces  # noqa: F401

pytestmark = pytest.mark.django_db


def test_an_agent_cannot_approve_through_the_tool_and_nothing_changes(world, tmp_path):
    # given a reviewed skill of alpha
    policy = skill_in_status(
        tmp_path / "src", agent=world.alpha, approver=world.olivia, status="reviewed"
    )
    before = state_snapshot()
    # when alpha approves it on a motor_result trigger
    refused = core_dispatch(
        principal=Principal.for_agent(world.alpha),
        tool_name="core_skill",
        arguments={"action": "approve", "name": "weather-report"},
        trigger="motor_result",
    )
    # then it is refused and nothing changed
    assert refused["ok"] is False
    assert refused["error"]["code"] == "consent_required"
    assert state_snapshot() == before
    # when its owner approves it, naming the agent
    approved = core_dispatch(
        principal=Principal.for_human(world.olivia),
        tool_name="core.skill",
        arguments={"action": "approve", "name": "weather-report", "agent": "alpha"},
        trigger="user_message",
    )
    # then the policy is approved
    assert approved["ok"] is True
    assert approved["result"]["status"] == "approved"
    assert Policy.objects.get(pk=policy.pk).status == PolicyStatus.APPROVED


def test_list_and_review_need_no_consent_and_see_only_the_agents_skills(world, tmp_path):
    skill_in_status(
        tmp_path / "src", agent=world.alpha, approver=world.olivia, status="pending_review"
    )
    listed = core_dispatch(
        principal=Principal.for_agent(world.alpha),
        tool_name="core_skill",
        arguments={"action": "list"},
        trigger="motor_result",
    )
    assert [(s["name"], s["status"]) for s in listed["result"]["skills"]] == [
        ("weather-report", "pending_review")
    ]
    review = core_dispatch(
        principal=Principal.for_agent(world.alpha),
        tool_name="core_skill",
        arguments={"action": "review", "name": "weather-report"},
        trigger="motor_result",
    )
    assert review["result"]["status"] == "reviewed"
    other = core_dispatch(
        principal=Principal.for_agent(world.bravo),
        tool_name="core_skill",
        arguments={"action": "review", "name": "weather-report"},
        trigger="user_message",
    )
    assert other["error"]["code"] == "skill_not_found"
    assert not Policy.objects.filter(agent=world.bravo).exists()
    empty = core_dispatch(
        principal=Principal.for_agent(world.bravo),
        tool_name="core_skill",
        arguments={"action": "list"},
        trigger="user_message",
    )
    assert empty == {"ok": True, "result": {"skills": []}}


def test_review_gives_another_agent_of_the_same_owner_its_own_policy(world, tmp_path):
    # given a skill approved for alpha, and a second agent of alpha's owner
    approved = skill_in_status(
        tmp_path / "src", agent=world.alpha, approver=world.olivia, status="approved"
    )
    gamma = agent_create(name="gamma", owner=world.olivia, actor=world.olivia)
    assert 'name="weather-report" status="not_yet_yours"' in available_skills(agent=gamma)
    # when gamma reviews it
    review = core_dispatch(
        principal=Principal.for_agent(gamma),
        tool_name="core_skill",
        arguments={"action": "review", "name": "weather-report"},
        trigger="motor_result",
    )
    # then gamma has a policy of its own, reviewed and without permissions; alpha's is unchanged
    assert (review["ok"], review["result"]["status"]) == (True, "reviewed")
    own = Policy.objects.get(agent=gamma, skill=approved.skill)
    assert (own.status, own.allowed_domains, own.approved_by) == ("reviewed", [], None)
    assert Policy.objects.get(pk=approved.pk).status == PolicyStatus.APPROVED
    assert 'name="weather-report" status="reviewed"' in available_skills(agent=gamma)
    # and approving it still needs the user
    refused = core_dispatch(
        principal=Principal.for_agent(gamma),
        tool_name="core_skill",
        arguments={"action": "approve", "name": "weather-report"},
        trigger="motor_result",
    )
    assert refused["error"]["code"] == "consent_required"
    assert Policy.objects.get(pk=own.pk).status == PolicyStatus.REVIEWED


def test_task_list_filters_by_status_and_limits(world, workspaces):
    principal = Principal.for_agent(world.alpha)
    started = core_dispatch(
        principal=principal,
        tool_name="core_act",
        arguments={"mode": "agentic", "task": "one", "tools": [], "domains": []},
        trigger="api",
    )["result"]["run_id"]
    listed = core_dispatch(
        principal=principal,
        tool_name="core_task",
        arguments={"action": "list", "status": "created", "limit": 5},
        trigger="api",
    )["result"]
    assert listed["total"] == 1
    assert [(r["id"], r["status"], r["task"]) for r in listed["runs"]] == [
        (started, "created", "one")
    ]
    none = core_dispatch(
        principal=principal,
        tool_name="core_task",
        arguments={"action": "list", "status": "failed"},
        trigger="api",
    )["result"]
    assert none == {"runs": [], "total": 0}
    bad = core_dispatch(
        principal=principal,
        tool_name="core_task",
        arguments={"action": "list", "limit": 0},
        trigger="api",
    )
    assert bad["error"]["code"] == "invalid_params"
