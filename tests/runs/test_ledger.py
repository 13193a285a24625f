"""The loop's frequent fenced writes: one statement on PostgreSQL, the ORM transaction elsewhere.

Both forms must leave the same rows, and both must refuse a stale token having changed nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from runs.errors import LeaseLost
from runs.lease import lease_claim
from runs.ledger import ledger_add_intent, ledger_record_reply, ledger_record_result
from runs.models import Attempt, MotorRun, Step, StepState
from runs.services import run_start
from tests.runs.helpers import snapshot

pytestmark = pytest.mark.django_db

REPLY = {
    "role": "assistant",
    "content": "reading",
    "tool_calls": [{"id": "c1", "type": "function"}],
}
RESULT = {"ok": True, "output": "hello", "duration_ms": 7}
TOOL_MESSAGE = {"role": "tool", "tool_call_id": "c1", "content": "hello"}


def _iteration(agent: Any, *, single_statement: bool) -> tuple[str, dict[str, Any]]:
    """Reply, intent and result of one iteration through the ledger; the rows they left."""
    run_id = run_start(agent_id=agent.pk, task="t", actor="t")["run_id"]
    lease = lease_claim(run_id=run_id, owner="w")
    assert lease is not None
    attempt = Attempt.objects.get(run_id=run_id)
    ledger_record_reply(lease, attempt, REPLY, single_statement=single_statement)
    step = Step(
        attempt=attempt,
        iteration=attempt.iteration,
        call_index=0,
        tool_call_id="c1",
        tool="read",
        arguments={"path": "notes.txt"},
        model="m",
        reasoning="reading",
        lease_token=lease.token,
    )
    ledger_add_intent(lease, step, single_statement=single_statement)
    intent = Step.objects.get(pk=step.pk)
    assert (intent.state, intent.result, intent.arguments) == (
        StepState.INTENT,
        None,
        {"path": "notes.txt"},
    )
    ledger_record_result(
        lease, attempt, step, RESULT, TOOL_MESSAGE, release=True, single_statement=single_statement
    )
    # the in-memory copies are what the database now holds
    stored = Attempt.objects.get(pk=attempt.pk)
    assert (stored.messages, stored.iteration) == (attempt.messages, attempt.iteration)
    done = Step.objects.get(pk=step.pk)
    assert (done.state, done.result, done.duration_ms) == (step.state, step.result, 7)
    rows = snapshot(run_id)
    for key in ("id", "created_at", "idle_since", "lease_owner"):
        rows["run"].pop(key)
    for row in rows["attempts"] + rows["steps"]:
        for key in ("id", "run_id", "attempt_id", "started_at", "created_at", "completed_at"):
            row.pop(key, None)
    return run_id, rows


def test_both_forms_of_an_iteration_leave_the_same_rows(make_agent):
    # when the same iteration is written once per form
    _, single = _iteration(make_agent(), single_statement=True)
    _, orm = _iteration(make_agent(), single_statement=False)
    # then the rows are the same, apart from ids and times
    single["run"].pop("agent_id"), orm["run"].pop("agent_id")
    assert single == orm
    assert single["attempts"][0]["messages"][1:] == [REPLY, TOOL_MESSAGE]
    assert single["attempts"][0]["iteration"] == 1
    assert single["steps"][0]["state"] == StepState.DONE
    # and the release freed the lease and reset the unfinished-slice count
    assert (single["run"]["lease_expires_at"], single["run"]["redelivery_count"]) == (None, 0)


@pytest.mark.parametrize("single_statement", [True, False])
def test_a_stale_token_is_refused_and_nothing_changes(agent, single_statement):
    # given a run whose lease moved on to a newer claim
    run_id = run_start(agent_id=agent.pk, task="t", actor="t")["run_id"]
    old = lease_claim(run_id=run_id, owner="w")
    assert old is not None
    assert lease_claim(run_id=run_id, owner="w") is not None
    attempt = Attempt.objects.get(run_id=run_id)
    step = Step(attempt=attempt, iteration=0, call_index=0, tool_call_id="c1", tool="read")
    step.lease_token = old.token
    before = snapshot(run_id)
    # when the old holder writes a reply, an intent or a result, each is refused
    with pytest.raises(LeaseLost, match="is stale"):
        ledger_record_reply(old, attempt, REPLY, single_statement=single_statement)
    with pytest.raises(LeaseLost, match="is stale"):
        ledger_add_intent(old, step, single_statement=single_statement)
    existing = Step.objects.create(
        attempt=attempt, iteration=0, call_index=1, tool_call_id="c2", tool="read", lease_token=2
    )
    before = snapshot(run_id)
    with pytest.raises(LeaseLost, match="is stale"):
        ledger_record_result(
            old,
            attempt,
            existing,
            RESULT,
            TOOL_MESSAGE,
            release=True,
            single_statement=single_statement,
        )
    # then nothing changed: no message, no row, the newer lease still held
    assert snapshot(run_id) == before
    assert Attempt.objects.get(pk=attempt.pk).messages == [{"role": "user", "content": "t"}]
    assert Step.objects.get(pk=existing.pk).state == StepState.INTENT
    run = MotorRun.objects.get(pk=run_id)
    assert (run.lease_token, run.lease_owner) == (2, "w")
    assert run.lease_expires_at is not None
