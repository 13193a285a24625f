"""Phase 2 iteration ceiling: attempts of up to 50 iterations, kept in bounds by the rolling
summary; the database refuses more."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from runs.errors import InvalidRunParams
from runs.models import Attempt, MotorRun, RunStatus
from runs.services import run_start
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import drive, new_workspace

pytestmark = pytest.mark.django_db


def test_a_run_of_fifty_iterations_completes_with_the_oldest_rolled_into_the_system_prompt(
    agent, scripted_llm, settings
):
    # given a run capped at 50 iterations whose model makes 49 calls (refused: nothing granted,
    # three names in turn so no bailout) and then answers
    settings.MOTOR_SLICE_SECONDS = 600
    run_id = run_start(
        agent_id=agent.pk, task="Long", max_iterations=50, actor="test", workspace=new_workspace()
    )["run_id"]
    names = ("probe_a", "probe_b", "probe_c")
    scripted_llm.add(
        *(
            reply_tools(tool_call(names[n % 3], call_id=f"c{n + 1}"), text=f"step {n + 1}")
            for n in range(49)
        ),
        reply_text("All fifty done."),
    )
    # when the loop runs
    drive(run_id, scripted_llm.client())
    # then the run completed on its 50th iteration
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.max_iterations) == (RunStatus.COMPLETED, 50)
    assert Attempt.objects.get(run=run).iteration == 50
    assert len(scripted_llm.requests) == 50
    # and up to iteration 20 every message was sent; from the 21st call on, the oldest whole
    # blocks of ten were in the system prompt's digest instead, with ten to nineteen in full
    for number, request in enumerate(scripted_llm.requests, start=1):
        done = number - 1  # iterations recorded before this call
        rolled = max(0, (done - 10) // 10) * 10
        system = request["messages"][0]["content"]
        sent = [m for m in request["messages"][1:] if m["role"] == "assistant"]
        assert len(sent) == done - rolled, number
        if rolled:
            assert f"Iterations 1-{rolled} of this attempt" in system
            assert sent[0]["content"] == f"step {rolled + 1}"
        else:
            assert "<progress_summary>" not in system
    # the last call: iterations 1-30 in the digest; system, task and iterations 31-49 sent
    assert len(scripted_llm.requests[-1]["messages"]) == 1 + 1 + 2 * 19


@pytest.mark.parametrize("iterations", [0, 51])
def test_a_cap_outside_one_to_fifty_is_refused_and_nothing_is_created(agent, iterations):
    with pytest.raises(InvalidRunParams) as refused:
        run_start(
            agent_id=agent.pk,
            task="t",
            max_iterations=iterations,
            actor="test",
            workspace=new_workspace(),
        )
    assert str(refused.value) == f"max_iterations: {iterations} is outside 1..50"
    assert refused.value.details == {"field": "max_iterations"}
    assert MotorRun.objects.count() == 0


def test_the_database_holds_the_ceiling_of_fifty(agent):
    # given a run (default cap: 20)
    run_id = run_start(agent_id=agent.pk, task="t", actor="test", workspace=new_workspace())[
        "run_id"
    ]
    assert MotorRun.objects.get(pk=run_id).max_iterations == 20
    # when the caps are written directly: 50 is accepted, 51 is refused by a constraint
    assert MotorRun.objects.filter(pk=run_id).update(max_iterations=50) == 1
    assert Attempt.objects.filter(run_id=run_id).update(max_iterations=50) == 1
    for model, name in ((MotorRun, "motorrun"), (Attempt, "attempt")):
        field = "pk" if model is MotorRun else "run_id"
        with pytest.raises(IntegrityError, match=f"{name}_max_iterations_1_to_50"):
            with transaction.atomic():
                model.objects.filter(**{field: run_id}).update(max_iterations=51)
    assert MotorRun.objects.get(pk=run_id).max_iterations == 50
