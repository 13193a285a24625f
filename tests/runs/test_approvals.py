"""Approval gates: bound to {run, step, action hash}, used at most once, expiring."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from runs.errors import InvalidTransition
from runs.models import ApprovalRequest, Attempt, MotorRun, RunStatus, Signal, Step
from runs.services import SliceOutcome, run_approve, run_reap, run_reject, run_start
from runs.tools import action_hash
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import drive, snapshot

pytestmark = pytest.mark.django_db

APPEND_A = {"command": "echo a >> log.txt"}
APPEND_B = {"command": "echo b >> log.txt"}


@pytest.fixture
def workspace(tmp_path):
    path = tmp_path / "ws"
    path.mkdir()
    return path


def _gated_run(agent, workspace) -> str:
    return run_start(
        agent_id=agent.pk,
        task="Append",
        tools=["bash"],
        workspace=str(workspace),
        approval_required=True,
        actor="t",
    )["run_id"]


def test_a_gated_action_waits_for_approval_then_runs_exactly_once(agent, scripted_llm, workspace):
    # given a run that requires approval, whose model wants a non-idempotent bash call
    run_id = _gated_run(agent, workspace)
    scripted_llm.add(
        reply_tools(tool_call("bash", APPEND_A, call_id="b1")), reply_text("Appended.")
    )
    # when the loop reaches it
    assert drive(run_id, scripted_llm.client()) == [SliceOutcome.PAUSED]
    # then nothing ran, and the owner is asked with the exact action and its hash
    assert not (workspace / "log.txt").exists()
    approval = ApprovalRequest.objects.get(run_id=run_id)
    assert (approval.status, approval.action) == (
        "pending",
        {"tool": "bash", "arguments": APPEND_A},
    )
    assert approval.action_hash == action_hash("bash", APPEND_A)
    payload = Signal.objects.get(run_id=run_id).payload
    assert payload["status"] == "awaiting_approval"
    assert payload["approval"]["id"] == approval.pk
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.AWAITING_APPROVAL
    # when the owner approves, the call runs once and the run completes
    assert run_approve(run_id=run_id, approval_id=approval.pk, actor="user:1") == {
        "run_id": run_id,
        "previous_status": "awaiting_approval",
        "new_status": "running",
    }
    assert drive(run_id, scripted_llm.client()) == [SliceOutcome.FINISHED]
    assert (workspace / "log.txt").read_text() == "a\n"
    approval.refresh_from_db()
    assert approval.status == "consumed" and approval.used_at is not None
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.COMPLETED


def test_an_approval_lets_only_that_action_run_once(agent, scripted_llm, workspace):
    # given the model asks approval for A, gets it, then tries B and then A twice
    run_id = _gated_run(agent, workspace)
    scripted_llm.add(
        reply_tools(
            tool_call("request_approval", {"tool": "bash", "arguments": APPEND_A, "reason": "log"})
        ),
        reply_tools(tool_call("bash", APPEND_B, call_id="b")),
    )
    drive(run_id, scripted_llm.client())
    first = ApprovalRequest.objects.get(run_id=run_id)
    run_approve(run_id=run_id, approval_id=first.pk, actor="user:1")
    # when the model calls a different action, then the approval for A does not apply
    assert drive(run_id, scripted_llm.client()) == [SliceOutcome.PAUSED]
    assert not (workspace / "log.txt").exists()
    second = ApprovalRequest.objects.filter(run_id=run_id).exclude(pk=first.pk).get()
    assert second.action == {"tool": "bash", "arguments": APPEND_B}
    first.refresh_from_db()
    assert first.used_at is None
    # when B is rejected and the model calls A twice
    run_reject(run_id=run_id, approval_id=second.pk, actor="user:1", note="not B")
    scripted_llm.add(
        reply_tools(tool_call("bash", APPEND_A, call_id="a1")),
        reply_tools(tool_call("bash", APPEND_A, call_id="a2")),
    )
    outcomes = drive(run_id, scripted_llm.client())
    # then A ran once with its approval, and the repeat waits for a new one
    assert outcomes == [SliceOutcome.PAUSED]
    assert (workspace / "log.txt").read_text() == "a\n"
    first.refresh_from_db()
    assert first.used_at is not None
    assert ApprovalRequest.objects.filter(run_id=run_id, status="pending").count() == 1
    b_step = Step.objects.get(attempt__run_id=run_id, tool_call_id="b")
    assert b_step.result["error_code"] == "rejected"
    assert b_step.result["output"] == "The owner rejected this action: not B"
    approved = [
        m["content"]
        for m in Attempt.objects.get(run_id=run_id).messages
        if m["role"] == "tool" and m["content"].startswith("Approved: ")
    ]
    assert approved == [
        "Approved: you may call bash with exactly the arguments you proposed, once."
    ]


def test_an_approval_given_after_expiry_fails_the_run_and_runs_nothing(
    agent, scripted_llm, workspace
):
    run_id = _gated_run(agent, workspace)
    scripted_llm.add(reply_tools(tool_call("bash", APPEND_A)))
    drive(run_id, scripted_llm.client())
    approval = ApprovalRequest.objects.get(run_id=run_id)
    ApprovalRequest.objects.filter(pk=approval.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    result = run_approve(run_id=run_id, approval_id=approval.pk, actor="user:1")
    assert result["new_status"] == "failed"
    approval.refresh_from_db()
    assert approval.status == "expired"
    attempt = Attempt.objects.get(run_id=run_id)
    assert attempt.failure["message"] == "the approval expired before it was given"
    assert drive(run_id, scripted_llm.client()) == [SliceOutcome.NOT_RUNNABLE]
    assert not (workspace / "log.txt").exists()


def test_the_reaper_expires_a_forgotten_approval(agent, scripted_llm, workspace):
    run_id = _gated_run(agent, workspace)
    scripted_llm.add(reply_tools(tool_call("bash", APPEND_A)))
    drive(run_id, scripted_llm.client())
    ApprovalRequest.objects.filter(run_id=run_id).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert run_reap()["timed_out"] == [run_id]
    assert ApprovalRequest.objects.get(run_id=run_id).status == "expired"
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, Attempt.objects.get(run=run).failure["message"]) == (
        RunStatus.FAILED,
        "Approval timeout",
    )


def test_a_decision_for_another_approval_or_a_running_run_is_refused(
    agent, scripted_llm, workspace
):
    run_id = _gated_run(agent, workspace)
    scripted_llm.add(reply_tools(tool_call("bash", APPEND_A)))
    drive(run_id, scripted_llm.client())
    approval = ApprovalRequest.objects.get(run_id=run_id)
    before = snapshot(run_id)
    with pytest.raises(InvalidTransition, match="is not the pending approval of run"):
        run_approve(run_id=run_id, approval_id=approval.pk + 1000, actor="user:1")
    assert snapshot(run_id) == before
    run_reject(run_id=run_id, approval_id=approval.pk, actor="user:1")
    with pytest.raises(InvalidTransition, match="only a run awaiting approval takes a decision"):
        run_approve(run_id=run_id, approval_id=approval.pk, actor="user:1")


def test_an_ungated_run_runs_non_idempotent_calls_without_asking(agent, scripted_llm, workspace):
    run_id = run_start(
        agent_id=agent.pk, task="t", tools=["bash"], workspace=str(workspace), actor="t"
    )["run_id"]
    scripted_llm.add(reply_tools(tool_call("bash", APPEND_A)), reply_text("ok"))
    drive(run_id, scripted_llm.client())
    assert (workspace / "log.txt").read_text() == "a\n"
    assert ApprovalRequest.objects.count() == 0
