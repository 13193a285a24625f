"""The broker (Redis) goes away while runs are in flight: real worker and beat processes on a
private redis-server that the test stops and starts again."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from runs.models import MotorRun, RunStatus, Step
from runs.services import run_start
from tests.runs.faults import (
    ConversationLLM,
    Processes,
    RedisServer,
    counting_call,
    database_url,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

#: how often the sweeps run in these tests, and how long an idle run waits before the reaper
#: wakes it, seconds (the defaults are a minute and two)
FAST_SWEEPS = {
    "MOTOR_REAPER_INTERVAL_SECONDS": "2",
    "MOTOR_REAPER_GRACE_SECONDS": "5",
    "MOTOR_WAKEUP_SWEEP_INTERVAL_SECONDS": "2",
    # one iteration per slice: every step of a run needs a message from the broker
    "MOTOR_SLICE_SECONDS": "0",
}


@pytest.fixture
def llm_stub_server():
    server = ConversationLLM(counting_call(4)).start()
    try:
        yield server
    finally:
        server.stop()


def _statuses(run_ids: list[str]) -> dict[str, str]:
    return dict(MotorRun.objects.filter(pk__in=run_ids).values_list("id", "status"))


@pytest.mark.parametrize(
    "private_redis", [False, True], ids=["no-persistence", "append-only"], indirect=True
)
@pytest.mark.parametrize("outage_s", [10, 120], ids=["10s", "2min"])
def test_a_broker_outage_with_runs_in_flight_loses_no_run_and_runs_no_call_twice(
    make_agent,
    broker_is_private_redis: RedisServer,
    processes: Processes,
    tmp_path: Path,
    outage_s: int,
):
    # given a worker and beat on a private Redis, and four runs whose one call each appends a
    # line to its workspace's count.txt and then works for 4 s
    broker = broker_is_private_redis
    worker = processes.worker(broker=broker.url, database=database_url(), **FAST_SWEEPS)
    beat = processes.beat(broker=broker.url, database=database_url(), **FAST_SWEEPS)
    workspaces = [tmp_path / f"ws{i}" for i in range(4)]
    run_ids = []
    for workspace in workspaces:
        workspace.mkdir()
        run_ids.append(
            run_start(
                agent_id=make_agent().pk,
                task="Count",
                tools=["code"],
                workspace=str(workspace),
                actor="t",
            )["run_id"]
        )
    wait_for(
        lambda: all((w / "count.txt").exists() for w in workspaces), "every call to be running"
    )
    # when Redis goes away while the calls run, for `outage_s` seconds
    broker.stop()
    time.sleep(outage_s)
    broker.start()
    # then every run completes, each call having run exactly once
    wait_for(
        lambda: set(_statuses(run_ids).values()) == {RunStatus.COMPLETED},
        f"every run to complete (now {_statuses(run_ids)})",
        timeout_s=120,
    )
    assert [(w / "count.txt").read_text() for w in workspaces] == ["ran\n"] * 4
    steps = Step.objects.filter(attempt__run_id__in=run_ids)
    assert sorted(steps.values_list("tool", "state", "result__ok")) == [("code", "done", True)] * 4
    summaries = MotorRun.objects.filter(pk__in=run_ids).values_list("result__summary", flat=True)
    assert list(summaries) == ["Counted."] * 4
    # and the worker and beat processes lived through it
    assert (worker.poll(), beat.poll()) == (None, None), processes.log_text()[-4000:]
