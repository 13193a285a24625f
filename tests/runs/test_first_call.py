"""A new run's first LLM request, sent while the worker claims the run (FirstCallAhead)."""

from __future__ import annotations

import base64
import json
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection, connections

from runs.models import Attempt, MotorRun, RunStatus, Step
from runs.services import SliceOutcome, run_cancel, run_start, run_step
from tests.fixtures.llm import reply_text
from tests.runs.helpers import new_workspace

pytestmark = pytest.mark.django_db(transaction=True)


def _first_message(test_redis: Any, run_id: str) -> dict[str, Any]:
    """The kwargs of the queued run_step message of `run_id`."""
    for raw in test_redis.lrange("celery", 0, -1):
        message = json.loads(raw)
        if message["headers"]["task"] != "runs.run_step":
            continue
        args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
        if args[0] == run_id:
            return kwargs
    raise AssertionError(f"no queued run_step message for {run_id}")


def _wait_until(check: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_a_new_runs_first_message_carries_its_first_request_unless_it_has_credentials(
    make_agent, test_redis, tmp_path: Path
):
    # given a run with a task, tools, skill instructions and a workspace, and one with credentials
    workspace = new_workspace()
    plain = run_start(
        agent_id=make_agent().pk,
        task="Summarise notes.txt",
        tools=["read"],
        workspace=workspace,
        skill_instructions="Read SKILL.md first.",
        actor="test",
    )["run_id"]
    secret = run_start(
        workspace=new_workspace(),
        agent_id=make_agent().pk,
        task="Call the API",
        credential_names=["api_key"],
        actor="test",
    )["run_id"]
    # then the first carries what its first LLM request is made of, and nothing else
    assert _first_message(test_redis, plain) == {
        "ahead": {
            "task": "Summarise notes.txt",
            "tools": ["read"],
            "skill_instructions": "Read SKILL.md first.",
            "review": False,
            "skill_id": None,
            "workspace": workspace,
        }
    }
    # and the run with credentials carries none: its first step may be to ask for them
    assert _first_message(test_redis, secret) == {}


def test_the_first_request_goes_out_while_the_claim_waits_and_its_answer_is_used(
    agent, scripted_llm, test_redis
):
    # given a new run whose row another transaction holds locked, so its claim must wait
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="Say hi", actor="test")[
        "run_id"
    ]
    ahead = _first_message(test_redis, run_id)["ahead"]
    scripted_llm.add(reply_text("hi"))
    client = scripted_llm.client()
    seen: dict[str, Any] = {}

    def slice_() -> None:
        try:
            seen["outcome"] = run_step(
                run_id=run_id, client=client, owner="w", expected_token=0, ahead=ahead
            )
        finally:
            connections.close_all()

    with psycopg.connect(connection.connection.info.dsn) as blocker:
        blocker.execute("SELECT 1 FROM runs_motorrun WHERE id = %s FOR UPDATE", [run_id])
        thread = threading.Thread(target=slice_)
        thread.start()
        # when the slice starts, then the model is asked while the run is still unclaimed
        _wait_until(lambda: len(scripted_llm.requests) == 1, "the first LLM request")
        assert MotorRun.objects.get(pk=run_id).status == RunStatus.CREATED
        blocker.rollback()
    thread.join(timeout=30)
    # and once claimed, the run uses that answer: one request in all, the run completed with it
    assert seen["outcome"] is SliceOutcome.FINISHED
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.result["summary"]) == (RunStatus.COMPLETED, "hi")
    assert len(scripted_llm.requests) == 1
    assert scripted_llm.requests[0]["messages"][1:] == [{"role": "user", "content": "Say hi"}]


def test_an_answer_to_a_request_the_run_does_not_ask_is_dropped(agent, scripted_llm, test_redis):
    # given a first message whose request is not the run's (as a message that came again after
    # the run moved on would be)
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="Say hi", actor="test")[
        "run_id"
    ]
    ahead = dict(_first_message(test_redis, run_id)["ahead"], task="Say something else")
    scripted_llm.add(reply_text("answer to the other request"), reply_text("hi"))
    # when the slice runs, then the early answer is not used: the model is asked again, and the
    # run records only the answer to its own request
    assert run_step(
        run_id=run_id, client=scripted_llm.client(), owner="w", expected_token=0, ahead=ahead
    ) is (SliceOutcome.FINISHED)
    assert [r["messages"][1]["content"] for r in scripted_llm.requests] == [
        "Say something else",
        "Say hi",
    ]
    run = MotorRun.objects.get(pk=run_id)
    assert run.result["summary"] == "hi"
    messages = Attempt.objects.get(run_id=run_id).messages
    assert "answer to the other request" not in json.dumps(messages)


def test_a_run_cancelled_before_its_first_slice_records_nothing_from_an_early_answer(
    agent, scripted_llm, test_redis
):
    # given a new run cancelled before any worker took it
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="Say hi", actor="test")[
        "run_id"
    ]
    ahead = _first_message(test_redis, run_id)["ahead"]
    run_cancel(run_id=run_id, actor="test")
    scripted_llm.add(reply_text("too late"))
    before = Attempt.objects.get(run_id=run_id).messages
    # when its first message is served, then the message is stale (the cancel moved the run's
    # token on) and the slice does nothing with the answer
    outcome = run_step(
        run_id=run_id, client=scripted_llm.client(), owner="w", expected_token=0, ahead=ahead
    )
    assert outcome is SliceOutcome.LEASE_BUSY
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.CANCELLED
    assert Attempt.objects.get(run_id=run_id).messages == before
    assert not Step.objects.filter(attempt__run_id=run_id).exists()


def test_a_malformed_first_request_is_ignored(agent, scripted_llm, caplog):
    # given a first message whose request description is broken
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="Say hi", actor="test")[
        "run_id"
    ]
    scripted_llm.add(reply_text("hi"))
    # when the slice runs, then it asks the model itself, once, and completes
    outcome = run_step(
        run_id=run_id, client=scripted_llm.client(), owner="w", expected_token=0, ahead={"task": 1}
    )
    assert outcome is SliceOutcome.FINISHED
    assert len(scripted_llm.requests) == 1
    assert "malformed first request" in caplog.text
