"""The loop, slice by slice, against PostgreSQL with the scripted LLM through the real client."""

from __future__ import annotations

import json
import threading

import pytest

from runs.errors import InvalidRunParams
from runs.llm import replay_client
from runs.models import (
    Attempt,
    AttemptStatus,
    MotorRun,
    RunEvent,
    RunStatus,
    Signal,
    Step,
    StepState,
)
from runs.services import SliceOutcome, run_respond, run_start, run_step
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import drive, new_workspace

pytestmark = pytest.mark.django_db


def test_no_tool_call_completes_with_the_text_as_summary_and_a_signal(agent, scripted_llm):
    # given a run whose model answers at once
    run_id = run_start(
        workspace=new_workspace(), agent_id=agent.pk, task="Add 2 and 2", actor="test"
    )["run_id"]
    scripted_llm.add(reply_text("4"))
    # when the loop runs
    outcomes = drive(run_id, scripted_llm.client())
    # then the run completed with the answer as summary, and one signal says so
    run = MotorRun.objects.get(pk=run_id)
    assert outcomes == [SliceOutcome.FINISHED]
    assert run.status == RunStatus.COMPLETED
    assert run.result["ok"] is True
    assert run.result["summary"] == "4"
    assert run.result["stats"]["iterations"] == 1
    assert run.result["stats"]["errors"] == 0
    assert run.lease_expires_at is None
    signal = Signal.objects.get(run_id=run_id)
    assert (signal.kind, signal.priority, signal.agent_id) == ("motor_result", 1, agent.pk)
    assert signal.payload == {"run_id": run_id, "status": "completed", "result": run.result}


def test_the_model_sees_the_task_in_the_system_prompt_and_only_host_tools_without_grants(
    agent, scripted_llm
):
    # given a run granted no sandbox tools
    run_id = run_start(
        workspace=new_workspace(), agent_id=agent.pk, task="Summarise the plan", actor="test"
    )["run_id"]
    scripted_llm.add(reply_text("ok"))
    # when it runs
    drive(run_id, scripted_llm.client())
    # then the one request carried the task in the system prompt and offered only host tools
    (request,) = scripted_llm.requests
    assert request["model"] == "gpt-4o-mini"
    assert request["messages"][0]["role"] == "system"
    assert "<task>\nSummarise the plan\n</task>" in request["messages"][0]["content"]
    assert "Granted tools: none" in request["messages"][0]["content"]
    assert request["messages"][1] == {"role": "user", "content": "Summarise the plan"}
    assert [tool["function"]["name"] for tool in request["tools"]] == [
        "ask_user",
        "request_approval",
        "save_credential",  # every run has a workspace, so it may create a skill
    ]


def test_ask_user_round_trip_feeds_the_answer_back_as_that_calls_result(agent, scripted_llm):
    # given a model that asks, then finishes using the answer
    run_id = run_start(
        workspace=new_workspace(), agent_id=agent.pk, task="Convert files", actor="test"
    )["run_id"]
    scripted_llm.add(
        reply_tools(
            tool_call("ask_user", {"question": "Separate CSVs or one?"}, call_id="call_q"),
            text="I need a decision.",
        ),
        reply_text("Created separate CSVs."),
    )
    # when the loop pauses
    assert drive(run_id, scripted_llm.client()) == [SliceOutcome.PAUSED]
    run = MotorRun.objects.get(pk=run_id)
    attempt = Attempt.objects.get(run=run)
    # then question and tool_call_id are persisted, with the signal, and the lease is free
    assert run.status == RunStatus.AWAITING_INPUT
    assert (attempt.status, attempt.pending_question, attempt.pending_tool_call_id) == (
        AttemptStatus.AWAITING_INPUT,
        "Separate CSVs or one?",
        "call_q",
    )
    assert run.lease_expires_at is None
    assert Signal.objects.get(run_id=run_id).payload == {
        "run_id": run_id,
        "status": "awaiting_input",
        "question": "Separate CSVs or one?",
    }
    # and a slice while paused does nothing
    assert run_step(run_id=run_id, client=scripted_llm.client()) is SliceOutcome.NOT_RUNNABLE
    assert len(scripted_llm.requests) == 1

    # when the user answers and the loop resumes
    answered = run_respond(run_id=run_id, answer="separate", actor="agent:1")
    assert answered == {
        "run_id": run_id,
        "previous_status": "awaiting_input",
        "new_status": "running",
    }
    assert drive(run_id, scripted_llm.client()) == [SliceOutcome.FINISHED]
    # then the answer was the result of exactly that tool call, and the run completed
    second = scripted_llm.requests[1]["messages"]
    assert second[-1] == {"role": "tool", "tool_call_id": "call_q", "content": "separate"}
    assert second[-2]["tool_calls"][0]["id"] == "call_q"
    step = Step.objects.get(attempt__run_id=run_id)
    assert (step.tool, step.state, step.result["output"], step.result["provenance"]) == (
        "ask_user",
        StepState.DONE,
        "separate",
        "user",
    )
    assert step.reasoning == "I need a decision."
    assert step.model == "scripted"
    run.refresh_from_db()
    assert (run.status, run.result["summary"]) == (RunStatus.COMPLETED, "Created separate CSVs.")
    assert list(Signal.objects.filter(run_id=run_id).values_list("payload__status", flat=True)) == [
        "awaiting_input",
        "completed",
    ]


def test_iteration_cap_fails_the_run_with_the_partial_result(agent, scripted_llm):
    # given a run capped at 3 iterations whose model never stops calling tools
    run_id = run_start(
        workspace=new_workspace(), agent_id=agent.pk, task="Loop", max_iterations=3, actor="test"
    )["run_id"]
    scripted_llm.add(
        reply_tools(tool_call("nope_a"), text="trying a"),
        reply_tools(tool_call("nope_b"), text="trying b"),
        reply_tools(tool_call("nope_a"), text="found half of it"),
        reply_text("never asked for"),
    )
    # when the loop runs
    outcomes = drive(run_id, scripted_llm.client())
    # then it stopped after exactly 3 LLM calls and failed as budget_exhausted
    run = MotorRun.objects.get(pk=run_id)
    attempt = Attempt.objects.get(run=run)
    assert outcomes == [SliceOutcome.FINISHED]  # one slice: well within its time budget
    assert len(scripted_llm.requests) == 3
    assert scripted_llm.remaining == 1
    assert run.status == RunStatus.FAILED
    assert attempt.failure == {
        "category": "budget_exhausted",
        "retryable": True,
        "message": "the iteration cap of 3 was reached",
        "last_step": "nope_a (iteration 3)",
        "hint": "",
    }
    assert run.result["summary"] == "found half of it"
    assert run.result["stats"]["iterations"] == 3
    assert run.result["stats"]["errors"] == 3
    payload = Signal.objects.get(run_id=run_id).payload
    assert payload["status"] == "failed"
    assert payload["error"] == {
        "message": "the iteration cap of 3 was reached",
        "last_step": "nope_a (iteration 3)",
    }


def test_same_tool_failing_three_times_with_the_same_code_fails_the_run(agent, scripted_llm):
    # given a model that keeps calling a tool the run was not granted
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="Read it", actor="test")[
        "run_id"
    ]
    scripted_llm.add(*(reply_tools(tool_call("read", {"path": "a.txt"})) for _ in range(5)))
    # when the loop runs
    outcomes = drive(run_id, scripted_llm.client())
    # then the third identical failure ends the run; the rest of the script is unused
    run = MotorRun.objects.get(pk=run_id)
    attempt = Attempt.objects.get(run=run)
    assert outcomes == [SliceOutcome.FINISHED]
    assert scripted_llm.remaining == 2
    assert run.status == RunStatus.FAILED
    # a refusal streak means the task needs a grant it lacks: not worth retrying as it is
    assert (attempt.failure["category"], attempt.failure["retryable"]) == ("invalid_task", False)
    assert attempt.failure["message"] == (
        "tool 'read' was refused 3 times in a row (denied): the task needs something this run "
        "was not granted (a tool, a domain or a path); start a run with the grants it needs"
    )
    steps = list(Step.objects.filter(attempt=attempt).values_list("tool", "state", "result"))
    assert [(tool, state) for tool, state, _ in steps] == [("read", "done")] * 3
    assert steps[0][2]["output"] == "tool 'read' is not granted to this run (granted: none)"
    # and the model saw each refusal as an error result
    tool_messages = [m for m in attempt.messages if m["role"] == "tool"]
    assert tool_messages[0]["content"] == (
        "ERROR (denied): tool 'read' is not granted to this run (granted: none)"
    )


def test_different_error_codes_do_not_trigger_the_bailout(agent, scripted_llm):
    # given failures of the same tool with alternating error codes (denied vs invalid_args)
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="test")[
        "run_id"
    ]
    scripted_llm.add(
        reply_tools(tool_call("ask_user", {"question": ""})),
        reply_tools(tool_call("ask_user", {"question": ""})),
        reply_tools(tool_call("nope")),
        reply_text("gave up politely"),
    )
    # when it runs
    drive(run_id, scripted_llm.client())
    # then the run completes normally (ask_user failures are not part of a streak)
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.result["summary"]) == (RunStatus.COMPLETED, "gave up politely")
    assert run.result["stats"]["errors"] == 3


def test_model_failure_after_the_clients_retries_fails_the_run(agent, scripted_llm):
    # given an empty script: the stub answers HTTP 500
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="test")[
        "run_id"
    ]
    # when the loop runs
    assert drive(run_id, scripted_llm.client()) == [SliceOutcome.FINISHED]
    # then the run failed as a retryable model failure
    attempt = Attempt.objects.get(run_id=run_id)
    assert attempt.failure["category"] == "model_failure"
    assert attempt.failure["retryable"] is True
    assert attempt.failure["message"].startswith("LLM call to model 'gpt-4o-mini' failed: ")


def test_a_slice_for_an_unknown_run_is_a_no_op(scripted_llm):
    assert run_step(run_id="run_000000000000", client=scripted_llm.client()) is (
        SliceOutcome.NOT_RUNNABLE
    )
    assert scripted_llm.requests == []


def test_replay_reproduces_a_recorded_run(agent, make_agent, scripted_llm):
    # given a recorded run with a question, an answer and a final summary
    original = run_start(
        workspace=new_workspace(), agent_id=agent.pk, task="Plan a trip", actor="test"
    )["run_id"]
    scripted_llm.add(
        reply_tools(tool_call("ask_user", {"question": "Where to?"}, call_id="q1")),
        reply_text("Booked Lisbon."),
    )
    drive(original, scripted_llm.client())
    run_respond(run_id=original, answer="Lisbon", actor="test")
    drive(original, scripted_llm.client())
    # when a new run for another agent replays it
    other = make_agent()
    replay = run_start(
        workspace=new_workspace(), agent_id=other.pk, task="Plan a trip", actor="test"
    )["run_id"]
    client = replay_client(run_id=original)
    drive(replay, client)
    run_respond(run_id=replay, answer="Lisbon", actor="test")
    drive(replay, client)
    # then it walks the same conversation to the same result
    first = Attempt.objects.get(run_id=original)
    second = Attempt.objects.get(run_id=replay)
    assert second.messages == first.messages
    assert MotorRun.objects.get(pk=replay).result["summary"] == "Booked Lisbon."


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"task": "  "}, "task: must not be empty"),
        ({"task": "t", "max_iterations": 51}, "max_iterations: 51 is outside 1..50"),
        ({"task": "t", "max_iterations": 0}, "max_iterations: 0 is outside 1..50"),
        ({"task": "t", "timeout_s": 601}, "timeout_s: 601 is outside 1..600 seconds"),
        ({"task": "t", "trigger": "cron"}, "trigger: 'cron' is not one of"),
        ({"task": "t", "credential_names": ["Bad-Name"]}, "credential_names: 'Bad-Name' must"),
        ({"task": "t", "tools": ["ask_user"]}, "tools: ask_user is host-side"),
        ({"task": "t", "tools": ["request_approval"]}, "tools: request_approval is host-side"),
    ],
)
def test_invalid_start_params_are_refused_and_nothing_is_created(
    agent, test_redis, params, message
):
    with pytest.raises(InvalidRunParams) as excinfo:
        run_start(agent_id=agent.pk, actor="test", **params)
    assert str(excinfo.value).startswith(message)
    assert MotorRun.objects.count() == 0
    assert test_redis.get(f"motor:mutex:agent:{agent.pk}") is None


def test_start_for_an_unknown_agent_is_refused(db, test_redis):
    # inside a transaction (the agent is looked up before anything is written)
    with pytest.raises(InvalidRunParams, match="agent_id: no agent with id 987654"):
        run_start(workspace=new_workspace(), agent_id=987654, task="t", actor="test")
    assert MotorRun.objects.count() == 0
    assert list(test_redis.scan_iter(match="motor:mutex:*")) == []


@pytest.mark.django_db(transaction=True)
def test_start_for_an_unknown_agent_is_refused_outside_a_transaction_too(test_redis):
    # in autocommit (the one-statement insert, which the agent's foreign key refuses)
    with pytest.raises(InvalidRunParams, match="agent_id: no agent with id 987654"):
        run_start(workspace=new_workspace(), agent_id=987654, task="t", actor="test")
    assert (MotorRun.objects.count(), Attempt.objects.count(), RunEvent.objects.count()) == (
        0,
        0,
        0,
    )
    assert list(test_redis.scan_iter(match="motor:mutex:*")) == []
    queued = [json.loads(raw)["headers"]["task"] for raw in test_redis.lrange("celery", 0, -1)]
    assert "runs.run_step" not in queued


def test_messages_and_steps_are_json_with_placeholders_only(agent, scripted_llm, settings):
    # given a model that passes a credential placeholder to a tool it was not granted
    settings.MOTOR_CREDENTIAL_RESOLVER = "tests.runs.credential_resolver.resolve"
    run_id = run_start(
        workspace=new_workspace(),
        agent_id=agent.pk,
        task="t",
        credential_names=["api_key"],
        actor="test",
    )["run_id"]
    scripted_llm.add(
        reply_tools(tool_call("fetch", {"url": "https://x.test", "token": "<credential:api_key>"})),
        reply_text("done"),
    )
    drive(run_id, scripted_llm.client())
    # then the step stores the placeholder as the model sent it
    step = Step.objects.get(attempt__run_id=run_id)
    assert step.arguments == {"url": "https://x.test", "token": "<credential:api_key>"}
    assert json.loads(json.dumps(Attempt.objects.get(run_id=run_id).messages))


# on_commit hooks (the hand-over message) fire only outside a test transaction
@pytest.mark.django_db(transaction=True)
def test_one_slice_advances_the_run_iteration_after_iteration_under_a_single_claim(
    agent, scripted_llm, test_redis
):
    # given a run whose model calls tools twice before it answers, and the default slice budget
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="Loop", actor="test")[
        "run_id"
    ]
    test_redis.delete("celery")  # the start's own wake-up message is not under test
    scripted_llm.add(
        reply_tools(tool_call("nope_a")), reply_tools(tool_call("nope_b")), reply_text("done")
    )
    # when one slice runs
    outcome = run_step(run_id=run_id, expected_token=0, client=scripted_llm.client())
    # then it made all three iterations itself: one claim (token 1), no hand-over message
    run = MotorRun.objects.get(pk=run_id)
    assert outcome is SliceOutcome.FINISHED
    assert (run.status, run.lease_token) == (RunStatus.COMPLETED, 1)
    assert Attempt.objects.get(run=run).iteration == 3
    assert len(scripted_llm.requests) == 3
    queued = [json.loads(raw)["headers"]["task"] for raw in test_redis.lrange("celery", 0, -1)]
    assert "runs.run_step" not in queued


# on_commit hooks (the hand-over message) fire only outside a test transaction
@pytest.mark.django_db(transaction=True)
def test_a_slice_past_its_time_budget_hands_the_run_over_after_the_iteration_in_hand(
    agent, scripted_llm, test_redis, settings
):
    # given a slice budget of 0.2 s and a model whose second reply takes 0.3 s
    settings.MOTOR_SLICE_SECONDS = 0.2
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="Loop", actor="test")[
        "run_id"
    ]
    test_redis.delete("celery")
    scripted_llm.add(reply_tools(tool_call("nope_a")))
    slow = scripted_llm.add_gated(reply_tools(tool_call("nope_b")))
    scripted_llm.add(reply_text("done"))
    opener = threading.Timer(0.3, slow.set)
    opener.start()
    # when one slice runs
    outcome = run_step(run_id=run_id, expected_token=0, client=scripted_llm.client())
    opener.join()
    # then it finished the iteration it was in (the second), released the lease and queued the
    # next slice for its token, without starting the third
    run = MotorRun.objects.get(pk=run_id)
    attempt = Attempt.objects.get(run=run)
    assert outcome is SliceOutcome.CONTINUED
    assert (run.status, run.lease_token, run.lease_expires_at) == (RunStatus.RUNNING, 1, None)
    assert (attempt.iteration, len(scripted_llm.requests)) == (2, 2)
    assert Step.objects.filter(attempt=attempt, state=StepState.DONE).count() == 2
    queued = [json.loads(raw)["headers"] for raw in test_redis.lrange("celery", 0, -1)]
    assert [h["argsrepr"] for h in queued if h["task"] == "runs.run_step"] == [f"['{run_id}', 1]"]
    # and the next slice, for that message, finishes the run
    assert run_step(run_id=run_id, expected_token=1, client=scripted_llm.client()) is (
        SliceOutcome.FINISHED
    )
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
