"""A run started while the broker (Redis) is unreachable: created at once, with its first
wake-up in the outbox, and run as soon as the broker is back. Real worker and beat processes on
a private redis-server that the test stops and starts."""
# ruff: noqa: F811 - pytest fixtures imported from the support modules are parameters here

from __future__ import annotations

from pathlib import Path

import pytest

from cognition.models import Agent
from runs.models import MotorRun, PendingWakeup, RunStatus
from runs.services import run_start
from runs.wakeups import wakeups_send_pending
from tests.fixtures.llm import reply_text
from tests.runs.faults import (  # noqa: F401 - fixtures
    Processes,
    RedisServer,
    broker_is_private_redis,
    database_url,
    private_redis,
    processes,
    wait_for,
)

from .conftest import World, bearer
from .core_support import _clean_mutex_keys, workspaces  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db(transaction=True)

BODY = {"task": "Say done", "tools": ["read"], "domains": []}


def _queued(broker: RedisServer) -> int:
    return int(broker.client().llen("celery"))


def test_a_run_started_while_the_broker_is_down_is_created_and_its_wake_up_kept(
    world: World, broker_is_private_redis: RedisServer, tmp_path: Path
):
    # given an unreachable broker
    broker = broker_is_private_redis
    broker.stop()
    # when a run starts (outside any transaction: announced once committed)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run_id = run_start(agent_id=world.alpha.pk, task="Wait", workspace=str(workspace), actor="t")[
        "run_id"
    ]
    # then the run is created, its first wake-up kept in the outbox in the same commit
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.CREATED
    assert list(PendingWakeup.objects.values_list("run_id", "token")) == [(run_id, 0)]
    # and a sweep while the broker is still down sends nothing and keeps it
    assert wakeups_send_pending() == 0
    assert PendingWakeup.objects.count() == 1
    # when the broker is back, the next sweep sends it and empties the outbox
    broker.start()
    assert wakeups_send_pending() == 1
    assert (PendingWakeup.objects.count(), _queued(broker)) == (0, 1)


@pytest.mark.slow
def test_an_api_start_during_a_broker_outage_answers_201_and_runs_once_the_broker_is_back(
    world: World,
    workspaces: Path,
    broker_is_private_redis: RedisServer,
    processes: Processes,
    llm_stub_server,
):
    # given an unreachable broker, and no worker yet
    broker = broker_is_private_redis
    broker.stop()
    llm_stub_server.add(reply_text("Done."))
    # when the agent starts a run through the API
    response = bearer(world.alpha_token).post("/api/v1/runs/", BODY, format="json")
    # then it is created (not 500), charged once, its workspace kept, its wake-up in the outbox
    assert response.status_code == 201, response.content
    run_id = response.json()["run_id"]
    assert response.json() == {"run_id": run_id, "status": "created"}
    run = MotorRun.objects.get(pk=run_id)
    assert run.status == RunStatus.CREATED
    assert Path(run.workspace).is_dir()
    assert Agent.objects.get(pk=world.alpha.pk).energy == pytest.approx(0.90)
    assert list(PendingWakeup.objects.values_list("run_id", "token")) == [(run_id, 0)]
    # when the broker comes back with a worker and beat (the outbox swept every 2 s)
    broker.start()
    env = {"MOTOR_WAKEUP_SWEEP_INTERVAL_SECONDS": "2", "MOTOR_WORKSPACES_DIR": str(workspaces)}
    processes.worker(broker=broker.url, database=database_url(), **env)
    processes.beat(broker=broker.url, database=database_url(), **env)
    # then the run is sent and completes, once, and the outbox is empty
    wait_for(lambda: MotorRun.objects.get(pk=run_id).status == RunStatus.COMPLETED, "completion")
    assert MotorRun.objects.get(pk=run_id).result["summary"] == "Done."
    assert len(llm_stub_server.requests) == 1
    assert PendingWakeup.objects.count() == 0
    assert MotorRun.objects.filter(agent=world.alpha).count() == 1
    assert Agent.objects.get(pk=world.alpha.pk).energy == pytest.approx(0.90, abs=0.01)
