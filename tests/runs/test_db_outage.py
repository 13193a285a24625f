"""The database connection fails under a slice (connections terminated, PostgreSQL unreachable):
the slice ends cleanly, its lease is released and the run goes on. And a lease never outlives
its run's own timeout."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from django.db import connection, transaction
from django.utils import timezone

from runs.lease import lease_fence
from runs.ledger import ledger_claim
from runs.models import MotorRun, RunStatus, Step
from runs.services import SliceOutcome, run_start, run_step
from tests.fixtures.llm import reply_text
from tests.runs.faults import (
    ConversationLLM,
    Processes,
    TcpProxy,
    counting_call,
    database_url,
    terminate_connections,
    wait_for,
)
from tests.runs.helpers import new_workspace


def _lease_left(run_id: str) -> timedelta:
    expires = MotorRun.objects.values_list("lease_expires_at", flat=True).get(pk=run_id)
    return expires - timezone.now()


@pytest.mark.django_db
def test_a_lease_never_outlives_its_runs_timeout(agent, make_agent, settings):
    # given leases of 900 s and a run that may last 60 s
    settings.MOTOR_LEASE_TTL_SECONDS = 900
    run_id = run_start(
        agent_id=agent.pk, task="t", timeout_s=60, actor="t", workspace=new_workspace()
    )["run_id"]
    # when a slice claims it (one statement) and renews it with a write
    lease, _, _ = ledger_claim(run_id=run_id, owner="w", expected_token=None, actor="t")
    claimed = _lease_left(run_id)
    with transaction.atomic():
        lease_fence(lease)
    # then neither the claim nor the renewal gives it more than the run's 60 s
    assert (timedelta(seconds=50) < claimed <= timedelta(seconds=60)) is True
    assert (timedelta(seconds=50) < _lease_left(run_id) <= timedelta(seconds=60)) is True
    assert lease.ttl == timedelta(seconds=60)
    # and a shorter run's claim gives no more either
    other = run_start(
        agent_id=make_agent().pk, task="t", timeout_s=30, actor="t", workspace=new_workspace()
    )["run_id"]
    assert ledger_claim(run_id=other, owner="w", expected_token=None, actor="t")[0].ttl == (
        timedelta(seconds=30)
    )
    assert (timedelta(seconds=20) < _lease_left(other) <= timedelta(seconds=30)) is True
    # while a run longer than the setting keeps the setting's lease
    settings.MOTOR_LEASE_TTL_SECONDS = 120
    third = run_start(
        agent_id=make_agent().pk, task="t", timeout_s=600, actor="t", workspace=new_workspace()
    )["run_id"]
    assert ledger_claim(run_id=third, owner="w", expected_token=None, actor="t")[0].ttl == (
        timedelta(seconds=120)
    )


def _terminate_every_other_connection() -> int:
    """pg_terminate_backend on every connection to this test's database but the killer's."""
    params = connection.settings_dict
    with psycopg.connect(
        dbname=params["NAME"],
        user=params.get("USER") or "postgres",
        host=params.get("HOST") or "127.0.0.1",
        port=int(params.get("PORT") or 5432),
        password=params.get("PASSWORD") or None,
        autocommit=True,
    ) as killer:
        row = killer.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.django_db(transaction=True)
def test_a_connection_terminated_during_the_llm_call_ends_the_slice_and_frees_the_lease(
    agent, scripted_llm
):
    # given a run whose first LLM answer comes after the database dropped every connection
    run_id = run_start(agent_id=agent.pk, task="Say hi", actor="t", workspace=new_workspace())[
        "run_id"
    ]
    terminated: list[int] = []
    script = scripted_llm.answer

    def answer_after_terminating(body):
        if not terminated:
            terminated.append(_terminate_every_other_connection())
        return script(body)

    scripted_llm.answer = answer_after_terminating
    scripted_llm.add(reply_text("lost"), reply_text("hi"))
    # when the slice runs, then it ends on the database error, cleanly
    outcome = run_step(run_id=run_id, client=scripted_llm.client(), owner="w")
    assert outcome is SliceOutcome.DATABASE_LOST
    assert terminated[0] >= 1
    # and the run goes on at once: still running, its lease released (not held for 900 s)
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.lease_expires_at, run.lease_owner) == (RunStatus.RUNNING, None, "")
    # and the next slice asks the model again (the lost reply was never recorded) and finishes
    assert run_step(run_id=run_id, client=scripted_llm.client(), owner="w2") is (
        SliceOutcome.FINISHED
    )
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.result["summary"]) == (RunStatus.COMPLETED, "hi")
    assert len(scripted_llm.requests) == 2


# --- real worker processes -----------------------------------------------------------------------


@pytest.fixture
def llm_stub_server():
    # each run's first answer takes 3 s: the faults below strike while a slice waits for it
    server = ConversationLLM(counting_call(4), first_delay_s=3).start()
    try:
        yield server
    finally:
        server.stop()


def _count_run(agent_id: int, workspace: Path) -> str:
    workspace.mkdir()
    return run_start(
        agent_id=agent_id, task="Count", tools=["code"], workspace=str(workspace), actor="t"
    )["run_id"]


def _status(run_id: str) -> str:
    return MotorRun.objects.values_list("status", flat=True).get(pk=run_id)


def _assert_counted_once(run_id: str, workspace: Path) -> None:
    assert (workspace / "count.txt").read_text() == "ran\n"
    step = Step.objects.get(attempt__run_id=run_id)
    assert (step.tool, step.state) == ("code", "done")
    run = MotorRun.objects.get(pk=run_id)
    assert (run.result["summary"], run.lease_expires_at) == ("Counted.", None)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("pool", "moment"),
    [("threads", "llm"), ("threads", "call"), ("prefork", "llm"), ("prefork", "call")],
)
def test_the_worker_connections_terminated_mid_step_do_not_hold_the_run(
    agent, llm_stub_server, processes: Processes, tmp_path: Path, pool: str, moment: str
):
    # given a worker whose connections are named, and a run whose model answers after 3 s
    # with a call that works 4 s
    broker = os.environ.get("CELERY_BROKER_URL") or os.environ["REDIS_URL"]
    worker = processes.worker(
        broker=broker,
        database=database_url(),
        pool=pool,
        concurrency=2,
        PGAPPNAME="mc-fault-worker",
    )
    workspace = tmp_path / "ws"
    run_id = _count_run(agent.pk, workspace)
    # when PostgreSQL terminates the worker's connections while it waits for the model, or
    # while the call runs
    if moment == "llm":
        wait_for(
            lambda: len(llm_stub_server.requests) == 1 and _status(run_id) == RunStatus.RUNNING,
            "the run claimed and its first LLM request sent",
        )
    else:
        wait_for(lambda: (workspace / "count.txt").exists(), "the call to run")
    assert terminate_connections("mc-fault-worker") >= 1
    # then the run completes long before any lease could lapse, the call having run once
    wait_for(lambda: _status(run_id) == RunStatus.COMPLETED, "completion", timeout_s=60)
    _assert_counted_once(run_id, workspace)
    assert worker.poll() is None


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_postgresql_unreachable_for_30_s_mid_step_does_not_lose_the_run(
    agent,
    llm_stub_server,
    processes: Processes,
    database_proxy: TcpProxy,
    tmp_path: Path,
    pool: str,
):
    # given a worker that reaches PostgreSQL only through a proxy the test controls
    broker = os.environ.get("CELERY_BROKER_URL") or os.environ["REDIS_URL"]
    worker = processes.worker(
        broker=broker, database=database_url(port=database_proxy.port), pool=pool, concurrency=2
    )
    workspace = tmp_path / "ws"
    run_id = _count_run(agent.pk, workspace)
    wait_for(
        lambda: len(llm_stub_server.requests) == 1 and _status(run_id) == RunStatus.RUNNING,
        "the run claimed and its first LLM request sent",
    )
    # when PostgreSQL is unreachable from the worker for 30 s from then on (the model's answer
    # comes in the middle of it)
    database_proxy.cut()
    time.sleep(30)
    assert _status(run_id) == RunStatus.RUNNING
    database_proxy.mend()
    # then the run completes soon after, the call having run once
    wait_for(lambda: _status(run_id) == RunStatus.COMPLETED, "completion", timeout_s=60)
    _assert_counted_once(run_id, workspace)
    assert worker.poll() is None
