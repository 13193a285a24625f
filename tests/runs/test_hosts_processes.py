"""Two worker hosts on this machine (own data dirs, host ids and queues; real worker processes):
a run whose host is SIGKILLed mid-run and never restarted completes on the other host with its
workspace intact, and the first host, back later, does not touch it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from celery import current_app

from runs.host_models import RunPlacement
from runs.models import MotorRun, RunStatus, Step
from runs.reaper import run_reap
from runs.services import run_start
from runs.snapshots import workspace_manifest
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.test_snapshots import s3  # noqa: F401 - fixture
from tests.runs.test_worker_process import start_worker  # noqa: F401 - fixture

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

APPEND = "with open('count.txt', 'a') as f:\n    f.write('ran\\n')\n"


def _wait_for(predicate, what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_run_moves_to_the_surviving_host_and_the_returning_host_leaves_it_alone(
    agent,
    llm_stub_server,
    start_worker,  # noqa: F811 - the imported fixture
    s3,  # noqa: F811 - the imported fixture
    settings,
    tmp_path: Path,
) -> None:
    root_a, root_b = tmp_path / "host-a", tmp_path / "host-b"
    root_a.mkdir()
    root_b.mkdir()
    settings.MOTOR_WORKSPACES_DIR = root_a
    settings.MOTOR_HOST_GRACE_SECONDS = 2
    settings.MOTOR_RUN_QUEUE = ""
    hosts = {
        "MOTOR_MULTI_HOST": "true",
        "MOTOR_HOST_HEARTBEAT_SECONDS": "0.5",
        "MOTOR_HOST_GRACE_SECONDS": "2",
        "MOTOR_SNAPSHOT_STORAGE_URL": settings.MOTOR_SNAPSHOT_STORAGE_URL,
        "MOTOR_SNAPSHOT_S3_ENDPOINT_URL": settings.MOTOR_SNAPSHOT_S3_ENDPOINT_URL,
    }

    def host(name: str, root: Path):
        return start_worker(
            pool="threads",
            concurrency=2,
            MOTOR_HOST_ID=name,
            MOTOR_WORKSPACES_DIR=str(root),
            MOTOR_DATA_DIR=str(root.parent / f"{name}-data"),
            **hosts,
        )

    # given host A running a run that writes a file, runs a counted program, then waits on
    # the model for its next step
    llm_stub_server.add(
        reply_tools(tool_call("write", {"path": "docs/one.txt", "content": "one"}, call_id="w1")),
        reply_tools(tool_call("code", {"code": APPEND}, call_id="c1")),
    )
    held = llm_stub_server.add_gated(
        reply_tools(tool_call("write", {"path": "lost.txt", "content": "x"}, call_id="lost"))
    )
    llm_stub_server.add(
        reply_tools(tool_call("write", {"path": "two.txt", "content": "two"}, call_id="w2")),
        reply_tools(tool_call("read", {"path": "docs/one.txt"}, call_id="r")),
        reply_text("done"),
    )
    first = host("host-a", root_a)
    workspace = root_a / "ws_1"
    workspace.mkdir()
    run_id = run_start(
        agent_id=agent.pk,
        task="t",
        tools=["filesystem", "code"],
        workspace=str(workspace),
        actor="t",
    )["run_id"]
    _wait_for(lambda: len(llm_stub_server.requests) >= 3, "host A asking for the third step")
    assert RunPlacement.objects.get(pk=run_id).host_id == "host-a"
    # when host A is SIGKILLed mid-run (its workspace dir removed with it) and never restarted
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    held.set()
    before_move = MotorRun.objects.get(pk=run_id).lease_token
    (workspace / "docs" / "one.txt").unlink()
    # and host B is up, and the reaper runs once A's heartbeat is past the grace
    host("host-b", root_b)
    time.sleep(2.5)
    assert run_id in run_reap()["woken"]
    # then the run completes on B, with every file of its workspace
    _wait_for(
        lambda: MotorRun.objects.get(pk=run_id).status in (RunStatus.COMPLETED, RunStatus.FAILED),
        "the run to end on host B",
    )
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.workspace) == (RunStatus.COMPLETED, str(root_b / "ws_1"))
    moved = root_b / "ws_1"
    assert (moved / "docs" / "one.txt").read_text() == "one"
    assert (moved / "count.txt").read_text() == "ran\n"  # the program ran once
    assert (moved / "two.txt").read_text() == "two"
    assert not (moved / "lost.txt").exists()
    placement = RunPlacement.objects.get(pk=run_id)
    assert placement.host_id == "host-b"
    assert placement.manifest == workspace_manifest(moved)
    steps = Step.objects.filter(attempt__run_id=run_id).order_by("id")
    assert [(s.tool_call_id, s.state) for s in steps] == [
        ("w1", "done"),
        ("c1", "done"),
        ("w2", "done"),
        ("r", "done"),
    ]

    # when host A comes back and gets the wake-up of the lease it held before the move
    row_before = MotorRun.objects.filter(pk=run_id).values().get()
    back = host("host-a", root_a)
    current_app.send_task("runs.run_step", args=[run_id, before_move], queue="motor.host.host-a")
    log = Path(tmp_path / "worker2.log")
    _wait_for(
        lambda: "not_runnable" in log.read_text() or "lease_busy" in log.read_text(),
        "host A to drop the stale wake-up",
    )
    # then it changed nothing: the run, its placement and B's workspace are as they were
    assert MotorRun.objects.filter(pk=run_id).values().get() == row_before
    assert RunPlacement.objects.get(pk=run_id).host_id == "host-b"
    assert workspace_manifest(moved) == placement.manifest
    assert back.poll() is None
