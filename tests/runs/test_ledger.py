"""The loop's frequent fenced writes (runs.ledger): the same statements on PostgreSQL and SQLite.

bin/test runs this module on both databases. Each write leaves exactly the rows described, or,
for a stale token or a refused row, nothing at all.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connections, transaction
from django.utils import timezone

from runs.errors import LeaseLost
from runs.lease import Lease
from runs.ledger import (
    ledger_add_intent,
    ledger_claim,
    ledger_energy_level,
    ledger_insert,
    ledger_record_reply,
    ledger_record_result,
)
from runs.models import (
    Attempt,
    MotorRun,
    PendingWakeup,
    RunEvent,
    RunStatus,
    Step,
    StepState,
    new_run_id,
)
from runs.services import run_start
from tests.runs.helpers import new_workspace, snapshot

pytestmark = pytest.mark.django_db

REPLY = {
    "role": "assistant",
    "content": "reading ünïcode",
    "tool_calls": [{"id": "c1", "type": "function"}],
}
RESULT = {"ok": True, "output": "hello", "duration_ms": 7}
TOOL_MESSAGE = {"role": "tool", "tool_call_id": "c1", "content": "hello"}


def _started(agent: Any, **params: Any) -> str:
    return run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="t", **params)[
        "run_id"
    ]


def _claim(run_id: str, owner: str = "w", token: int | None = None) -> tuple[Lease, Any, Any]:
    claimed = ledger_claim(
        run_id=run_id, owner=owner, expected_token=token, actor=f"worker:{owner}"
    )
    assert claimed is not None
    return claimed


def _intent(attempt: Attempt, lease: Lease, call_index: int = 0) -> Step:
    return Step(
        attempt=attempt,
        iteration=attempt.iteration,
        call_index=call_index,
        tool_call_id=f"c{call_index + 1}",
        tool="read",
        arguments={"path": "notes.txt"},
        model="m",
        reasoning="reading",
        lease_token=lease.token,
    )


def _seconds_from_now(moment: Any) -> float:
    return float((moment - timezone.now()).total_seconds())


def test_an_iteration_writes_the_reply_with_its_call_then_the_result_and_the_release(agent):
    # given a claimed run
    run_id = _started(agent)
    lease, _, attempt = _claim(run_id, token=0)
    # when the model's reply is written with the intent of its call
    step = Step(
        attempt=attempt,
        iteration=attempt.iteration + 1,
        call_index=0,
        tool_call_id="c1",
        tool="read",
        arguments={"path": "notes.txt"},
        model="m",
        reasoning="reading",
        lease_token=lease.token,
    )
    ledger_record_reply(lease, attempt, REPLY, intent=step)
    # then the attempt holds the reply and counts the iteration, and the call's row is an intent
    stored = Attempt.objects.get(pk=attempt.pk)
    assert (stored.messages, stored.iteration) == ([{"role": "user", "content": "t"}, REPLY], 1)
    assert (attempt.messages, attempt.iteration) == (stored.messages, stored.iteration)
    intent = Step.objects.get(pk=step.pk)
    assert (intent.attempt_id, intent.iteration, intent.call_index, intent.tool_call_id) == (
        attempt.pk,
        1,
        0,
        "c1",
    )
    assert (intent.state, intent.result, intent.arguments, intent.lease_token) == (
        StepState.INTENT,
        None,
        {"path": "notes.txt"},
        lease.token,
    )
    assert intent.created_at is not None and intent.completed_at is None
    # when its result is written, ending the slice
    ledger_record_result(lease, attempt, step, RESULT, TOOL_MESSAGE, release=True)
    # then the call is done with its result, the attempt holds the tool message, and the lease
    # is free with the unfinished-slice count reset
    done = Step.objects.get(pk=step.pk)
    assert (done.state, done.result, done.duration_ms) == (StepState.DONE, RESULT, 7)
    assert done.completed_at == step.completed_at
    assert Attempt.objects.get(pk=attempt.pk).messages == [
        {"role": "user", "content": "t"},
        REPLY,
        TOOL_MESSAGE,
    ]
    assert attempt.messages[-1] == TOOL_MESSAGE
    run = MotorRun.objects.get(pk=run_id)
    assert (run.lease_token, run.lease_owner, run.lease_expires_at) == (lease.token, "", None)
    assert run.redelivery_count == 0
    assert abs(_seconds_from_now(run.idle_since)) < 60


def test_a_result_write_reads_the_energy_the_next_iteration_checks_once(agent, settings):
    # given a claimed run whose agent has 0.40 and does not regenerate, and the intent of a call
    settings.MOTOR_ENERGY_REGEN_PER_HOUR = 0.0
    run_id = _started(agent)
    type(agent).objects.filter(pk=agent.pk).update(energy=0.40, last_energy_at=timezone.now())
    lease, run, attempt = _claim(run_id, token=0)
    step = Step(
        attempt=attempt,
        iteration=1,
        call_index=0,
        tool_call_id="c1",
        tool="read",
        arguments={},
        lease_token=lease.token,
    )
    ledger_record_reply(lease, attempt, REPLY, intent=step)
    # when the call's result is written for a run that goes on to a charged iteration
    ledger_record_result(lease, attempt, step, RESULT, TOOL_MESSAGE, release=False, energy_of=run)
    # and the agent's energy changes afterwards
    type(agent).objects.filter(pk=agent.pk).update(energy=0.10)
    # then the next check takes the level that write read, and the one after reads again
    assert ledger_energy_level(agent.pk, run=run) == pytest.approx(0.40)
    assert ledger_energy_level(agent.pk, run=run) == pytest.approx(0.10)
    # and a write without `energy_of` leaves nothing for the check
    assert ledger_energy_level(agent.pk) == pytest.approx(0.10)


def test_a_write_renews_the_lease_in_database_time_and_resets_the_slice_count(agent, settings):
    # given a claimed run (one counted slice) whose lease is about to expire
    settings.MOTOR_LEASE_TTL_SECONDS = 600
    run_id = _started(agent)
    lease, run, attempt = _claim(run_id, token=0)
    assert run.redelivery_count == 1
    MotorRun.objects.filter(pk=run_id).update(
        lease_expires_at=timezone.now() + timedelta(seconds=1)
    )
    # when the slice writes a reply without a call, and then an intent
    ledger_record_reply(lease, attempt, {"role": "assistant", "content": "thinking"})
    after_reply = MotorRun.objects.get(pk=run_id)
    step = _intent(attempt, lease)
    ledger_add_intent(lease, step)
    # then each write renewed the lease for the TTL and reset the count; the intent is stored
    assert 590 < _seconds_from_now(after_reply.lease_expires_at) <= 600
    assert after_reply.redelivery_count == 0 and after_reply.lease_owner == "w"
    assert 590 < _seconds_from_now(MotorRun.objects.get(pk=run_id).lease_expires_at) <= 600
    assert Step.objects.get(pk=step.pk).state == StepState.INTENT
    assert Attempt.objects.get(pk=attempt.pk).iteration == 1


def test_a_stale_token_is_refused_and_nothing_changes(agent):
    # given a run whose lease moved on to a newer claim
    run_id = _started(agent)
    old, _, attempt = _claim(run_id)
    _claim(run_id)
    existing = Step.objects.create(
        attempt=attempt, iteration=0, call_index=1, tool_call_id="c2", tool="read", lease_token=2
    )
    before = snapshot(run_id)
    # when the old holder writes a reply (with and without a call), an intent or a result,
    # each is refused
    with pytest.raises(LeaseLost, match="is stale"):
        ledger_record_reply(old, attempt, REPLY)
    with pytest.raises(LeaseLost, match="is stale"):
        ledger_record_reply(old, attempt, REPLY, intent=_intent(attempt, old))
    with pytest.raises(LeaseLost, match="is stale"):
        ledger_add_intent(old, _intent(attempt, old))
    with pytest.raises(LeaseLost, match="is stale"):
        ledger_record_result(old, attempt, existing, RESULT, TOOL_MESSAGE, release=True)
    # then nothing changed: no message, no row, the newer lease still held
    assert snapshot(run_id) == before
    assert attempt.messages == [{"role": "user", "content": "t"}] and attempt.iteration == 0
    run = MotorRun.objects.get(pk=run_id)
    assert (run.lease_token, run.lease_owner) == (2, "w")
    assert run.lease_expires_at is not None


@pytest.mark.django_db(transaction=True)
def test_a_refused_row_undoes_the_whole_write(agent):
    # given a claimed run whose call at position 0 already has its row
    run_id = _started(agent)
    lease, _, attempt = _claim(run_id, token=0)
    ledger_add_intent(lease, _intent(attempt, lease))
    MotorRun.objects.filter(pk=run_id).update(
        lease_expires_at=timezone.now() + timedelta(seconds=5), redelivery_count=2
    )
    before = snapshot(run_id)
    # when a reply is written with an intent for the same position
    with pytest.raises(IntegrityError):
        ledger_record_reply(lease, attempt, REPLY, intent=_intent(attempt, lease))
    # then neither the reply nor the lease renewal happened, and the next write goes through
    assert snapshot(run_id) == before
    assert attempt.iteration == 0
    ledger_record_reply(lease, attempt, REPLY)
    assert Attempt.objects.get(pk=attempt.pk).iteration == 1


def test_claiming_a_new_run_starts_it_in_the_same_write(agent):
    # given a new run
    run_id = _started(agent)
    # when it is claimed for its first message
    lease, run, attempt = _claim(run_id, token=0)
    # then it is running under token 1 with one counted slice, its start audited once, and the
    # returned run and attempt are what the database holds
    stored = MotorRun.objects.get(pk=run_id)
    assert (lease.run_id, lease.token, lease.owner) == (run_id, 1, "w")
    assert (stored.status, stored.lease_token, stored.lease_owner) == (RunStatus.RUNNING, 1, "w")
    assert stored.redelivery_count == 1 and abs(_seconds_from_now(stored.started_at)) < 60
    for field in MotorRun._meta.concrete_fields:
        assert getattr(run, field.attname) == getattr(stored, field.attname), field.attname
    assert run._state.adding is False
    fresh = Attempt.objects.get(run_id=run_id)
    for field in Attempt._meta.concrete_fields:
        assert getattr(attempt, field.attname) == getattr(fresh, field.attname), field.attname
    assert attempt.messages == [{"role": "user", "content": "t"}]
    assert list(
        RunEvent.objects.filter(run_id=run_id)
        .order_by("id")
        .values_list("from_status", "to_status", "actor", "detail")
    ) == [("", "created", "t", {}), ("created", "running", "worker:w", {})]


def test_a_claim_for_a_served_message_or_a_live_lease_changes_nothing(agent):
    # given a run whose first message was served (token 1, lease live for another owner)
    run_id = _started(agent)
    _claim(run_id, owner="a", token=0)
    before = snapshot(run_id)
    # when another owner claims for the same message, or with no message at all
    assert ledger_claim(run_id=run_id, owner="b", expected_token=0, actor="worker:b") is None
    assert ledger_claim(run_id=run_id, owner="b", expected_token=None, actor="worker:b") is None
    # then nothing changed: no token, no audit row, no count
    assert snapshot(run_id) == before
    # and an unknown run is not claimed either
    assert ledger_claim(run_id=new_run_id(), owner="b", expected_token=0, actor="b") is None


def test_a_message_whose_slice_died_is_claimed_again_once_its_lease_expired(agent):
    # given a run whose first message was taken by a slice that died holding the lease
    run_id = _started(agent)
    _claim(run_id, owner="a", token=0)
    # when the same message comes again: refused while the lease lives, claimed once expired
    assert ledger_claim(run_id=run_id, owner="b", expected_token=0, actor="worker:b") is None
    MotorRun.objects.filter(pk=run_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    lease, run, _ = _claim(run_id, owner="b", token=0)
    # then the new slice holds token 2, counted as the second unfinished slice, and the run's
    # start is audited only once
    assert (lease.token, run.lease_owner, run.redelivery_count) == (2, "b", 2)
    assert RunEvent.objects.filter(run_id=run_id, to_status="running").count() == 1


def test_the_lease_never_outlives_the_runs_timeout(make_agent, settings):
    settings.MOTOR_LEASE_TTL_SECONDS = 120
    # given a run that may last 30 s and one that may last ten minutes
    short = _started(make_agent(), timeout_s=30)
    long = _started(make_agent(), timeout_s=600)
    # when both are claimed
    short_lease, short_run, _ = _claim(short, token=0)
    long_lease, long_run, _ = _claim(long, token=0)
    # then the short one's lease lives 30 s, the long one's the TTL, and so do their renewals
    assert short_lease.ttl == timedelta(seconds=30) and long_lease.ttl == timedelta(seconds=120)
    assert 20 < _seconds_from_now(short_run.lease_expires_at) <= 30
    assert 110 < _seconds_from_now(long_run.lease_expires_at) <= 120
    attempt = Attempt.objects.get(run_id=short)
    ledger_record_reply(short_lease, attempt, {"role": "assistant", "content": "x"})
    assert 20 < _seconds_from_now(MotorRun.objects.get(pk=short).lease_expires_at) <= 30


# --- a run's creation ----------------------------------------------------------------------------


def _unsaved_run(agent_id: int) -> tuple[MotorRun, Attempt, RunEvent]:
    run = MotorRun(id=new_run_id(), agent_id=agent_id, task="t", idle_since=timezone.now())
    attempt = Attempt(
        run=run, index=0, max_iterations=20, messages=[{"role": "user", "content": "t"}]
    )
    event = RunEvent(run=run, from_status="", to_status=run.status, actor="t", detail={})
    return run, attempt, event


def _rows_of(run_id: str) -> tuple[int, int, int]:
    return (
        MotorRun.objects.filter(pk=run_id).count(),
        Attempt.objects.filter(run_id=run_id).count(),
        RunEvent.objects.filter(run_id=run_id).count(),
    )


def _committed_runs(run_id: str) -> int:
    """How many rows of `run_id` another connection sees (only committed ones)."""
    other = connections.create_connection(DEFAULT_DB_ALIAS)
    try:
        with other.cursor() as cursor:
            cursor.execute(
                f"SELECT COUNT(*) FROM {MotorRun._meta.db_table} WHERE id = %s",  # noqa: S608
                [run_id],
            )
            return int(cursor.fetchone()[0])
    finally:
        other.close()


@pytest.mark.django_db(transaction=True)
def test_a_creation_is_announced_once_committed(agent):
    # given a new run, its attempt and its audit row
    run, attempt, event = _unsaved_run(agent.pk)
    seen: list[int] = []
    # when they are inserted with an announcement
    ledger_insert(
        run, attempt, event, announce=lambda: seen.append(_committed_runs(run.pk)) or True
    )
    # then all three exist, their ids set, and the announcement came once, after the commit
    assert seen == [1]
    assert _rows_of(run.pk) == (1, 1, 1)
    assert attempt.pk == Attempt.objects.get(run_id=run.pk).pk
    assert event.pk == RunEvent.objects.get(run_id=run.pk).pk
    assert not PendingWakeup.objects.filter(run_id=run.pk).exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("refusal", ["unknown agent", "agent busy"])
def test_a_refused_creation_writes_nothing_and_is_never_announced(make_agent, refusal):
    # given a creation the database refuses: its agent does not exist, or already has an
    # active run
    if refusal == "agent busy":
        busy = make_agent()
        _started(busy)
        agent_id = busy.pk
    else:
        agent_id = 987654
    run, attempt, event = _unsaved_run(agent_id)
    announced: list[str] = []
    # when it is inserted, then the database's refusal reaches the caller, nothing was written
    # and nothing announced
    with pytest.raises(IntegrityError):
        ledger_insert(run, attempt, event, announce=lambda: bool(announced.append(run.pk)) or True)
    assert announced == []
    assert _rows_of(run.pk) == (0, 0, 0)
    # and the connection goes on: the next creation succeeds
    ok, ok_attempt, ok_event = _unsaved_run(make_agent().pk)
    ledger_insert(ok, ok_attempt, ok_event)
    assert _rows_of(ok.pk) == (1, 1, 1)


def test_a_refused_creation_inside_a_transaction_leaves_that_transaction_usable(agent):
    # given a transaction in which the agent already has an active run
    _started(agent)
    run, attempt, event = _unsaved_run(agent.pk)
    with transaction.atomic():
        marker = RunEvent.objects.count()
        # when a second creation is refused there
        with pytest.raises(IntegrityError):
            ledger_insert(run, attempt, event)
        # then the transaction goes on without its rows
        assert RunEvent.objects.count() == marker
    assert _rows_of(run.pk) == (0, 0, 0)


@pytest.mark.django_db(transaction=True)
def test_an_announcement_the_broker_refuses_waits_in_the_outbox(agent):
    # given a creation whose announcement the broker refuses (False)
    run, attempt, event = _unsaved_run(agent.pk)
    # when it is inserted, then the run is created and its first wake-up waits in the outbox
    ledger_insert(run, attempt, event, announce=lambda: False)
    assert _rows_of(run.pk) == (1, 1, 1)
    assert list(PendingWakeup.objects.filter(run_id=run.pk).values_list("token", flat=True)) == [0]


@pytest.mark.django_db(transaction=True)
def test_an_announcement_that_fails_after_the_commit_leaves_the_run_created(agent, caplog):
    # given a creation whose announcement raises (a broker error nobody expected)
    run, attempt, event = _unsaved_run(agent.pk)

    def announce() -> bool:
        raise ConnectionError("broker unreachable")

    # when it is inserted, then the run is created all the same (the reaper wakes it), and
    # the error is logged
    ledger_insert(run, attempt, event, announce=announce)
    assert _rows_of(run.pk) == (1, 1, 1)
    assert "broker unreachable" in caplog.text
