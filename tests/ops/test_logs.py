"""Log lines: JSON objects with the context of the task or request, a console form for bin/dev,
and never a secret value."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.test import Client

from config.logging import formatter
from runs.logcontext import log_context_bind, log_context_clear
from runs.models import RunStatus
from runs.services import run_start
from tests.cognition.worker_support import run_status, wait_for, worker_logs
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import new_workspace

SECRET = "never-log-this-secret-0c5f7a91"  # noqa: S105 - test data


@pytest.fixture
def captured() -> Iterator[Callable[[], list[dict]]]:
    """The JSON lines the project's formatter writes for the root logger, as dicts."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter(fmt="json", secrets=[SECRET]))
    root = logging.getLogger()
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.INFO)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        log_context_clear()


def test_a_line_is_one_json_object_with_level_logger_time_host_and_the_bound_context(captured):
    log_context_bind(run_id="run_0123456789ab", agent="scout", iteration=3)
    logging.getLogger("runs.example").warning("slice %s ended", "early")
    (line,) = captured()
    assert line["event"] == "slice early ended"
    assert (line["level"], line["logger"]) == ("warning", "runs.example")
    assert (line["run_id"], line["agent"], line["iteration"]) == ("run_0123456789ab", "scout", 3)
    assert line["timestamp"].endswith("Z") and line["host"]


def test_secret_values_and_token_shaped_strings_are_redacted(captured):
    logging.getLogger("x").info("value %s and token mc_%s", SECRET, "a" * 40)
    try:
        raise ValueError(f"failed with {SECRET}")
    except ValueError:
        logging.getLogger("x").exception("boom")
    text = json.dumps(captured())
    assert SECRET not in text
    assert "a" * 40 not in text
    assert captured()[0]["event"] == "value [redacted] and token mc_[redacted]"
    # a traceback is data without the frames' local variables
    assert "locals" not in text and captured()[1]["exception"][0]["exc_type"] == "ValueError"


def test_the_console_form_is_one_readable_line() -> None:
    record = logging.LogRecord("runs.x", logging.INFO, __file__, 1, "hello %s", ("you",), None)
    log_context_bind(run_id="run_1")
    try:
        text = formatter(fmt="console").format(record)
    finally:
        log_context_clear()
    assert "\n" not in text
    assert "[info" in text and "hello you" in text and "run_id=run_1" in text


@pytest.mark.django_db
def test_a_request_binds_a_request_id_echoed_in_the_response(client: Client, captured) -> None:
    response = client.get("/api/v1/runs/run_0123456789ab/", HTTP_X_REQUEST_ID="req-42")
    # (unauthenticated: the API logs the refusal through django.request)
    assert response.status_code == 401
    assert response["X-Request-ID"] == "req-42"
    lines = [line for line in captured() if line["logger"] == "django.request"]
    assert lines and all(line["request_id"] == "req-42" for line in lines)
    assert lines[0]["run_id"] == "run_0123456789ab"
    # a header that is not a plain token is replaced by a new id
    other = client.get("/healthz", HTTP_X_REQUEST_ID="bad id\n")
    assert len(other["X-Request-ID"]) == 32


def test_the_settings_redact_every_configured_secret() -> None:
    handler_formatter = logging.getLogger().handlers[0].formatter
    record = logging.LogRecord(
        "x", logging.INFO, __file__, 1, "%s|%s", (django_settings.SECRET_KEY, "ok"), None
    )
    assert django_settings.SECRET_KEY not in handler_formatter.format(record)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("clean_run_queue")
def test_a_real_worker_logs_json_lines_bound_to_the_run(
    agent, llm_stub_server, start_worker, tmp_path: Path
) -> None:
    # given a worker writing JSON lines and a run that writes a file and finishes
    start_worker(LOG_FORMAT="json")
    # (the model's second answer fails once, so the client logs its retry of that request)
    llm_stub_server.add(
        reply_tools(tool_call("write", {"path": "a.txt", "content": SECRET}, call_id="w"))
    )
    llm_stub_server.add_error(503).add(reply_text("Done."))
    run_id = run_start(
        agent_id=agent.pk, task="Write", tools=["write"], workspace=new_workspace(), actor="t"
    )["run_id"]
    wait_for(lambda: run_status(run_id) == RunStatus.COMPLETED, "completion")
    # then its log records are JSON objects, those of the run's task carry the run's context
    records = [
        json.loads(line) for line in worker_logs(tmp_path).splitlines() if line.startswith("{")
    ]
    assert records and all(
        {"event", "level", "logger", "timestamp", "host"} <= set(r) for r in records
    )
    of_run = [r for r in records if r.get("run_id") == run_id]
    assert of_run, records[-5:]
    assert {(r["task"], r["agent"], r["attempt"]) for r in of_run} == {
        ("runs.run_step", agent.name, 1)
    }
    # and the lines after the first reply name its iteration (the run's first LLM answer), the
    # second request's retry among them, which does not name the tool call before it (the
    # step is over)
    retries = [r for r in of_run if r["event"].startswith("Retrying request")]
    assert [(r["logger"], r.get("iteration")) for r in retries] == [("openai._base_client", 1)]
    assert [("step" in r, "tool" in r) for r in retries] == [(False, False)]
    assert SECRET not in worker_logs(tmp_path)


def test_an_llm_request_logs_no_line_of_the_http_client(captured) -> None:
    """The HTTP client's per-request INFO line ("HTTP Request: POST ...") is off by the
    settings: a line per LLM call would cost CPU on every iteration and say nothing new."""
    import httpx2

    from runs.llm import llm_client

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, json={"ok": True})

    client = llm_client(http_client=httpx2.Client(transport=httpx2.MockTransport(answer)))
    assert client.post("/chat/completions", body={}, cast_to=bytes) == b'{"ok":true}'
    logging.getLogger("runs.example").info("the runtime's own line")
    assert [line["logger"] for line in captured()] == ["runs.example"]
