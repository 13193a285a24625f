"""The loop's frequent fenced writes: one statement on PostgreSQL, the ORM transaction elsewhere.

Both forms must leave the same rows, and both must refuse a stale token having changed nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.db import IntegrityError, OperationalError, connection, connections
from django.utils import timezone

from runs.errors import LeaseLost
from runs.lease import lease_claim
from runs.ledger import (
    _claim_orm,
    ledger_add_intent,
    ledger_claim,
    ledger_insert,
    ledger_record_reply,
    ledger_record_result,
)
from runs.models import Attempt, MotorRun, RunEvent, Step, StepState, new_run_id
from runs.services import run_start
from tests.runs.helpers import new_workspace, snapshot

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
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="t")["run_id"]
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
    for key in ("id", "created_at", "idle_since", "lease_owner", "workspace"):
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
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="t")["run_id"]
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
    for key in (
        "id",
        "agent_id",
        "created_at",
        "started_at",
        "lease_expires_at",
        "idle_since",
        "workspace",
    ):
        run.pop(key)
    events = list(
        RunEvent.objects.filter(run_id=run_id).values_list("from_status", "to_status", "actor")
    )
    return {"run": run, "attempts": [a["messages"] for a in rows["attempts"]], "events": events}


def test_claiming_a_new_run_starts_it_in_the_same_write_in_both_forms(make_agent):
    # given two new runs
    one = run_start(workspace=new_workspace(), agent_id=make_agent().pk, task="t", actor="t")[
        "run_id"
    ]
    other = run_start(workspace=new_workspace(), agent_id=make_agent().pk, task="t", actor="t")[
        "run_id"
    ]
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
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="t")["run_id"]
    assert claim(run_id=run_id, owner="a", expected_token=0, actor="worker:a") is not None
    before = snapshot(run_id)
    # when another owner claims for the same message, or with no message at all
    assert claim(run_id=run_id, owner="b", expected_token=0, actor="worker:b") is None
    assert claim(run_id=run_id, owner="b", expected_token=None, actor="worker:b") is None
    # then nothing changed: no token, no audit row, no count
    assert snapshot(run_id) == before


# --- a run's creation, announced before its commit ---------------------------------------------


def _unsaved_run(agent_id: int) -> tuple[MotorRun, Attempt, RunEvent]:
    run = MotorRun(id=new_run_id(), agent_id=agent_id, task="t", idle_since=timezone.now())
    attempt = Attempt(
        run=run, index=0, max_iterations=20, messages=[{"role": "user", "content": "t"}]
    )
    event = RunEvent(run=run, from_status="", to_status=run.status, actor="t", detail={})
    return run, attempt, event


def _announce_to_a_worker(run_id: str, seen: dict[str, Any]) -> Callable[[], None]:
    """An announcement that starts a first claim in another thread (its own connection) and
    gives it time to reach the database before the creation goes on."""

    def claim() -> None:
        try:
            seen["claimed"] = ledger_claim(
                run_id=run_id, owner="w", expected_token=0, actor="worker:w"
            )
        finally:
            connections.close_all()

    def announce() -> None:
        seen["worker"] = threading.Thread(target=claim)
        seen["worker"].start()
        seen["worker"].join(timeout=0.5)
        seen["answered_before_commit"] = "claimed" in seen

    return announce


def _rows_of(run_id: str) -> tuple[int, int, int]:
    return (
        MotorRun.objects.filter(pk=run_id).count(),
        Attempt.objects.filter(run_id=run_id).count(),
        RunEvent.objects.filter(run_id=run_id).count(),
    )


@pytest.mark.django_db(transaction=True)
def test_a_first_claim_during_the_creation_waits_for_its_commit_and_starts_the_run(agent):
    # given a run whose first message reaches a worker before its rows are committed
    run, attempt, event = _unsaved_run(agent.pk)
    seen: dict[str, Any] = {}
    # when it is created, announcing itself while the worker claims it
    ledger_insert(run, attempt, event, announce=_announce_to_a_worker(run.pk, seen))
    seen["worker"].join(timeout=30)
    # then the claim did not answer while the creation was open, and then found and started it
    assert seen["answered_before_commit"] is False
    assert seen["claimed"] is not None
    lease, claimed_run, claimed_attempt = seen["claimed"]
    assert (lease.token, claimed_run.status, claimed_run.lease_owner) == (1, "running", "w")
    assert (claimed_attempt.run_id, claimed_attempt.index) == (run.pk, 0)
    assert MotorRun.objects.get(pk=run.pk).status == "running"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("refusal", ["unknown agent", "agent busy"])
def test_a_refused_creation_is_never_announced(make_agent, refusal):
    # given a creation the database refuses: its agent does not exist, or already has an
    # active run
    if refusal == "agent busy":
        agent = make_agent()
        run_start(workspace=new_workspace(), agent_id=agent.pk, task="first", actor="t")
        agent_id = agent.pk
    else:
        agent_id = 987654
    run, attempt, event = _unsaved_run(agent_id)
    announced: list[str] = []
    # when it is created, then it fails with the database's refusal before any announcement,
    # nothing was written, and the connection is usable and outside any transaction
    with pytest.raises(IntegrityError):
        ledger_insert(run, attempt, event, announce=lambda: announced.append(run.pk))
    assert announced == []
    assert _rows_of(run.pk) == (0, 0, 0)
    assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


@pytest.mark.django_db(transaction=True)
def test_a_creation_that_dies_after_its_announcement_leaves_nothing_for_the_worker(agent):
    # given a creation announced to a worker, whose database session then ends before the
    # commit (the creating process died or lost its connection)
    run, attempt, event = _unsaved_run(agent.pk)
    seen: dict[str, Any] = {}
    announce_to_worker = _announce_to_a_worker(run.pk, seen)
    creator = connection.connection.info.backend_pid

    def announce() -> None:
        announce_to_worker()
        with psycopg.connect(connection.connection.info.dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", [creator])

    # when it tries to commit, then it fails, the worker found nothing to claim, and nothing
    # was written
    with pytest.raises(OperationalError):
        ledger_insert(run, attempt, event, announce=announce)
    seen["worker"].join(timeout=30)
    assert seen["answered_before_commit"] is False
    assert seen["claimed"] is None
    connection.close()
    assert _rows_of(run.pk) == (0, 0, 0)


@pytest.mark.django_db(transaction=True)
def test_an_announcement_that_fails_creates_nothing(agent):
    # given a creation whose announcement cannot be sent (the broker is down)
    run, attempt, event = _unsaved_run(agent.pk)

    def announce() -> None:
        raise ConnectionError("broker unreachable")

    # when it is created, then the error reaches the caller and nothing was written
    with pytest.raises(ConnectionError, match="broker unreachable"):
        ledger_insert(run, attempt, event, announce=announce)
    assert _rows_of(run.pk) == (0, 0, 0)
    assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    # and the agent can start a run right away
    assert (
        run_start(workspace=new_workspace(), agent_id=agent.pk, task="again", actor="t")["status"]
        == "created"
    )
