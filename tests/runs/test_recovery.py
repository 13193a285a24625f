"""Crash recovery from the ledger: a call caught in flight is never run twice."""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import pytest
from django.utils import timezone

from runs.models import Attempt, MotorRun, RunStatus, Step, StepState
from runs.services import SliceOutcome, run_start, run_step
from tests.fixtures.llm import reply_text, tool_call
from tests.runs.helpers import new_workspace

pytestmark = pytest.mark.django_db


def _dead_pid() -> int:
    """A pid with no process behind it (high pids are rarely in use; each is checked)."""
    pid = 4_000_000
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        pid += 1


def test_a_call_in_flight_when_its_worker_died_is_reported_not_rerun(
    agent, scripted_llm, tmp_path, settings
):
    settings.MOTOR_SLICE_SECONDS = 0  # one iteration per slice, to look between them
    # given a run whose worker died after writing the intent of a `write` call (lease still live)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run_id = run_start(
        agent_id=agent.pk, task="t", tools=["write"], workspace=str(workspace), actor="t"
    )["run_id"]
    call = tool_call("write", {"path": "once.txt", "content": "x"}, call_id="w1")
    attempt = Attempt.objects.get(run_id=run_id)
    attempt.messages = [
        *attempt.messages,
        {"role": "assistant", "content": None, "tool_calls": [call]},
    ]
    attempt.iteration = 1
    attempt.save()
    dead_owner = f"{socket.gethostname()}:{_dead_pid()}:1"
    MotorRun.objects.filter(pk=run_id).update(
        status=RunStatus.RUNNING,
        started_at=timezone.now(),
        lease_token=7,
        lease_owner=dead_owner,
        lease_expires_at=timezone.now() + timedelta(minutes=10),
    )
    Step.objects.create(
        attempt=attempt,
        iteration=1,
        call_index=0,
        tool_call_id="w1",
        tool="write",
        arguments={"path": "once.txt", "content": "x"},
        lease_token=7,
    )
    scripted_llm.add(reply_text("checked and done"))
    # when a redelivered slice runs on this host
    first = run_step(run_id=run_id, client=scripted_llm.client(), owner="redelivered")
    # then it took over from the dead process and recorded the call as interrupted, unexecuted
    assert first is SliceOutcome.CONTINUED
    step = Step.objects.get(attempt=attempt)
    assert step.state == StepState.DONE
    assert step.result["error_code"] == "interrupted"
    assert not (workspace / "once.txt").exists()
    run = MotorRun.objects.get(pk=run_id)
    assert run.lease_token == 8
    # and the model is told the outcome is unknown, then finishes
    assert run_step(run_id=run_id, client=scripted_llm.client(), owner="redelivered") is (
        SliceOutcome.FINISHED
    )
    tool_message = scripted_llm.requests[0]["messages"][-1]
    assert tool_message["tool_call_id"] == "w1"
    assert tool_message["content"].startswith("ERROR (interrupted): This call was interrupted")


def test_a_live_lease_of_another_live_process_is_not_taken_over(agent, scripted_llm):
    # given a run leased by a live process on this host (pid 1 always exists)
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="t")["run_id"]
    MotorRun.objects.filter(pk=run_id).update(
        lease_token=3,
        lease_owner=f"{socket.gethostname()}:1:1",
        lease_expires_at=timezone.now() + timedelta(minutes=10),
    )
    # when another slice arrives, then it backs off and writes nothing
    assert run_step(run_id=run_id, client=scripted_llm.client(), owner="other") is (
        SliceOutcome.LEASE_BUSY
    )
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.lease_token) == (RunStatus.CREATED, 3)
    assert scripted_llm.requests == []


def test_a_slice_that_kept_killing_its_worker_fails_the_run_as_poison(agent, scripted_llm):
    # given a run whose slices started 3 times without finishing
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="t")["run_id"]
    MotorRun.objects.filter(pk=run_id).update(
        status=RunStatus.RUNNING, started_at=timezone.now(), redelivery_count=3
    )
    # when the next slice runs
    assert run_step(run_id=run_id, client=scripted_llm.client()) is SliceOutcome.FINISHED
    # then the run failed without calling the model
    attempt = Attempt.objects.get(run_id=run_id)
    assert attempt.failure["message"] == "a step ended its worker 3 times in a row"
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.FAILED
    assert scripted_llm.requests == []


def test_a_non_idempotent_call_caught_in_flight_asks_the_owner_before_running_again(
    agent, scripted_llm, tmp_path, settings
):
    settings.MOTOR_SLICE_SECONDS = 0  # one iteration per slice, to look between them
    # given a run whose worker died during a bash call (not safe to repeat blindly)
    from runs.models import ApprovalRequest
    from runs.services import run_approve

    workspace = tmp_path / "ws"
    workspace.mkdir()
    run_id = run_start(
        agent_id=agent.pk, task="t", tools=["bash"], workspace=str(workspace), actor="t"
    )["run_id"]
    arguments = {"command": "echo once >> log.txt"}
    call = tool_call("bash", arguments, call_id="b1")
    attempt = Attempt.objects.get(run_id=run_id)
    attempt.messages = [
        *attempt.messages,
        {"role": "assistant", "content": None, "tool_calls": [call]},
    ]
    attempt.iteration = 1
    attempt.save()
    MotorRun.objects.filter(pk=run_id).update(
        status=RunStatus.RUNNING,
        started_at=timezone.now(),
        lease_token=4,
        lease_owner=f"{socket.gethostname()}:{_dead_pid()}:1",
        lease_expires_at=timezone.now() + timedelta(minutes=10),
    )
    Step.objects.create(
        attempt=attempt,
        iteration=1,
        call_index=0,
        tool_call_id="b1",
        tool="bash",
        arguments=arguments,
        lease_token=4,
    )
    # when the redelivered slice runs, then it asks the owner instead of guessing
    assert run_step(run_id=run_id, client=scripted_llm.client(), owner="r") is SliceOutcome.PAUSED
    approval = ApprovalRequest.objects.get(run_id=run_id)
    assert (approval.summary, approval.action) == (
        "outcome unknown — run again?",
        {"tool": "bash", "arguments": arguments},
    )
    assert not (workspace / "log.txt").exists()
    # and once approved, the call runs exactly once more
    run_approve(run_id=run_id, approval_id=approval.pk, actor="user:1")
    scripted_llm.add(reply_text("done"))
    assert (
        run_step(run_id=run_id, client=scripted_llm.client(), owner="r") is SliceOutcome.CONTINUED
    )
    assert run_step(run_id=run_id, client=scripted_llm.client(), owner="r") is SliceOutcome.FINISHED
    assert (workspace / "log.txt").read_text() == "once\n"
    assert Step.objects.get(attempt=attempt).result["ok"] is True
