"""Allowed-domain entries are checked with the egress policy's own parser wherever a run or a
policy is created: the API's run start, core.act, run_start itself, schedules and policy saves.
A refused entry is named with its rule, and nothing is created, charged or changed."""
# ruff: noqa: F811 - pytest fixtures imported from core_support are parameters here

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from django_celery_beat.models import PeriodicTask

from cognition.core_act import core_act
from cognition.models import Agent, Schedule
from cognition.principals import Principal
from cognition.schedule_validation import ScheduleInvalid
from cognition.schedules import schedule_create
from runs.errors import InvalidRunParams
from runs.models import MotorRun
from runs.services import run_start
from skills.errors import PolicyValidationError
from skills.models import Policy, PolicyAuditEvent
from skills.policy_edits import policy_update
from skills.services import Actor

from .conftest import World, bearer, state_snapshot
from .core_support import (  # noqa: F401 - fixtures
    _clean_mutex_keys,
    skill_in_status,
    workspace_entries,
    workspaces,
)

pytestmark = pytest.mark.django_db

#: entries the egress proxy would refuse, with the rule it names
REFUSED = [
    ("*", "wildcard_form"),
    ("*.com", "wildcard_too_broad"),
    ("https://api.example.com/", "not_a_host"),
    ("api.example.com:99999", "invalid_port"),
    ("2001:db8::1", "ipv6_brackets"),
]


def _energy(agent: Agent) -> float:
    return Agent.objects.get(pk=agent.pk).energy


@pytest.mark.parametrize(("entry", "rule"), REFUSED)
def test_the_api_refuses_a_run_start_with_an_entry_the_proxy_would_refuse(
    world: World, workspaces: Path, entry: str, rule: str
) -> None:
    # when alpha starts a run allowed `entry`
    response = bearer(world.alpha_token).post(
        "/api/v1/runs/",
        {"task": "Fetch it", "tools": ["fetch"], "domains": ["api.example.com", entry]},
        format="json",
    )
    # then 400 names the field, the entry and the rule
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_params"
    assert (error["details"]["field"], error["details"]["rule"]) == ("domains", rule)
    assert error["details"]["value"] == entry
    assert repr(entry) in error["message"]
    # and nothing was created, drained or left on disk
    assert MotorRun.objects.count() == 0
    assert _energy(world.alpha) == 1.0
    assert workspace_entries(workspaces) == []


def test_core_act_refuses_before_loading_a_skill_or_making_a_workspace(
    world: World, workspaces: Path
) -> None:
    # when core.act is asked for a run allowed "*"
    with pytest.raises(InvalidRunParams) as caught:
        core_act(
            principal=Principal.for_agent(world.alpha),
            agent=world.alpha,
            mode="agentic",
            task="Fetch it",
            tools=["fetch"],
            domains=["*"],
            trigger="api",
        )
    # then the error names the entry and rule, and nothing happened
    assert caught.value.details == {"field": "domains", "rule": "wildcard_form", "value": "*"}
    assert (MotorRun.objects.count(), _energy(world.alpha)) == (0, 1.0)
    assert workspace_entries(workspaces) == []


def test_run_start_refuses_on_its_own(world: World, workspaces: Path) -> None:
    # given a workspace the project made for the run
    workspace = workspaces / "ws_domains"
    workspace.mkdir()
    # when the service is called directly with an entry the proxy would refuse
    with pytest.raises(InvalidRunParams) as caught:
        run_start(
            agent_id=world.alpha.pk,
            task="Fetch it",
            actor="test",
            tools=["fetch"],
            allowed_domains=["ok.test", "*.*.ok.test"],
            workspace=str(workspace),
        )
    # then the refusal names the entry and rule, and no run exists
    assert caught.value.details == {
        "field": "allowed_domains",
        "rule": "wildcard_form",
        "value": "*.*.ok.test",
    }
    assert MotorRun.objects.count() == 0


def test_a_run_may_be_allowed_a_host_with_a_port(world: World, workspaces: Path) -> None:
    # when alpha starts a run allowed a port-scoped entry
    response = bearer(world.alpha_token).post(
        "/api/v1/runs/",
        {"task": "Fetch it", "tools": ["fetch"], "domains": ["ok.test:8443"]},
        format="json",
    )
    # then the run is created with it
    assert response.status_code == 201, response.json()
    assert MotorRun.objects.get().allowed_domains == ["ok.test:8443"]


@pytest.mark.parametrize(("entry", "rule"), [*REFUSED, ("", "empty"), (" ok.test", "whitespace")])
def test_a_policy_save_refuses_the_entry_and_changes_nothing(
    world: World, tmp_path: Path, entry: str, rule: str
) -> None:
    # given an approved skill
    policy = skill_in_status(
        tmp_path / "src", agent=world.alpha, approver=world.olivia, status="approved"
    )
    before = state_snapshot()
    # when its allowed domains are saved with the entry
    with pytest.raises(PolicyValidationError) as caught:
        policy_update(
            policy=policy,
            actor=Actor.system("test"),
            allowed_domains=["api.open-meteo.com", entry],
        )
    # then the error names the entry and the egress rule, and nothing changed
    assert caught.value.details == {
        "field": "allowed_domains",
        "rule": "hostname",
        "egress_rule": rule,
        "value": entry,
    }
    assert state_snapshot() == before


def test_a_policy_saves_host_port_entries_in_canonical_form(world: World, tmp_path: Path) -> None:
    policy = skill_in_status(
        tmp_path / "src", agent=world.alpha, approver=world.olivia, status="approved"
    )
    updated = policy_update(
        policy=policy,
        actor=Actor.system("test"),
        allowed_domains=["API.Open-Meteo.com", "ok.test:8443", "*.Wild.test:8080", "ok.test:8443"],
    )
    assert updated.allowed_domains == ["api.open-meteo.com", "ok.test:8443", "*.wild.test:8080"]
    assert updated.status == "approved"  # a policy-only edit keeps the status


def test_the_api_policy_update_refuses_a_wildcard_everything(
    world: World, tmp_path: Path, session_client: Callable
) -> None:
    policy = skill_in_status(
        tmp_path / "src", agent=world.alpha, approver=world.olivia, status="approved"
    )
    before = state_snapshot()
    response = session_client(world.olivia).post(
        f"/api/v1/skills/{policy.skill.name}/update/?agent=alpha", {"domains": ["*"]}, format="json"
    )
    assert response.status_code == 400, response.json()
    details = response.json()["error"]["details"]
    assert (details["rule"], details["egress_rule"], details["value"]) == (
        "hostname",
        "wildcard_form",
        "*",
    )
    assert state_snapshot() == before


def test_a_schedule_is_refused_for_a_policy_holding_an_entry_the_proxy_would_refuse(
    world: World, tmp_path: Path
) -> None:
    # given an approved skill whose stored policy holds "*" (saved before entries were checked)
    policy = skill_in_status(
        tmp_path / "src", agent=world.alpha, approver=world.olivia, status="approved"
    )
    Policy.objects.filter(pk=policy.pk).update(allowed_domains=["*"])
    audit_rows = PolicyAuditEvent.objects.count()
    # when a schedule of it is created
    with pytest.raises(ScheduleInvalid) as caught:
        schedule_create(
            agent=world.alpha,
            skill=policy.skill.name,
            task="Report the weather",
            interval_seconds=3600,
            actor=world.olivia,
        )
    # then the refusal names the skill, the entry and the rule, and nothing was written
    assert caught.value.details == {
        "field": "skill",
        "rule": "allowed_domains",
        "skill": policy.skill.name,
        "egress_rule": "wildcard_form",
        "value": "*",
    }
    assert (Schedule.objects.count(), PeriodicTask.objects.count()) == (0, 0)
    assert PolicyAuditEvent.objects.count() == audit_rows
