"""Worker hosts as real worker processes on this machine (own data dirs, host ids and queues),
snapshots in a real S3-compatible server: a run whose host is SIGKILLed mid-run and never
restarted moves to another host within a heartbeat of the grace (no reaper; re-sent once while
two hosts sweep), completes there
with its workspace intact and the right baseline for its extraction, and the first host, back
later, does not touch it; a run whose snapshot storage goes down pauses with the reason and
resumes by itself once the storage is back, nothing executed twice."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import time
from pathlib import Path

import pytest
from celery import current_app

from runs.host_models import RunPlacement
from runs.models import Artifact, MotorRun, RunStatus, Step
from runs.selectors import run_status
from runs.services import run_start
from runs.snapshots import workspace_manifest
from skills.bundle import write_baseline
from skills.models import SkillVersion
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.test_snapshots import s3  # noqa: F401 - fixture
from tests.runs.test_worker_process import start_worker  # noqa: F401 - fixture

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

APPEND = "with open('count.txt', 'a') as f:\n    f.write('ran\\n')\n"
SKILL = b"---\nname: mail\ndescription: Send mail.\n---\n# Mail\n"
HOUR_AGO = time.time() - 3600


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
    root_a, root_b, root_c = tmp_path / "host-a", tmp_path / "host-b", tmp_path / "host-c"
    for root in (root_a, root_b, root_c):
        root.mkdir()
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

    # given a workspace prepared with a skill before the run (its baseline written, its files
    # an hour old), and host A running a run that writes files, changes one of the skill's,
    # runs a counted program, then waits on the model for its next step
    llm_stub_server.add(
        reply_tools(tool_call("write", {"path": "docs/one.txt", "content": "one"}, call_id="w1")),
        reply_tools(tool_call("code", {"code": APPEND}, call_id="c1")),
        reply_tools(
            tool_call("write", {"path": "scripts/send.sh", "content": "echo v2\n"}, call_id="s")
        ),
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
    prepared = {"SKILL.md": SKILL, "scripts/send.sh": b"echo v1\n"}
    for relative, data in prepared.items():
        (workspace / relative).parent.mkdir(parents=True, exist_ok=True)
        (workspace / relative).write_bytes(data)
        os.utime(workspace / relative, (HOUR_AGO, HOUR_AGO))
    write_baseline(workspace, prepared.items(), skill_name="mail")
    os.utime(workspace / ".motor-baseline.json", (HOUR_AGO, HOUR_AGO))
    run_id = run_start(
        agent_id=agent.pk,
        task="t",
        tools=["filesystem", "code"],
        workspace=str(workspace),
        actor="t",
    )["run_id"]
    _wait_for(lambda: len(llm_stub_server.requests) >= 4, "host A asking for the fourth step")
    assert RunPlacement.objects.get(pk=run_id).host_id == "host-a"
    # and hosts B and C up meanwhile (a worker's start wakes the runs of dead processes: done
    # now, while A lives, so that what moves the run below is the hosts' heartbeats alone)
    host("host-b", root_b)
    host("host-c", root_c)

    def start_reaps_done() -> bool:
        # (A consumes the shared queue too, and may be the one that reaps)
        logs = "".join((tmp_path / f"worker{index}.log").read_text() for index in (0, 1, 2))
        return len(re.findall(r"Task runs\.run_reap\[[^]]+\] succeeded", logs)) >= 2

    _wait_for(start_reaps_done, "hosts B and C started (each start's reap done)")
    assert MotorRun.objects.get(pk=run_id).lease_owner.split(":")[1] == str(first.pid)
    # when host A is SIGKILLed mid-run (its workspace dir removed with it) and never restarted
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    held.set()
    before_move = MotorRun.objects.get(pk=run_id).lease_token
    (workspace / "docs" / "one.txt").unlink()
    # then, with no reaper running, the heartbeats of B and C find A silent past the grace and
    # one of them sends the run's next slice (fencing A's lease)
    # then the run completes on B or C, with every file of its workspace
    _wait_for(
        lambda: MotorRun.objects.get(pk=run_id).status in (RunStatus.COMPLETED, RunStatus.FAILED),
        "the run to end on host B or C",
    )
    placement = RunPlacement.objects.get(pk=run_id)
    assert placement.host_id in ("host-b", "host-c")
    moved = tmp_path / placement.host_id / "ws_1"
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.workspace) == (RunStatus.COMPLETED, str(moved))
    assert run.lease_token > before_move
    # re-sent once, by one of the two hosts
    sent = f"run {run_id}: its host host-a is silent past the grace"
    logs = [(tmp_path / f"worker{index}.log").read_text() for index in (1, 2)]
    assert sum(log.count(sent) for log in logs) == 1
    assert (moved / "docs" / "one.txt").read_text() == "one"
    assert (moved / "count.txt").read_text() == "ran\n"  # the program ran once
    assert (moved / "two.txt").read_text() == "two"
    assert not (moved / "lost.txt").exists()
    # the prepared files came back as they were, their time too
    assert (moved / "SKILL.md").read_bytes() == SKILL
    assert (moved / "SKILL.md").stat().st_mtime == pytest.approx(HOUR_AGO, abs=1e-3)
    assert placement.manifest == workspace_manifest(moved)
    steps = Step.objects.filter(attempt__run_id=run_id).order_by("id")
    assert [(s.tool_call_id, s.state) for s in steps] == [
        ("w1", "done"),
        ("c1", "done"),
        ("s", "done"),
        ("w2", "done"),
        ("r", "done"),
    ]
    # and extraction there saw the run's own writes against the workspace's baseline: the skill's
    # changed script only (not the untouched SKILL.md), and as artifacts exactly the files the
    # run wrote (not the ones the workspace held before it)
    version = SkillVersion.objects.get(skill__name="mail")
    assert version.extracted_from["run_id"] == run_id
    assert (version.extracted_from["changed_files"], version.extracted_from["deleted_files"]) == (
        ["scripts/send.sh"],
        [],
    )
    assert sorted(Artifact.objects.filter(run_id=run_id).values_list("path", flat=True)) == [
        "count.txt",
        "docs/one.txt",
        "scripts/send.sh",
        "two.txt",
    ]

    # when host A comes back and gets the wake-up of the lease it held before the move
    row_before = MotorRun.objects.filter(pk=run_id).values().get()
    back = host("host-a", root_a)
    current_app.send_task("runs.run_step", args=[run_id, before_move], queue="motor.host.host-a")
    log = Path(tmp_path / "worker3.log")  # the fourth worker started
    _wait_for(
        lambda: "not_runnable" in log.read_text() or "lease_busy" in log.read_text(),
        "host A to drop the stale wake-up",
    )
    # then it changed nothing: the run, its placement and its workspace are as they were
    assert MotorRun.objects.filter(pk=run_id).values().get() == row_before
    assert RunPlacement.objects.get(pk=run_id).host_id == placement.host_id
    assert workspace_manifest(moved) == placement.manifest
    assert back.poll() is None


def test_a_run_whose_snapshot_storage_goes_down_pauses_and_resumes_once_it_is_back(
    agent,
    llm_stub_server,
    start_worker,  # noqa: F811 - the imported fixture
    s3,  # noqa: F811 - the imported fixture
    settings,
    tmp_path: Path,
) -> None:
    server, _ = s3
    settings.MOTOR_RUN_QUEUE = ""
    # given one host whose run wrote a file (snapshotted), then waits on the model
    llm_stub_server.add(
        reply_tools(tool_call("write", {"path": "a.txt", "content": "alpha"}, call_id="w"))
    )
    held = llm_stub_server.add_gated(reply_tools(tool_call("code", {"code": APPEND}, call_id="c")))
    llm_stub_server.add(reply_text("done"))
    start_worker(
        pool="threads",
        concurrency=2,
        MOTOR_HOST_ID="host-a",
        MOTOR_MULTI_HOST="true",
        MOTOR_HOST_HEARTBEAT_SECONDS="0.3",
        MOTOR_SNAPSHOT_RETRY_SECONDS="1",
        MOTOR_SNAPSHOT_STORAGE_URL=settings.MOTOR_SNAPSHOT_STORAGE_URL,
        MOTOR_SNAPSHOT_S3_ENDPOINT_URL=settings.MOTOR_SNAPSHOT_S3_ENDPOINT_URL,
    )
    workspace = Path(settings.MOTOR_WORKSPACES_DIR) / "ws_pause"
    workspace.mkdir()
    run_id = run_start(
        agent_id=agent.pk,
        task="t",
        tools=["filesystem", "code"],
        workspace=str(workspace),
        actor="t",
    )["run_id"]
    _wait_for(lambda: len(llm_stub_server.requests) >= 2, "the run asking for its second step")
    assert RunPlacement.objects.get(pk=run_id).snapshot_seq == 1
    # when the storage stops and the run's program then writes a file
    server.stop()
    held.set()
    # then the run pauses: the slice ended, the call's result unrecorded, the reason shown
    _wait_for(
        lambda: (
            MotorRun.objects.filter(pk=run_id, lease_expires_at__isnull=True).exists()
            and RunPlacement.objects.filter(pk=run_id, paused_at__isnull=False).exists()
        ),
        "the run to pause",
    )
    digest = hashlib.sha256(b"ran\n").hexdigest()
    paused = run_status(run_id=run_id)["paused"]
    assert paused["reason"].startswith(
        f"snapshot storage unreachable: snapshot store s3://snaps: has blobs/{digest}: "
        "Could not connect to the endpoint URL"
    )
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.RUNNING
    step = Step.objects.get(attempt__run_id=run_id, tool_call_id="c")
    assert step.state == "intent"
    # and it stays so while the storage is down (the host's beats find it still unreachable)
    time.sleep(2)
    assert run_status(run_id=run_id)["paused"] == paused
    assert len(llm_stub_server.requests) == 2
    # when the storage is back, the run resumes by itself and completes
    server.start()
    _wait_for(
        lambda: MotorRun.objects.get(pk=run_id).status in (RunStatus.COMPLETED, RunStatus.FAILED),
        "the run to complete",
    )
    run = MotorRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED
    assert run.waited_s >= 2  # the pause is not charged to the run's time budget
    assert run_status(run_id=run_id)["paused"] is None
    # once: the program ran a single time, its call reported interrupted, nothing re-run
    assert (workspace / "count.txt").read_text() == "ran\n"
    step.refresh_from_db()
    assert (step.state, step.result["error_code"]) == ("done", "interrupted")
    assert [s.tool_call_id for s in Step.objects.filter(attempt__run_id=run_id).order_by("id")] == [
        "w",
        "c",
    ]
    assert len(llm_stub_server.requests) == 3
    placement = RunPlacement.objects.get(pk=run_id)
    assert set(placement.manifest) == {"a.txt", "count.txt"}
    assert placement.manifest == workspace_manifest(workspace)
