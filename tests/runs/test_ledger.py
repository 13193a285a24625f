"""The loop's frequent fenced writes: one statement on PostgreSQL, the ORM transaction elsewhere.

Both forms must leave the same rows, and both must refuse a stale token having changed nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from runs.errors import LeaseLost
from runs.lease import lease_claim
from runs.ledger import (
    _claim_orm,
    ledger_add_intent,
    ledger_claim,
    ledger_record_reply,
    ledger_record_result,
)
from runs.models import Attempt, MotorRun, RunEvent, Step, StepState
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


def _claimed_rows(run_id: str) -> dict[str, Any]:
    rows = snapshot(run_id)
    run = rows["run"]
    for key in ("id", "agent_id", "created_at", "started_at", "lease_expires_at", "idle_since"):
        run.pop(key)
    events = list(
        RunEvent.objects.filter(run_id=run_id).values_list("from_status", "to_status", "actor")
    )
    return {"run": run, "attempts": [a["messages"] for a in rows["attempts"]], "events": events}


def test_claiming_a_new_run_starts_it_in_the_same_write_in_both_forms(make_agent):
    # given two new runs
    one = run_start(agent_id=make_agent().pk, task="t", actor="t")["run_id"]
    other = run_start(agent_id=make_agent().pk, task="t", actor="t")["run_id"]
    # when each is claimed for its first message, once per form
    single = ledger_claim(run_id=one, owner="w", expected_token=0, actor="worker:w")
    orm = _claim_orm(run_id=other, owner="w", expected_token=0, actor="worker:w")
    # then both are running under token 1 with one counted slice, their start audited once,
    # and the returned rows are what the database holds
    assert single is not None and orm is not None
    for lease, run, attempt in (single, orm):
        stored = MotorRun.objects.get(pk=run.pk)
        assert (lease.token, run.status, run.lease_owner) == (1, "running", "w")
        assert (stored.status, stored.started_at, stored.lease_token) == (
            run.status,
            run.started_at,
            run.lease_token,
        )
        assert stored.redelivery_count == run.redelivery_count == 1
        assert attempt == Attempt.objects.get(run=run) and attempt.messages == [
            {"role": "user", "content": "t"}
        ]
    assert _claimed_rows(one) == _claimed_rows(other)
    assert _claimed_rows(one)["events"] == [
        ("", "created", "t"),
        ("created", "running", "worker:w"),
    ]


@pytest.mark.parametrize("single_statement", [True, False])
def test_a_claim_for_a_served_message_or_a_live_lease_changes_nothing(agent, single_statement):
    claim = ledger_claim if single_statement else _claim_orm
    # given a run whose first message was served (token 1, lease live for another owner)
    run_id = run_start(agent_id=agent.pk, task="t", actor="t")["run_id"]
    assert claim(run_id=run_id, owner="a", expected_token=0, actor="worker:a") is not None
    before = snapshot(run_id)
    # when another owner claims for the same message, or with no message at all
    assert claim(run_id=run_id, owner="b", expected_token=0, actor="worker:b") is None
    assert claim(run_id=run_id, owner="b", expected_token=None, actor="worker:b") is None
    # then nothing changed: no token, no audit row, no count
    assert snapshot(run_id) == before
