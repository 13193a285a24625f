"""One active run per agent: Redis fast path, PostgreSQL authority, under real concurrency."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from runs.errors import MotorBusy
from runs.models import ACTIVE_STATUSES, MotorRun, RunStatus
from runs.mutex import mutex_key
from runs.services import run_cancel, run_start
from tests.runs.helpers import new_workspace

pytestmark = pytest.mark.django_db(transaction=True)

BUSY = "Motor Cortex is busy (run_id: {}). Wait for it to complete or cancel it via core.task."


def _start_many(agent_id: int, count: int) -> list[tuple[str, str]]:
    """`count` threads, each with its own DB connection, call run_start at the same moment."""
    barrier = threading.Barrier(count)
    results: list[tuple[str, str]] = []
    lock = threading.Lock()

    def start() -> None:
        try:
            barrier.wait()
            try:
                outcome = (
                    "started",
                    run_start(workspace=new_workspace(), agent_id=agent_id, task="t", actor="t")[
                        "run_id"
                    ],
                )
            except MotorBusy as exc:
                outcome = ("busy", str(exc))
            with lock:
                results.append(outcome)
        finally:
            connection.close()

    threads = [threading.Thread(target=start) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_fifty_concurrent_starts_create_one_run_and_49_busy_errors_naming_it(agent, test_redis):
    # when 50 starts race for one agent
    results = _start_many(agent.pk, 50)
    # then exactly one run exists, and every other start was told which run holds the agent
    started = [value for kind, value in results if kind == "started"]
    busy = [value for kind, value in results if kind == "busy"]
    assert len(started) == 1
    assert MotorRun.objects.filter(agent=agent).count() == 1
    assert busy == [BUSY.format(started[0])] * 49
    assert test_redis.get(mutex_key(agent.pk)) == started[0].encode()


def test_after_a_redis_flush_the_database_still_allows_one_active_run(agent, test_redis):
    # given an active run, and then Redis loses every key (FLUSHDB of the test database only)
    first = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="t")["run_id"]
    test_redis.flushdb()
    assert test_redis.get(mutex_key(agent.pk)) is None
    # when 10 more starts race
    results = _start_many(agent.pk, 10)
    # then the database refused every one of them, naming the active run
    assert results == [("busy", BUSY.format(first))] * 10
    assert list(
        MotorRun.objects.filter(agent=agent, status__in=ACTIVE_STATUSES).values_list(
            "id", flat=True
        )
    ) == [first]
    # and the fast path was repaired from the database
    assert test_redis.get(mutex_key(agent.pk)) == first.encode()


def test_a_stale_key_of_a_finished_run_does_not_block_the_agent(agent, test_redis):
    # given a finished run whose key is still in Redis (its release was lost)
    first = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="t")["run_id"]
    run_cancel(run_id=first, actor="t")
    test_redis.set(mutex_key(agent.pk), first)
    # when a new run starts
    second = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t2", actor="t")["run_id"]
    # then it starts, and the key names it
    assert MotorRun.objects.get(pk=second).status == RunStatus.CREATED
    assert test_redis.get(mutex_key(agent.pk)) == second.encode()


def test_terminal_states_release_the_mutex_and_another_agent_is_never_blocked(
    make_agent, test_redis
):
    # given two agents, one with an active run
    busy_agent, free_agent = make_agent(), make_agent()
    first = run_start(workspace=new_workspace(), agent_id=busy_agent.pk, task="t", actor="t")[
        "run_id"
    ]
    # when the other agent starts, it is not affected
    other = run_start(workspace=new_workspace(), agent_id=free_agent.pk, task="t", actor="t")[
        "run_id"
    ]
    assert MotorRun.objects.get(pk=other).status == RunStatus.CREATED
    # and when the first run is cancelled, its key is gone and the agent can start again
    run_cancel(run_id=first, actor="t")
    assert test_redis.get(mutex_key(busy_agent.pk)) is None
    again = run_start(workspace=new_workspace(), agent_id=busy_agent.pk, task="t", actor="t")[
        "run_id"
    ]
    assert MotorRun.objects.get(pk=again).status == RunStatus.CREATED
