"""core.act against PostgreSQL and Redis: the skill status gate, skill_review, energy, busy."""
# ruff: noqa: F811 - pytest fixtures imported from core_support are parameters here

from __future__ import annotations

from pathlib import Path

import pytest

from cognition.core import run_credentials_resolve
from cognition.core_act import ActRefused, core_act
from cognition.errors import ConsentRequired, EnergyTooLow
from cognition.models import Agent
from cognition.principals import Principal
from cognition.services import credential_set
from runs.errors import InvalidRunParams, MotorBusy
from runs.models import MotorRun, Step
from runs.services import run_start
from skills.models import PolicyStatus
from skills.policy_edits import policy_update
from skills.services import Actor
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import drive, new_workspace

from .conftest import World
from .core_support import (  # noqa: F401 - fixtures
    _clean_mutex_keys,
    run_count,
    skill_in_status,
    workspace_entries,
    workspaces,
)

pytestmark = pytest.mark.django_db


def _energy(agent: Agent) -> float:
    return Agent.objects.get(pk=agent.pk).energy


def _act(world: World, **kwargs):
    params = {"mode": "agentic", "task": "Report the weather in Berlin", "trigger": "api"}
    params.update(kwargs)
    return core_act(principal=Principal.for_agent(world.alpha), agent=world.alpha, **params)


def test_an_approved_skill_runs_with_its_policy_tools_domains_and_credentials(
    world, workspaces, tmp_path
):
    # given an approved skill whose credential is in the vault
    skill_in_status(tmp_path / "src", agent=world.alpha, approver=world.olivia, status="approved")
    credential_set(agent=world.alpha, name="WEATHER_TOKEN", value="tok-12345678", actor="test")
    # when the agent starts it without naming tools or domains
    result = _act(world, skill="weather-report")
    # then the run carries the policy's grants, the lowercase credential name and the skill files
    run = MotorRun.objects.get(pk=result["run_id"])
    assert result == {"run_id": run.pk, "status": "created"}
    assert run.tools == ["code", "read"]
    assert run.allowed_domains == ["api.open-meteo.com"]
    assert run.credential_names == ["weather_token"]
    assert run.skill.name == "weather-report"
    assert run.skill_instructions.startswith("# Weather report")
    assert (run.trigger, run.review, run.max_iterations, run.max_attempts) == ("api", False, 20, 3)
    files = sorted(
        str(p.relative_to(run.workspace)) for p in Path(run.workspace).rglob("*") if p.is_file()
    )
    assert "SKILL.md" in files and "scripts/forecast.py" in files
    assert str(workspaces) == str(Path(run.workspace).parent)
    # and exactly the agentic cost was drained
    assert _energy(world.alpha) == pytest.approx(0.90)
    # and the runtime's resolver hands the value over under both spellings
    assert run_credentials_resolve(
        agent_id=world.alpha.pk, run_id=run.pk, names=["weather_token"]
    ) == {
        "weather_token": "tok-12345678",
        "WEATHER_TOKEN": "tok-12345678",
    }


def test_an_approved_skill_may_be_narrowed_but_never_widened(world, workspaces, tmp_path):
    # given an approved skill granting code and read on api.open-meteo.com
    skill_in_status(tmp_path / "src", agent=world.alpha, approver=world.olivia, status="approved")
    credential_set(agent=world.alpha, name="WEATHER_TOKEN", value="tok-12345678", actor="test")
    # when the call asks for bash and another domain
    with pytest.raises(ActRefused) as refused:
        _act(world, skill="weather-report", tools=["read", "bash"], domains=["evil.example"])
    # then it is refused naming the extras, and nothing was created or drained
    assert refused.value.details["rule"] == "approved_policy_bounds"
    assert refused.value.details["extra_tools"] == ["bash"]
    assert refused.value.details["extra_domains"] == ["evil.example"]
    assert (run_count(), _energy(world.alpha), workspace_entries(workspaces)) == (0, 1.0, [])
    # when it asks for a subset
    run_id = _act(world, skill="weather-report", tools=["read"], domains=[])["run_id"]
    # then the run gets exactly that subset
    run = MotorRun.objects.get(pk=run_id)
    assert (run.tools, run.allowed_domains) == (["read"], [])


@pytest.mark.parametrize(
    "status",
    [PolicyStatus.PENDING_REVIEW, PolicyStatus.REVIEWED, PolicyStatus.NEEDS_REAPPROVAL],
)
def test_an_unapproved_skill_needs_explicit_tools_and_domains(world, workspaces, tmp_path, status):
    # given a skill that is not approved for the agent
    skill_in_status(tmp_path / "src", agent=world.alpha, approver=world.olivia, status=status)
    credential_set(agent=world.alpha, name="WEATHER_TOKEN", value="tok-12345678", actor="test")
    # when the call relies on the policy (tools only, no domains)
    with pytest.raises(ActRefused) as refused:
        _act(world, skill="weather-report", tools=["read"])
    # then it is refused naming the status, and nothing happened
    assert refused.value.details == {
        "rule": "unapproved_skill_needs_explicit_grants",
        "status": status,
        "missing": ["domains"],
    }
    assert f"is {status} for agent 'alpha', not approved" in refused.value.message
    assert (run_count(), _energy(world.alpha), workspace_entries(workspaces)) == (0, 1.0, [])
    # when tools and domains are explicit
    run_id = _act(world, skill="weather-report", tools=["read", "write"], domains=[])["run_id"]
    # then the run has exactly those and no credential of the policy
    run = MotorRun.objects.get(pk=run_id)
    assert (run.tools, run.allowed_domains, run.credential_names) == (["read", "write"], [], [])
    assert _energy(world.alpha) == pytest.approx(0.90)


def test_missing_credentials_do_not_refuse_the_call_the_run_asks_for_them(
    world, workspaces, tmp_path, scripted_llm
):
    # given an approved skill whose credential nobody has set
    skill_in_status(tmp_path / "src", agent=world.alpha, approver=world.olivia, status="approved")
    # when it is started
    run_id = _act(world, skill="weather-report")["run_id"]
    # then the run exists with the lowercase name, and its first step asks for the credential
    # without calling the model
    assert MotorRun.objects.get(pk=run_id).credential_names == ["weather_token"]
    drive(run_id, scripted_llm.client())
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.missing_credentials) == ("awaiting_input", ["weather_token"])
    assert scripted_llm.requests == []
    assert _energy(world.alpha) == pytest.approx(0.90)


def test_skill_review_starts_only_on_a_motor_result_trigger(world, workspaces, tmp_path):
    # given a skill pending review
    skill_in_status(
        tmp_path / "src", agent=world.alpha, approver=world.olivia, status="pending_review"
    )
    # when a review is asked for on a user message
    with pytest.raises(ConsentRequired) as refused:
        _act(world, skill="weather-report", skill_review=True, trigger="user_message")
    # then it is refused and nothing happened
    assert refused.value.details == {"rule": "skill_review_trigger", "trigger": "user_message"}
    assert (run_count(), _energy(world.alpha), workspace_entries(workspaces)) == (0, 1.0, [])
    # when it comes with a motor_result trigger
    run_id = _act(world, skill="weather-report", skill_review=True, trigger="motor_result")[
        "run_id"
    ]
    # then a read-only review run without network was created
    run = MotorRun.objects.get(pk=run_id)
    assert (run.review, run.tools, run.allowed_domains, run.credential_names) == (
        True,
        ["read", "list", "glob", "grep"],
        [],
        [],
    )
    assert (run.max_iterations, run.max_attempts, run.trigger) == (10, 1, "motor_result")


def test_skill_review_refuses_write_tools_or_domains(world, workspaces, tmp_path):
    skill_in_status(
        tmp_path / "src", agent=world.alpha, approver=world.olivia, status="pending_review"
    )
    with pytest.raises(ActRefused) as refused:
        _act(
            world,
            skill="weather-report",
            skill_review=True,
            trigger="motor_result",
            tools=["write"],
        )
    assert refused.value.details == {"rule": "skill_review_readonly"}
    assert (run_count(), _energy(world.alpha)) == (0, 1.0)


def test_a_busy_agent_gets_the_runtime_message_and_keeps_its_energy(world, workspaces):
    # given an active run of the agent
    active_workspace = new_workspace()
    active = run_start(
        workspace=active_workspace, agent_id=world.alpha.pk, task="hold the hands", actor="test"
    )["run_id"]
    # when another agentic run is asked for
    with pytest.raises(MotorBusy) as busy:
        _act(world, tools=["read"], domains=[])
    # then the runtime's message names the active run, and nothing else changed
    assert busy.value.message == (
        f"Motor Cortex is busy (run_id: {active}). "
        "Wait for it to complete or cancel it via core.task."
    )
    assert (run_count(), _energy(world.alpha), workspace_entries(workspaces)) == (
        1,
        1.0,
        [Path(active_workspace).name],
    )


def test_low_energy_refuses_an_agentic_run_before_anything_is_prepared(world, workspaces):
    Agent.objects.filter(pk=world.alpha.pk).update(energy=0.2)
    world.alpha.refresh_from_db()
    with pytest.raises(EnergyTooLow):
        _act(world, tools=["read"], domains=[])
    assert (run_count(), _energy(world.alpha), workspace_entries(workspaces)) == (0, 0.2, [])


def test_a_bad_parameter_creates_nothing_and_drains_nothing(world, workspaces):
    with pytest.raises(InvalidRunParams) as invalid:
        _act(world, tools=["read"], domains=[], max_iterations=51)
    assert invalid.value.details == {"field": "max_iterations"}
    assert (run_count(), _energy(world.alpha), workspace_entries(workspaces)) == (0, 1.0, [])


def test_oneshot_drains_its_cost_and_returns_the_output(world):
    result = core_act(
        principal=Principal.for_agent(world.alpha),
        agent=world.alpha,
        mode="oneshot",
        task="6 * 7",
        trigger="api",
    )
    assert (result["ok"], result["result"], result["error"]) == (True, "42", None)
    assert _energy(world.alpha) == pytest.approx(0.95)
    assert run_count() == 0


def test_oneshot_refuses_tools_and_a_long_timeout_without_draining(world):
    for kwargs in ({"tools": ["read"]}, {"timeout_s": 6}):
        with pytest.raises(InvalidRunParams):
            core_act(
                principal=Principal.for_agent(world.alpha),
                agent=world.alpha,
                mode="oneshot",
                task="1",
                trigger="api",
                **kwargs,
            )
    assert _energy(world.alpha) == 1.0


def test_a_skill_run_uses_its_credential_under_the_vault_spelling(
    world, workspaces, tmp_path, settings, scripted_llm
):
    # given an approved skill, its token in the skill policy and another value in the vault
    settings.MOTOR_CREDENTIAL_RESOLVER = "cognition.core.run_credentials_resolve"
    policy = skill_in_status(
        tmp_path / "src", agent=world.alpha, approver=world.olivia, status="approved"
    )
    policy_update(
        policy=policy,
        actor=Actor.system("test"),
        set_credentials={"WEATHER_TOKEN": "from-the-policy-9876"},
    )
    credential_set(agent=world.alpha, name="WEATHER_TOKEN", value="from-the-vault-1234", actor="t")
    run_id = _act(world, skill="weather-report", domains=[])["run_id"]
    program = "import os\nprint(len(os.environ['WEATHER_TOKEN']), os.environ['weather_token'])\n"
    scripted_llm.add(reply_tools(tool_call("code", {"code": program})), reply_text("done"))
    # when the run's code reads the variable
    drive(run_id, scripted_llm.client())
    # then it saw the policy's value (priority over the vault) and only the placeholder came back
    step = Step.objects.get(attempt__run_id=run_id)
    assert step.result["ok"] is True, step.result
    assert step.result["output"].strip().startswith(f"{len('from-the-policy-9876')} <credential:")
    assert "from-the-policy-9876" not in repr(scripted_llm.requests)
