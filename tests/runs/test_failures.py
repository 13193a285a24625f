"""Failure summaries: refusals are invalid tasks (not retryable), the LLM's hint is best effort
and never holds up a failure, and transient failures of idempotent calls are retried once."""

from __future__ import annotations

import time

import pytest

from runs.failures import bailout_failure, run_failure_hint
from runs.models import Attempt, MotorRun, RunStatus, Signal, Step
from runs.services import run_start
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.fixtures.upstream import Answer
from tests.runs.helpers import drive, new_workspace

pytestmark = pytest.mark.django_db


def _failed_by_refusals(agent, scripted_llm) -> MotorRun:
    """A run failed by three refusals of a tool it was not granted."""
    run_id = run_start(
        agent_id=agent.pk, task="Read a.txt", actor="test", workspace=new_workspace()
    )["run_id"]
    scripted_llm.add(*(reply_tools(tool_call("read", {"path": "a.txt"})) for _ in range(3)))
    drive(run_id, scripted_llm.client())
    return MotorRun.objects.get(pk=run_id)


def test_a_streak_of_refusals_fails_the_run_as_an_invalid_task_that_is_not_retryable(
    agent, scripted_llm
):
    # when a run fails by refusals
    run = _failed_by_refusals(agent, scripted_llm)
    # then the summary says invalid_task, not retryable, in the attempt, result and signal
    failure = Attempt.objects.get(run=run).failure
    assert run.status == RunStatus.FAILED
    assert (failure["category"], failure["retryable"], failure["hint"]) == (
        "invalid_task",
        False,
        "",
    )
    assert run.result["failure"] == failure
    assert Signal.objects.get(run=run).payload["failure"] == failure


@pytest.mark.parametrize(
    ("code", "category", "retryable"),
    [
        ("denied", "invalid_task", False),
        ("network_blocked", "invalid_task", False),
        ("http_error", "tool_failure", True),
        ("timeout", "tool_failure", True),
        ("exit_nonzero", "tool_failure", True),
    ],
)
def test_bailout_classification_by_error_code(code, category, retryable):
    got_category, message, got_retryable = bailout_failure(tool="fetch", error_code=code, streak=3)
    assert (got_category.value, got_retryable) == (category, retryable)
    assert "tool 'fetch'" in message and code in message


# --- the LLM's hint ------------------------------------------------------------------------------


@pytest.fixture
def hint_llm(llm_stub_server, settings):
    settings.LLM_BASE_URL = llm_stub_server.base_url
    settings.LLM_API_KEY = "stub"
    settings.MOTOR_FAILURE_HINT_SECONDS = 2.0
    return llm_stub_server


def test_the_hint_is_added_to_the_failure_summary_and_the_runs_result(
    agent, scripted_llm, hint_llm, django_capture_on_commit_callbacks
):
    # given a run that failed (its failure asks for a hint once committed)
    with django_capture_on_commit_callbacks() as callbacks:
        run = _failed_by_refusals(agent, scripted_llm)
    assert len(callbacks) >= 1  # the mutex release and the hint request
    signal_before = Signal.objects.get(run=run).payload
    answer = reply_text("  The run lacks the read tool.\n Grant read and retry. ")
    hint_llm.add({**answer, "usage": {"prompt_tokens": 30, "completion_tokens": 12}})
    # when the hint is asked for
    hint = run_failure_hint(run_id=run.id, attempt_index=0)
    # then it is stored, whitespace folded, on the attempt and in the run's result
    assert hint == "The run lacks the read tool. Grant read and retry."
    assert Attempt.objects.get(run=run).failure["hint"] == hint
    run.refresh_from_db()
    assert run.result["failure"]["hint"] == hint
    # and the request was budgeted and framed the failure
    request = hint_llm.requests[0]
    assert request["max_tokens"] == 150
    assert "Failure: invalid_task: tool 'read' was refused" in request["messages"][1]["content"]
    # and the hint is counted as one more LLM call of the attempt, with the tokens it reported
    attempt = Attempt.objects.get(run=run)
    assert (attempt.llm_calls, attempt.prompt_tokens, attempt.completion_tokens) == (4, 30, 12)
    # and nothing else changed: the signal stays as emitted, a second ask adds nothing
    assert Signal.objects.get(run=run).payload == signal_before
    assert run_failure_hint(run_id=run.id, attempt_index=0) == ""
    assert len(hint_llm.requests) == 1


def test_a_failing_llm_leaves_the_failure_as_it_was(agent, scripted_llm, hint_llm):
    # given a failed run and an LLM that answers 500 (its script is empty)
    run = _failed_by_refusals(agent, scripted_llm)
    before = (Attempt.objects.get(run=run).failure, MotorRun.objects.get(pk=run.pk).result)
    # when the hint is asked for: no exception, no hint, nothing changed
    assert run_failure_hint(run_id=run.id, attempt_index=0) == ""
    after = (Attempt.objects.get(run=run).failure, MotorRun.objects.get(pk=run.pk).result)
    assert after == before
    assert len(hint_llm.requests) == 1  # one call: no retries


def test_a_slow_llm_is_given_up_after_the_budget(agent, scripted_llm, hint_llm):
    # given a failed run and an LLM that would answer only after a minute
    run = _failed_by_refusals(agent, scripted_llm)
    before = Attempt.objects.get(run=run).failure
    gate = hint_llm.add_gated(reply_text("too late"))
    try:
        started = time.monotonic()
        hint = run_failure_hint(run_id=run.id, attempt_index=0)
        elapsed = time.monotonic() - started
    finally:
        gate.set()
    # then the hint is given up within its budget (2 s, plus slack for a loaded machine)
    assert hint == ""
    assert elapsed < 10
    assert Attempt.objects.get(run=run).failure == before


def test_no_hint_is_asked_when_hints_are_off_or_for_a_cancel(
    agent, scripted_llm, hint_llm, settings
):
    run = _failed_by_refusals(agent, scripted_llm)
    settings.MOTOR_FAILURE_HINT_SECONDS = 0
    hint_llm.add(reply_text("unused"))
    assert run_failure_hint(run_id=run.id, attempt_index=0) == ""
    assert hint_llm.requests == []
    assert run_failure_hint(run_id="run_missing", attempt_index=0) == ""


# --- transient tool failures ---------------------------------------------------------------------


@pytest.fixture
def upstream_hosts(upstream, monkeypatch):
    monkeypatch.setenv("MOTOR_SANDBOX_EGRESS_HOSTS", f"api.allowed.test={upstream.ip}")
    upstream.routes_clear()
    yield upstream
    upstream.routes_clear()


def _fetch_run(agent, tmp_path, scripted_llm, method: str) -> MotorRun:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run_id = run_start(
        agent_id=agent.pk,
        task="Get the rate",
        tools=["fetch"],
        allowed_domains=["api.allowed.test"],
        workspace=str(workspace),
        actor="test",
    )["run_id"]
    arguments = {"url": "http://api.allowed.test/rate", "method": method}
    scripted_llm.add(reply_tools(tool_call("fetch", arguments, call_id="f")), reply_text("Done."))
    drive(run_id, scripted_llm.client())
    return MotorRun.objects.get(pk=run_id)


def test_a_502_of_an_idempotent_fetch_is_retried_once_before_the_model_sees_it(
    agent, tmp_path, scripted_llm, upstream_hosts
):
    # given an upstream answering 502 once, then 200
    upstream_hosts.route(
        "api.allowed.test", "/rate", Answer(status=502, body="bad gateway\n"), Answer(body="1.08\n")
    )
    # when a run fetches it with GET
    run = _fetch_run(agent, tmp_path, scripted_llm, "GET")
    # then the call was made twice and its one result is the success, marked as retried
    assert upstream_hosts.requests("api.allowed.test") == ["GET /rate", "GET /rate"]
    step = Step.objects.get(attempt__run=run)
    assert (step.result["ok"], step.result["auto_retried"]) == (True, "http_error")
    assert step.result["output"].startswith(
        "[retried once automatically after a transient failure (http_error)]\n"
    )
    assert "1.08" in step.result["output"]
    # and the model saw only the success, in one tool message; the run completed
    tool_messages = [m for m in scripted_llm.requests[1]["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 1 and "ERROR" not in tool_messages[0]["content"]
    assert run.status == RunStatus.COMPLETED


def test_a_502_of_a_post_is_not_repeated(agent, tmp_path, scripted_llm, upstream_hosts):
    # given the same upstream, and a POST (not idempotent)
    upstream_hosts.route(
        "api.allowed.test", "/rate", Answer(status=502, body="bad gateway\n"), Answer(body="ok\n")
    )
    run = _fetch_run(agent, tmp_path, scripted_llm, "POST")
    # then it was sent once and the model got the 502
    assert upstream_hosts.requests("api.allowed.test") == ["POST /rate"]
    step = Step.objects.get(attempt__run=run)
    assert (step.result["ok"], step.result["error_code"]) == (False, "http_error")
    assert "auto_retried" not in step.result


def test_a_404_is_not_transient_and_is_not_repeated(agent, tmp_path, scripted_llm, upstream_hosts):
    upstream_hosts.route("api.allowed.test", "/rate", Answer(status=404, body="no\n"))
    run = _fetch_run(agent, tmp_path, scripted_llm, "GET")
    assert upstream_hosts.requests("api.allowed.test") == ["GET /rate"]
    assert Step.objects.get(attempt__run=run).result["ok"] is False
