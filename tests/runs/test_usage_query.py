"""The run's usage query: the compiled form the finishing code runs answers as the ORM does."""

from __future__ import annotations

import pytest

from runs.accounting import _usage_query, _usage_rows, attempts_usage
from runs.layer_step import INSTALL_TOOL
from runs.models import Attempt, Step, StepState
from runs.services import run_start

pytestmark = pytest.mark.django_db


def _step(attempt: Attempt, index: int, tool: str, state: str, ok: bool | None) -> None:
    Step.objects.create(
        attempt=attempt,
        iteration=1,
        call_index=index,
        tool_call_id=f"c{attempt.index}-{index}",
        tool=tool,
        arguments={},
        state=state,
        result={} if ok is None else {"ok": ok, "output": ""},
        lease_token=1,
    )


def test_the_compiled_usage_query_answers_as_the_orm_for_each_run(make_agent, tmp_path):
    # given two runs, the first with two attempts whose steps succeeded, failed, are still
    # intents or installed dependencies, and the second with no step
    runs = []
    for _ in range(2):
        workspace = tmp_path / f"ws{len(runs)}"
        workspace.mkdir()
        runs.append(
            run_start(
                agent_id=make_agent().pk,
                task="t",
                tools=["read"],
                workspace=str(workspace),
                actor="t",
            )["run_id"]
        )
    first = Attempt.objects.get(run_id=runs[0])
    Attempt.objects.filter(pk=first.pk).update(
        iteration=3, llm_calls=4, prompt_tokens=100, completion_tokens=7, energy_cost=0.35
    )
    second = Attempt.objects.create(run_id=runs[0], index=1, iteration=1, llm_calls=1)
    _step(first, 0, "read", StepState.DONE, True)
    _step(first, 1, "read", StepState.DONE, False)
    _step(first, 2, INSTALL_TOOL, StepState.DONE, False)
    _step(first, 3, "read", StepState.INTENT, None)
    _step(second, 0, "read", StepState.DONE, False)
    for run_id in runs:
        # when its usage is read through the compiled query
        rows = _usage_rows(run_id)
        # then it is what the ORM query returns
        assert rows == list(_usage_query(run_id))
    usage = attempts_usage(runs[0])
    assert usage[0] == {
        "iterations": 3,
        "llm_calls": 4,
        "tool_calls": 3,
        "tool_errors": 1,
        "prompt_tokens": 100,
        "completion_tokens": 7,
        "total_tokens": 107,
        "energy_cost": 0.35,
    }
    assert (usage[1]["tool_calls"], usage[1]["tool_errors"]) == (1, 1)
