"""Run accounting that is true: the energy a run reports is the energy its agent lost (base at the
start, each iteration past the free ones as its reply is recorded), an agent out of energy stops
its run with a clear outcome, and each attempt and run counts its LLM calls, tool calls and the
tokens the model reported, in the result, the signal, the API and the admin."""
# ruff: noqa: F811 - pytest fixtures imported from core_support are parameters here

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.urls import reverse
from django.utils import timezone

from cognition.core_act import core_act
from cognition.core_task import core_task
from cognition.energy import energy_drain
from cognition.models import Agent
from cognition.principals import Principal
from runs.accounting import EnergyRates, energy_rates
from runs.models import Attempt, MotorRun, RunStatus, Signal
from runs.services import SliceOutcome
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import drive
from tests.skills.admin_support import make_user

from .conftest import World, bearer
from .core_support import _clean_mutex_keys, workspaces  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db


def _energy(agent: Agent) -> float:
    return Agent.objects.get(pk=agent.pk).energy


def _used(body: dict[str, Any], prompt: int, completion: int) -> dict[str, Any]:
    """`body` with the usage a real model reports."""
    return {
        **body,
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def _listing(n: int) -> dict[str, Any]:
    return _used(reply_tools(tool_call("list", {}, call_id=f"l{n}")), 100 + n, 10)


def _start(world: World, **kwargs: Any) -> str:
    params: dict[str, Any] = {
        "mode": "agentic",
        "task": "List the files",
        "tools": ["list"],
        "trigger": "api",
    }
    params.update(kwargs)
    result = core_act(principal=Principal.for_agent(world.alpha), agent=world.alpha, **params)
    return str(result["run_id"])


@pytest.fixture
def no_regen(settings) -> None:
    settings.MOTOR_ENERGY_REGEN_PER_HOUR = 0.0


def test_a_run_reports_exactly_what_its_agent_lost(world, workspaces, scripted_llm, no_regen):
    # given an agent at full energy and a model that lists six times, then answers
    run_id = _start(world)
    assert _energy(world.alpha) == pytest.approx(0.90)  # the base, taken at the start
    scripted_llm.add(*(_listing(n) for n in range(1, 7)), _used(reply_text("six files"), 200, 20))

    # when the run goes to its end
    assert drive(run_id, scripted_llm.client())[-1] is SliceOutcome.FINISHED

    # then 7 iterations cost base 0.10 + (7 - 5) × 0.01, and exactly that left the agent
    run = MotorRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED
    assert (run.iterations, run.energy_cost) == (7, pytest.approx(0.12))
    assert _energy(world.alpha) == pytest.approx(0.88)
    stats = run.result["stats"]
    assert stats["energy_cost"] == pytest.approx(0.12)
    assert 1.0 - _energy(world.alpha) == pytest.approx(stats["energy_cost"])
    # and the totals count every LLM call, tool call and reported token
    prompt = sum(100 + n for n in range(1, 7)) + 200
    expected = {
        "iterations": 7,
        "errors": 0,
        "llm_calls": 7,
        "tool_calls": 6,
        "prompt_tokens": prompt,
        "completion_tokens": 80,
        "total_tokens": prompt + 80,
    }
    assert {key: stats[key] for key in expected} == expected
    assert stats["attempts"] == [
        {
            "index": 0,
            "iterations": 7,
            "llm_calls": 7,
            "tool_calls": 6,
            "tool_errors": 0,
            "prompt_tokens": prompt,
            "completion_tokens": 80,
            "total_tokens": prompt + 80,
            "energy_cost": pytest.approx(0.02),
        }
    ]
    # and the closing signal carries the same numbers
    signal = Signal.objects.get(run_id=run_id, payload__status="completed")
    assert signal.payload["result"]["stats"] == stats


def test_the_first_free_iterations_cost_nothing_beyond_the_base(
    world, workspaces, scripted_llm, no_regen
):
    run_id = _start(world)
    scripted_llm.add(*(_listing(n) for n in range(1, 5)), reply_text("done"))

    drive(run_id, scripted_llm.client())

    run = MotorRun.objects.get(pk=run_id)
    assert (run.iterations, run.energy_cost, run.result["stats"]["energy_cost"]) == (
        5,
        pytest.approx(0.10),
        pytest.approx(0.10),
    )
    assert _energy(world.alpha) == pytest.approx(0.90)


def test_an_agent_out_of_energy_mid_run_stops_before_asking_the_model(
    world, workspaces, scripted_llm, no_regen, settings
):
    # given an agent at 0.40 and rates where one free iteration is followed by 0.15 each
    settings.MOTOR_ENERGY_AGENTIC_FREE_ITERATIONS = 1
    settings.MOTOR_ENERGY_AGENTIC_PER_ITERATION = 0.15
    Agent.objects.filter(pk=world.alpha.pk).update(energy=0.40, last_energy_at=timezone.now())
    run_id = _start(world)  # base 0.10: 0.30 left
    scripted_llm.add(*(_listing(n) for n in range(1, 5)), reply_text("done"))

    # when the run goes on
    drive(run_id, scripted_llm.client())

    # then iteration 2 (0.15) and 3 (0.15) were paid, iteration 4 could not be: the model was
    # asked three times, and the run failed saying why
    assert len(scripted_llm.requests) == 3
    run = MotorRun.objects.get(pk=run_id)
    assert run.status == RunStatus.FAILED
    assert (run.iterations, run.energy_cost) == (3, pytest.approx(0.40))
    assert _energy(world.alpha) == pytest.approx(0.0)
    failure = run.result["failure"]
    assert failure["category"] == "budget_exhausted"
    assert failure["message"] == (
        "out of energy: iteration 4 costs 0.15 and the agent has 0 (this run: base 0.1, 1 "
        "iterations included, then 0.15 each; it took 0.4 so far). Energy regenerates over "
        "time; a staff user can restore it."
    )
    assert run.result["stats"]["energy_cost"] == pytest.approx(0.40)
    signal = Signal.objects.get(run_id=run_id, payload__status="failed")
    assert signal.payload["failure"]["message"] == failure["message"]


def test_a_retry_counts_on_from_the_runs_iterations(world, workspaces, scripted_llm, no_regen):
    # given a run whose first attempt used 5 iterations and failed at its iteration cap
    run_id = _start(world, max_iterations=5)
    scripted_llm.add(*(_listing(n) for n in range(1, 6)))
    drive(run_id, scripted_llm.client())
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.FAILED
    # when it is retried and the second attempt answers after one more listing
    core_task(
        principal=Principal.for_agent(world.alpha),
        agent=world.alpha,
        action="retry",
        run_id=run_id,
        guidance="stop after one listing",
        trigger="api",
    )
    scripted_llm.add(_listing(6), _used(reply_text("done"), 50, 5))
    drive(run_id, scripted_llm.client())

    # then iterations 6 and 7 of the run were paid, and each attempt has its own numbers
    run = MotorRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED
    assert (run.iterations, run.energy_cost) == (7, pytest.approx(0.12))
    assert _energy(world.alpha) == pytest.approx(0.88)
    attempts = run.result["stats"]["attempts"]
    assert [(a["index"], a["llm_calls"], a["tool_calls"]) for a in attempts] == [
        (0, 5, 5),
        (1, 2, 1),
    ]
    assert [a["energy_cost"] for a in attempts] == [0.0, pytest.approx(0.02)]
    assert (run.result["stats"]["llm_calls"], run.result["stats"]["tool_calls"]) == (7, 6)
    assert Attempt.objects.get(run_id=run_id, index=1).completion_tokens == 15


def test_the_rates_of_each_mode(settings) -> None:
    assert energy_rates(mode="oneshot") == EnergyRates(0.05, 0, 0.0)
    assert energy_rates(mode="agentic", tools=["code", "bash"]) == EnergyRates(0.10, 5, 0.01)
    assert energy_rates(mode="agentic", tools=["code", "browser"]) == EnergyRates(0.20, 5, 0.02)
    rates = EnergyRates(0.20, 5, 0.02)
    assert [rates.total(n) for n in (0, 5, 6, 10)] == [0.2, 0.2, 0.22, 0.3]


def test_a_browser_run_starts_at_its_own_base(world, no_regen) -> None:
    drained = energy_drain(agent=world.alpha, mode="agentic", tools=["browser"])
    assert drained.energy == pytest.approx(0.80)


def test_the_api_and_the_admin_show_the_runs_usage(
    world, workspaces, scripted_llm, no_regen, client
):
    # given a finished run of six iterations
    run_id = _start(world)
    scripted_llm.add(*(_listing(n) for n in range(1, 6)), _used(reply_text("done"), 7, 3))
    drive(run_id, scripted_llm.client())
    prompt = sum(100 + n for n in range(1, 6)) + 7

    # when its owner reads it through the API
    detail = bearer(world.alpha_token).get(f"/api/v1/runs/{run_id}/").json()

    # then the usage is there, the run's and each attempt's
    usage = detail["usage"]
    assert {k: v for k, v in usage.items() if k != "attempts"} == {
        "iterations": 6,
        "llm_calls": 6,
        "tool_calls": 5,
        "tool_errors": 0,
        "prompt_tokens": prompt,
        "completion_tokens": 53,
        "total_tokens": prompt + 53,
        "energy_cost": pytest.approx(0.11),
    }
    assert [(a["index"], a["llm_calls"], a["energy_cost"]) for a in usage["attempts"]] == [
        (0, 6, pytest.approx(0.01))
    ]
    # and the admin's run page shows the same totals
    client.force_login(make_user("root", superuser=True))
    page = client.get(reverse("admin:runs_motorrun_change", args=[quote(run_id)])).content.decode()
    footer = page[page.index('id="run-usage"') :]
    footer = footer[: footer.index("</tfoot>")]
    assert f"{prompt} + 53 = {prompt + 53}" in footer
    assert "<td>6</td><td>6</td><td>5</td>" in footer
    assert "0.11" in footer


def test_an_iterations_charge_starts_from_the_regenerated_level(
    world, workspaces, scripted_llm, settings
):
    # given regeneration of 0.1 per hour, an agent left at 0.5 an hour ago, every iteration paid
    settings.MOTOR_ENERGY_REGEN_PER_HOUR = 0.1
    settings.MOTOR_ENERGY_AGENTIC_FREE_ITERATIONS = 0
    settings.MOTOR_ENERGY_AGENTIC_PER_ITERATION = 0.01
    run_id = _start(world)
    an_hour_ago = timezone.now() - timedelta(hours=1)
    Agent.objects.filter(pk=world.alpha.pk).update(energy=0.5, last_energy_at=an_hour_ago)
    scripted_llm.add(reply_text("done"))

    # when the run's one iteration is recorded
    drive(run_id, scripted_llm.client())

    # then the database took 0.01 from 0.5 + 0.1 × 1 h and stamped the time of the charge
    agent = Agent.objects.get(pk=world.alpha.pk)
    assert agent.energy == pytest.approx(0.59, abs=1e-3)
    assert timezone.now() - agent.last_energy_at < timedelta(minutes=1)
    assert MotorRun.objects.get(pk=run_id).energy_cost == pytest.approx(0.11)
