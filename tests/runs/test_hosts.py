"""Worker hosts: a host id held by a live worker is refused, a run's slices follow its
workspace's host while that host's heartbeat is fresh, and its workspace follows the run to
the host that resumes it (restored from its snapshot)."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission, User
from django.db import DEFAULT_DB_ALIAS, connections
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from runs import hosts
from runs.host_models import RunPlacement, WorkerHost
from runs.host_watch import hosts_gone_resend, paused_runs_resume
from runs.hosts import (
    HostIdInUse,
    host_connection_close,
    host_connection_open,
    host_heartbeat,
    host_register,
    run_queue,
)
from runs.models import MotorRun, RunStatus, Step
from runs.reaper import run_reap
from runs.selectors import run_status
from runs.services import SliceOutcome, run_start, run_step
from runs.snapshots import workspace_manifest
from tests.fixtures.llm import reply_text, reply_tools, tool_call

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def several_hosts(settings):
    settings.MOTOR_MULTI_HOST = True


def age(host: str, seconds: float) -> None:
    """Make `host`'s last heartbeat `seconds` old."""
    WorkerHost.objects.filter(pk=host).update(
        heartbeat_at=timezone.now() - timedelta(seconds=seconds)
    )


def test_a_host_id_a_live_worker_holds_is_refused_and_a_silent_one_is_taken_over(
    settings,
) -> None:
    settings.MOTOR_HOST_ID = "host-a"
    settings.MOTOR_HOST_GRACE_SECONDS = 30
    first = host_register()
    # a second worker with the same id while the first beats: refused, naming the id and rule
    with pytest.raises(HostIdInUse) as caught:
        host_register()
    assert "host id 'host-a' is announced by another live worker" in str(caught.value)
    assert "MOTOR_HOST_ID" in str(caught.value)
    assert WorkerHost.objects.get(pk="host-a").instance == first
    # once the first has been silent past the grace, the id is free again
    age("host-a", 31)
    second = host_register()
    assert second != first
    assert WorkerHost.objects.get(pk="host-a").instance == second
    # and the old process's heartbeat no longer renews it
    hosts._instance = first
    assert host_heartbeat() is False
    hosts._instance = second
    assert host_heartbeat() is True


def test_slices_go_to_the_workspace_host_while_it_lives_then_to_the_shared_queue(
    settings, agent, tmp_path: Path
) -> None:
    settings.MOTOR_HOST_GRACE_SECONDS = 30
    settings.MOTOR_RUN_QUEUE = "runs"
    workspace = tmp_path / "ws_1"
    workspace.mkdir()
    run_id = run_start(
        agent_id=agent.pk, task="t", tools=["filesystem"], workspace=str(workspace), actor="t"
    )["run_id"]
    # a run no host holds yet: the shared queue
    assert run_queue(run_id) == "runs"
    settings.MOTOR_HOST_ID = "host-a"
    host_register()
    RunPlacement.objects.create(run_id=run_id, host_id="host-a", workspace_name="ws_1")
    assert run_queue(run_id) == "motor.host.host-a"
    age("host-a", 29)
    assert run_queue(run_id) == "motor.host.host-a"
    age("host-a", 31)
    assert run_queue(run_id) == "runs"


def test_a_run_resumed_on_another_host_finds_its_workspace_restored(
    settings, agent, scripted_llm, tmp_path: Path
) -> None:
    # given two hosts with workspaces dirs of their own, and host A running a run's first slice
    settings.MOTOR_SLICE_SECONDS = 0  # one iteration per slice
    root_a, root_b = tmp_path / "a", tmp_path / "b"
    root_a.mkdir()
    root_b.mkdir()
    settings.MOTOR_WORKSPACES_DIR = root_a
    settings.MOTOR_HOST_ID = "host-a"
    workspace = root_a / "ws_1"
    workspace.mkdir()
    run_id = run_start(
        agent_id=agent.pk, task="t", tools=["filesystem"], workspace=str(workspace), actor="t"
    )["run_id"]
    scripted_llm.add(
        reply_tools(tool_call("write", {"path": "docs/one.txt", "content": "one"}, call_id="w1")),
        reply_tools(tool_call("write", {"path": "two.txt", "content": "two"}, call_id="w2")),
        reply_tools(tool_call("read", {"path": "docs/one.txt"}, call_id="r")),
        reply_text("done"),
    )
    client = scripted_llm.client()
    assert run_step(run_id=run_id, client=client, owner="a:1") is SliceOutcome.CONTINUED
    assert (workspace / "docs" / "one.txt").read_text() == "one"
    placement = RunPlacement.objects.get(pk=run_id)
    assert (placement.host_id, placement.workspace_name, placement.snapshot_seq) == (
        "host-a",
        "ws_1",
        1,
    )
    # when host A is gone (its directory too) and host B takes the run's next slices
    settings.MOTOR_WORKSPACES_DIR = root_b
    settings.MOTOR_HOST_ID = "host-b"
    for _ in range(5):
        outcome = run_step(run_id=run_id, client=client, owner="b:1")
        if outcome is not SliceOutcome.CONTINUED:
            break
    # then the run completed on B, in B's copy of the workspace, holding every file
    run = MotorRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED
    assert run.workspace == str(root_b / "ws_1")
    assert (root_b / "ws_1" / "docs" / "one.txt").read_text() == "one"
    assert (root_b / "ws_1" / "two.txt").read_text() == "two"
    placement = RunPlacement.objects.get(pk=run_id)
    assert placement.host_id == "host-b"
    assert placement.manifest == workspace_manifest(root_b / "ws_1")
    assert set(placement.manifest) == {"docs/one.txt", "two.txt"}
    # each call ran once, and the read on B saw what A wrote
    steps = list(Step.objects.filter(attempt__run_id=run_id).order_by("id"))
    assert [(s.tool, s.state) for s in steps] == [
        ("write", "done"),
        ("write", "done"),
        ("read", "done"),
    ]
    assert steps[2].result["ok"] is True


def test_a_host_id_whose_process_on_this_machine_is_gone_is_taken_over_at_once(
    settings,
) -> None:
    # given a fresh heartbeat row left by a worker of this machine that was killed
    gone = subprocess.Popen(["true"])
    gone.wait()
    WorkerHost.objects.create(
        host_id="host-a",
        instance="old",
        machine=socket.gethostname(),
        pid=gone.pid,
        started_at=timezone.now(),
        heartbeat_at=timezone.now(),
    )
    settings.MOTOR_HOST_ID = "host-a"
    # when a worker restarts under the same id, it takes the id over without waiting the grace
    instance = host_register()
    assert WorkerHost.objects.get(pk="host-a").instance == instance != "old"


def _filesystem_run(agent, workspace: Path) -> str:
    workspace.mkdir()
    return run_start(
        agent_id=agent.pk, task="t", tools=["filesystem"], workspace=str(workspace), actor="t"
    )["run_id"]


def test_a_workspace_past_the_snapshot_quota_fails_the_run_with_the_reason(
    settings, agent, scripted_llm, tmp_path: Path
) -> None:
    settings.MOTOR_SNAPSHOT_MAX_BYTES = 4
    run_id = _filesystem_run(agent, tmp_path / "ws_1")
    scripted_llm.add(
        reply_tools(tool_call("write", {"path": "big.txt", "content": "hello"}, call_id="w")),
        reply_text("done"),
    )
    assert run_step(run_id=run_id, client=scripted_llm.client(), owner="a:1") is (
        SliceOutcome.FINISHED
    )
    run = MotorRun.objects.get(pk=run_id)
    assert run.status == RunStatus.FAILED
    failure = run.attempts.get().failure
    assert (failure["category"], failure["retryable"]) == ("tool_failure", False)
    assert failure["message"] == (
        "workspace snapshot refused: the workspace holds 5 bytes, more than the snapshot limit "
        "of 4 bytes (MOTOR_SNAPSHOT_MAX_BYTES, the workspace quota)"
    )
    assert RunPlacement.objects.get(pk=run_id).snapshot_seq == 0


def test_a_snapshot_the_store_refuses_pauses_the_run_until_the_store_answers_again(
    settings, agent, scripted_llm, tmp_path: Path, test_redis, django_capture_on_commit_callbacks
) -> None:
    # given a snapshot store that cannot be written (a file where its directory should be)
    blocked = tmp_path / "store"
    blocked.write_text("not a directory")
    settings.MOTOR_SNAPSHOT_DIR = blocked
    settings.MOTOR_SNAPSHOT_RETRY_SECONDS = 0
    settings.MOTOR_HOST_ID = "host-a"
    host_register()
    run_id = _filesystem_run(agent, tmp_path / "ws_1")
    scripted_llm.add(
        reply_tools(tool_call("write", {"path": "a.txt", "content": "alpha"}, call_id="w")),
        reply_text("done"),
    )
    client = scripted_llm.client()
    # when a call's files cannot be snapshotted, its result is not recorded and the run pauses:
    # its lease is free and no next slice is queued
    test_redis.delete("celery", "motor.host.host-a")
    assert run_step(run_id=run_id, client=client, owner="a:1") is SliceOutcome.PAUSED
    step = Step.objects.get(attempt__run_id=run_id)
    assert (step.tool_call_id, step.state) == ("w", "intent")
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.lease_owner, run.lease_expires_at) == (RunStatus.RUNNING, "", None)
    assert test_redis.llen("celery") + test_redis.llen("motor.host.host-a") == 0
    # then the run says why it waits, in the run API's details
    digest = hashlib.sha256(b"alpha").hexdigest()
    reason = (
        f"snapshot storage unreachable: snapshot store {blocked}: cannot write blobs/{digest}: "
        f"[Errno 20] Not a directory: '{blocked / 'blobs'}'"
    )
    placement = RunPlacement.objects.get(pk=run_id)
    assert run_status(run_id=run_id)["paused"] == {
        "reason": reason,
        "since": placement.paused_at.isoformat(),
    }
    # and in the admin: a "Paused" badge with the reason in the runs list, and on its page
    staff = User.objects.create_user("vera", password="x", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_motorrun"))
    admin = Client()
    admin.force_login(staff)
    listed = admin.get(reverse("admin:runs_motorrun_changelist")).content.decode()
    assert (
        '<span class="mc-badge mc-badge--running">Running</span> '
        f'<span class="mc-badge mc-badge--paused" title="{escape(reason)}">Paused</span>'
    ) in listed
    console = admin.get(
        reverse("admin:runs_motorrun_change", args=[quote(run_id)])
    ).content.decode()
    assert f"{escape(reason)}. The run resumes by itself once that is back." in console
    # and neither the reaper, long after, nor a host's beat while the store is still down
    # wakes it
    MotorRun.objects.filter(pk=run_id).update(idle_since=timezone.now() - timedelta(hours=1))
    assert run_reap()["woken"] == []
    assert paused_runs_resume() == []
    assert run_status(run_id=run_id)["paused"]["reason"] == reason
    # when the store is back, the next beat wakes it once, to its host's queue
    blocked.unlink()
    with django_capture_on_commit_callbacks(execute=True):
        assert paused_runs_resume() == [run_id]
        assert paused_runs_resume() == []
    queued = [json.loads(raw) for raw in test_redis.lrange("motor.host.host-a", 0, -1)]
    assert [m["headers"]["argsrepr"] for m in queued] == [f"['{run_id}', {run.lease_token}]"]
    assert run_status(run_id=run_id)["paused"] is None
    # and its next slice takes the step up again: as any call whose result was never
    # recorded, it is reported to the model as interrupted and retryable
    for _ in range(3):
        if run_step(run_id=run_id, client=client, owner="a:1") is not SliceOutcome.CONTINUED:
            break
    run = MotorRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED
    step.refresh_from_db()
    assert (step.state, step.result["error_code"], step.result["retryable"]) == (
        "done",
        "interrupted",
        True,
    )
    placement = RunPlacement.objects.get(pk=run_id)
    assert (placement.snapshot_seq, set(placement.manifest)) == (1, {"a.txt"})
    assert (blocked / "blobs" / placement.manifest["a.txt"][0]).read_text() == "alpha"


def _dead_pid() -> int:
    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid


def test_the_runs_of_a_host_silent_past_the_grace_are_re_sent_at_once_fenced_and_once(
    settings, agent, make_agent, tmp_path: Path, test_redis, django_capture_on_commit_callbacks
) -> None:
    settings.MOTOR_HOST_GRACE_SECONDS = 30
    settings.MOTOR_HOST_ID = "host-b"
    host_register()
    machine = socket.gethostname()
    # given host A, silent for longer than the grace, holding three runs' workspaces: one idle
    # (its wake-up waits in A's queue), one whose lease a killed slice of A holds, and one a
    # live slice of another machine is taking over right now
    WorkerHost.objects.create(
        host_id="host-a",
        instance="a",
        machine=machine,
        pid=_dead_pid(),
        started_at=timezone.now(),
        heartbeat_at=timezone.now(),
    )
    age("host-a", 31)
    idle = _filesystem_run(agent, tmp_path / "ws_1")
    held = _filesystem_run(make_agent(), tmp_path / "ws_2")
    taken = _filesystem_run(make_agent(), tmp_path / "ws_3")
    for run_id, name in ((idle, "ws_1"), (held, "ws_2"), (taken, "ws_3")):
        RunPlacement.objects.create(run_id=run_id, host_id="host-a", workspace_name=name)
    later = timezone.now() + timedelta(minutes=5)
    MotorRun.objects.filter(pk=held).update(
        status=RunStatus.RUNNING,
        lease_token=4,
        lease_owner=f"{machine}:{_dead_pid()}:1",
        lease_expires_at=later,
    )
    MotorRun.objects.filter(pk=taken).update(
        status=RunStatus.RUNNING, lease_token=7, lease_owner="elsewhere:1:1", lease_expires_at=later
    )
    test_redis.delete("celery")
    # when host B beats (twice, as B and another live host would)
    with django_capture_on_commit_callbacks(execute=True):
        resent = hosts_gone_resend()
        assert hosts_gone_resend() == []
    # then the idle run and the killed slice's run were re-sent, each once, to the shared queue
    assert sorted(resent) == sorted([idle, held])
    queued = sorted(
        m["headers"]["argsrepr"]
        for m in (json.loads(raw) for raw in test_redis.lrange("celery", 0, -1))
    )
    assert queued == sorted([f"['{idle}', 0]", f"['{held}', 5]"])
    # and the killed slice's lease is fenced: its token moved on and the lease is free
    row = MotorRun.objects.filter(pk=held).values("lease_token", "lease_owner").get()
    assert row == {"lease_token": 5, "lease_owner": ""}
    assert MotorRun.objects.get(pk=held).lease_expires_at is None
    # and both are placed on no host (the next one restores them); the run taken over by a
    # live slice is left to it
    placements = dict(RunPlacement.objects.values_list("run_id", "host_id"))
    assert placements == {idle: "", held: "", taken: "host-a"}
    assert MotorRun.objects.filter(pk=taken).values_list("lease_token", flat=True).get() == 7


def test_a_host_within_the_grace_keeps_its_runs(settings, agent, tmp_path: Path) -> None:
    settings.MOTOR_HOST_GRACE_SECONDS = 30
    settings.MOTOR_HOST_ID = "host-b"
    host_register()
    WorkerHost.objects.create(
        host_id="host-a",
        instance="a",
        machine="elsewhere",
        pid=1,
        started_at=timezone.now(),
        heartbeat_at=timezone.now(),
    )
    age("host-a", 29)
    run_id = _filesystem_run(agent, tmp_path / "ws_1")
    RunPlacement.objects.create(run_id=run_id, host_id="host-a", workspace_name="ws_1")
    assert hosts_gone_resend() == []
    assert RunPlacement.objects.get(pk=run_id).host_id == "host-a"


def test_the_heartbeat_uses_a_connection_of_its_own(settings) -> None:
    settings.MOTOR_HOST_ID = "host-a"
    alias = host_connection_open()
    try:
        own = connections[alias]
        assert own is not connections[DEFAULT_DB_ALIAS]
        assert "pool" not in own.settings_dict["OPTIONS"]
        assert own.settings_dict["NAME"] == connections[DEFAULT_DB_ALIAS].settings_dict["NAME"]
    finally:
        host_connection_close()


def test_one_host_places_and_snapshots_nothing(settings, agent, scripted_llm, tmp_path: Path):
    # given the default deployment of one host
    settings.MOTOR_MULTI_HOST = False
    store = Path(settings.MOTOR_SNAPSHOT_DIR)
    stored = sorted(store.rglob("*")) if store.exists() else []
    run_id = _filesystem_run(agent, tmp_path / "ws_1")
    scripted_llm.add(
        reply_tools(tool_call("write", {"path": "a.txt", "content": "alpha"}, call_id="w")),
        reply_text("done"),
    )
    # when its run writes a file and finishes
    assert run_step(run_id=run_id, client=scripted_llm.client(), owner="a:1") is (
        SliceOutcome.FINISHED
    )
    # then nothing was placed or snapshotted and its slices use the shared queue
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
    assert not RunPlacement.objects.filter(pk=run_id).exists()
    assert (sorted(store.rglob("*")) if store.exists() else []) == stored
    assert run_queue(run_id) == "celery"
