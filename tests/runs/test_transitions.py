"""Run and attempt state machines: every allowed transition, and refused ones change nothing."""

from __future__ import annotations

import pytest
from django.utils import timezone
from django_fsm import TransitionNotAllowed

from runs.errors import InvalidTransition
from runs.models import Attempt, AttemptStatus, MotorRun, RunEvent, RunStatus, Signal
from runs.services import SliceOutcome, run_cancel, run_respond, run_start
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import drive, new_workspace, snapshot

pytestmark = pytest.mark.django_db

ALL = list(RunStatus.values)
ALLOWED = {
    "start": {RunStatus.CREATED: RunStatus.RUNNING},
    "await_input": {RunStatus.RUNNING: RunStatus.AWAITING_INPUT},
    "await_approval": {RunStatus.RUNNING: RunStatus.AWAITING_APPROVAL},
    "resume": {
        RunStatus.AWAITING_INPUT: RunStatus.RUNNING,
        RunStatus.AWAITING_APPROVAL: RunStatus.RUNNING,
    },
    "complete": {RunStatus.RUNNING: RunStatus.COMPLETED},
    "fail": {
        s: RunStatus.FAILED for s in ("created", "running", "awaiting_input", "awaiting_approval")
    },
    "cancel": {
        s: RunStatus.CANCELLED
        for s in ("created", "running", "awaiting_input", "awaiting_approval")
    },
    "retry": {RunStatus.FAILED: RunStatus.RUNNING},
}


def _kwargs(name: str) -> dict:
    now = timezone.now()
    return {
        "start": {"at": now},
        "complete": {"result": {"ok": True}, "at": now},
        "fail": {"result": {"ok": False}, "at": now},
        "cancel": {"result": {"ok": False}, "at": now},
    }.get(name, {})


@pytest.mark.parametrize("name", sorted(ALLOWED))
@pytest.mark.parametrize("source", ALL)
def test_run_transition_table(name: str, source: str) -> None:
    # given a run (in memory) in `source`
    run = MotorRun(status=source, max_attempts=3)
    transition = getattr(run, name)
    expected = ALLOWED[name].get(source)
    # when the transition is called
    if expected is None:
        # then a transition not in the table is refused and the status is unchanged
        with pytest.raises(TransitionNotAllowed):
            transition(**_kwargs(name))
        assert run.status == source
    else:
        transition(**_kwargs(name))
        assert run.status == expected


def test_retry_is_refused_when_no_attempt_is_left() -> None:
    # given a failed run on its last attempt
    run = MotorRun(status=RunStatus.FAILED, max_attempts=2, current_attempt_index=1)
    # when it is retried, then the condition refuses it and nothing changes
    with pytest.raises(TransitionNotAllowed):
        run.retry()
    assert (run.status, run.current_attempt_index) == (RunStatus.FAILED, 1)


def test_attempt_pause_and_resume_carry_the_pending_question() -> None:
    attempt = Attempt(status=AttemptStatus.RUNNING)
    attempt.await_input(question="Which file?", tool_call_id="call_7")
    assert (attempt.status, attempt.pending_question, attempt.pending_tool_call_id) == (
        AttemptStatus.AWAITING_INPUT,
        "Which file?",
        "call_7",
    )
    attempt.resume()
    assert (attempt.status, attempt.pending_question, attempt.pending_tool_call_id) == (
        AttemptStatus.RUNNING,
        "",
        "",
    )
    with pytest.raises(TransitionNotAllowed):
        attempt.resume()


def test_services_walk_created_running_awaiting_input_running_completed(agent, scripted_llm):
    # given a started run whose model asks one question and then finishes
    started = run_start(
        workspace=new_workspace(), agent_id=agent.pk, task="Say hello", actor="test"
    )
    scripted_llm.add(
        reply_tools(tool_call("ask_user", {"question": "Formal or casual?"}, call_id="c1")),
        reply_text("Said hello casually."),
    )
    # when the loop runs, the user answers and the loop runs again
    assert drive(started["run_id"], scripted_llm.client()) == [SliceOutcome.PAUSED]
    run_respond(run_id=started["run_id"], answer="casual", actor="test")
    assert drive(started["run_id"], scripted_llm.client()) == [SliceOutcome.FINISHED]
    # then the audit trail shows every transition in order
    trail = list(
        RunEvent.objects.filter(run_id=started["run_id"]).values_list("from_status", "to_status")
    )
    assert trail == [
        ("", "created"),
        ("created", "running"),
        ("running", "awaiting_input"),
        ("awaiting_input", "running"),
        ("running", "completed"),
    ]


def test_respond_is_refused_unless_awaiting_input_and_changes_nothing(agent):
    # given a run that is still `created`
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="test")[
        "run_id"
    ]
    before = snapshot(run_id)
    # when an answer arrives
    with pytest.raises(InvalidTransition, match="only a run awaiting input takes an answer"):
        run_respond(run_id=run_id, answer="yes", actor="test")
    # then nothing changed
    assert snapshot(run_id) == before


def test_cancel_of_a_terminal_run_is_refused_and_changes_nothing(agent, scripted_llm):
    # given a completed run
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="test")[
        "run_id"
    ]
    scripted_llm.add(reply_text("done"))
    drive(run_id, scripted_llm.client())
    before = snapshot(run_id)
    assert before["run"]["status"] == RunStatus.COMPLETED
    # when it is cancelled
    with pytest.raises(InvalidTransition, match="only an active run can be cancelled"):
        run_cancel(run_id=run_id, actor="test")
    # then nothing changed
    assert snapshot(run_id) == before


def test_cancel_while_awaiting_input_fails_the_attempt_and_fences_the_lease(agent, scripted_llm):
    # given a run paused on a question
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="test")[
        "run_id"
    ]
    scripted_llm.add(reply_tools(tool_call("ask_user", {"question": "Which?"})))
    drive(run_id, scripted_llm.client())
    token_before = MotorRun.objects.get(pk=run_id).lease_token
    # when it is cancelled
    result = run_cancel(run_id=run_id, actor="agent:1", reason="user changed their mind")
    # then run and attempt are closed with the reason, and the fencing token moved on
    run = MotorRun.objects.get(pk=run_id)
    attempt = Attempt.objects.get(run=run)
    assert result == {
        "run_id": run_id,
        "previous_status": "awaiting_input",
        "new_status": "cancelled",
    }
    assert run.lease_token == token_before + 1
    assert attempt.status == AttemptStatus.FAILED
    assert attempt.failure["category"] == "cancelled"
    assert attempt.failure["message"] == "user changed their mind"
    assert attempt.pending_question == ""
    # and the only signal is the question that was asked before
    assert list(Signal.objects.filter(run_id=run_id).values_list("payload__status", flat=True)) == [
        "awaiting_input"
    ]
