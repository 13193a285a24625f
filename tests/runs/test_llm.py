"""Model roles, client configuration and the two scripted providers through the real client."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import openai
import pytest

from runs.errors import LLMUnavailable
from runs.llm import ModelRole, llm_chat, llm_client, model_for_role, report_sent
from tests.fixtures.llm import reply_text, reply_tools, tool_call


def _mock_client(handle: Any, *, retries: int) -> openai.OpenAI:
    """The real client over an in-process transport that answers with `handle`."""
    return openai.OpenAI(
        base_url="http://llm.test/v1",
        api_key="t",
        max_retries=retries,
        http_client=httpx.Client(transport=httpx.MockTransport(handle)),
    )


@pytest.mark.parametrize(
    ("fast", "smart", "motor", "expected"),
    [
        ("", "", "", {"fast": "base", "smart": "base", "motor": "base"}),
        ("f", "", "", {"fast": "f", "smart": "base", "motor": "f"}),
        ("f", "s", "m", {"fast": "f", "smart": "s", "motor": "m"}),
        ("", "s", "m", {"fast": "base", "smart": "s", "motor": "m"}),
    ],
)
def test_roles_fall_back_motor_to_fast_to_default(settings, fast, smart, motor, expected):
    settings.LLM_DEFAULT_MODEL = "base"
    settings.LLM_FAST_MODEL, settings.LLM_SMART_MODEL, settings.LLM_MOTOR_MODEL = fast, smart, motor
    assert {role.value: model_for_role(role) for role in ModelRole} == expected


def test_client_takes_url_key_timeout_and_retries_from_settings(settings):
    settings.LLM_BASE_URL = "http://llm.internal:8080/v1"
    settings.LLM_API_KEY = "k-123"
    settings.LLM_TIMEOUT_SECONDS = 42.0
    settings.LLM_MAX_RETRIES = 5
    client = llm_client()
    assert str(client.base_url) == "http://llm.internal:8080/v1/"
    assert client.api_key == "k-123"
    assert client.max_retries == 5
    assert (client.timeout.read, client.timeout.connect) == (42.0, 10.0)


def test_transient_errors_are_retried_by_the_client(settings, scripted_llm):
    # given an endpoint that fails once with 503 and then answers
    settings.LLM_MOTOR_MODEL = "m"
    seen: list[int] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(1)
        if len(seen) == 1:
            return httpx.Response(503, json={"error": {"message": "busy"}})
        return httpx.Response(200, json=reply_text("fine"))

    client = _mock_client(handle, retries=2)
    # when one chat call is made, then it succeeds on the second request
    assert llm_chat(client=client, messages=[{"role": "user", "content": "x"}]).content == "fine"
    assert len(seen) == 2


def test_stub_server_plays_a_script_over_http_through_the_real_client(settings, llm_stub_server):
    # given a stub server with a tool call then a text answer
    settings.LLM_BASE_URL = llm_stub_server.base_url
    settings.LLM_MOTOR_MODEL = "motor-x"
    llm_stub_server.add(
        reply_tools(tool_call("read", {"path": "a"}, call_id="c9")), reply_text("ok")
    )
    client = llm_client()
    # when two calls are made
    first = llm_chat(client=client, messages=[{"role": "user", "content": "go"}])
    second = llm_chat(client=client, messages=[{"role": "user", "content": "again"}])
    # then the replies are the script, and the requests were recorded with the motor model
    assert [(c.id, c.name, c.arguments) for c in first.tool_calls] == [
        ("c9", "read", '{"path": "a"}')
    ]
    assert (second.content, second.tool_calls) == ("ok", ())
    assert [r["model"] for r in llm_stub_server.requests] == ["motor-x", "motor-x"]
    assert llm_stub_server.requests[1]["messages"] == [{"role": "user", "content": "again"}]


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"<html>gateway</html>", "returned an answer that is not a chat completion"),
        (b'{"choices": []}', "returned no choices"),
        (b'{"choices": [{"index": 0}]}', "returned an answer that is not a chat completion"),
    ],
)
def test_an_answer_that_is_not_a_chat_completion_is_a_clear_model_error(settings, body, why):
    # given an endpoint that answers 200 with something else than a chat completion
    settings.LLM_MOTOR_MODEL = "m"
    client = openai.OpenAI(
        base_url="http://llm.test/v1",
        api_key="t",
        max_retries=0,
        http_client=httpx.Client(
            transport=httpx.MockTransport(lambda request: httpx.Response(200, content=body))
        ),
    )
    # when a chat call is made, then it fails naming the model and what was wrong
    with pytest.raises(LLMUnavailable, match=f"LLM call to model 'm' {why}"):
        llm_chat(client=client, messages=[{"role": "user", "content": "x"}])


def test_the_request_is_the_chat_completions_wire_format_and_object_arguments_are_read(settings):
    # given an endpoint that records the request and sends call arguments as an object
    settings.LLM_MOTOR_MODEL = "m"
    seen: list[httpx.Request] = []
    answer = reply_tools(tool_call("read", {"path": "a.txt"}))
    answer["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = {"path": "a.txt"}

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=answer)

    client = _mock_client(handle, retries=0)
    tools = [{"type": "function", "function": {"name": "read", "parameters": {}}}]
    # when a chat call is made
    reply = llm_chat(client=client, messages=[{"role": "user", "content": "x"}], tools=tools)
    # then the body is plain JSON with model, messages and tools, and the call was read
    (request,) = seen
    assert request.headers["content-type"] == "application/json"
    assert json.loads(request.content) == {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "tools": tools,
    }
    assert [(c.name, json.loads(c.arguments)) for c in reply.tool_calls] == [
        ("read", {"path": "a.txt"})
    ]


def test_a_worker_process_loads_the_runtime_when_it_starts(settings):
    # given the handler a worker's start signals call (worker_ready, worker_process_init)
    import sys

    from celery.signals import worker_process_init, worker_ready

    from runs.llm_request import _client_cache, _default_client
    from runs.signals import warm_runtime_on_worker_start

    settings.LLM_BASE_URL = "http://warm.test/v1"
    receivers = [r[1]() for r in worker_ready.receivers + worker_process_init.receivers]
    assert receivers.count(warm_runtime_on_worker_start) == 2
    # when it runs, then the sandbox's tools are loaded and the LLM client for these settings
    # is built once and kept
    _client_cache.clear()
    warm_runtime_on_worker_start()
    assert "sandbox.tools" in sys.modules
    assert list(_client_cache) == [f"http://warm.test/v1|{settings.LLM_API_KEY}"]
    client = _default_client()
    assert str(client.base_url) == "http://warm.test/v1/"
    assert _default_client() is client is _client_cache[list(_client_cache)[0]]


def test_on_sent_fires_once_when_the_request_is_written_before_the_answer(
    settings, llm_stub_server
):
    # given a real OpenAI-compatible server that holds its answer, and the settings' client
    settings.LLM_BASE_URL = llm_stub_server.base_url
    gate = llm_stub_server.add_gated(reply_text("done"))
    sent: list[int] = []
    result: dict[str, object] = {}

    def call() -> None:
        result["reply"] = llm_chat(
            client=llm_client(),
            messages=[{"role": "user", "content": "x"}],
            on_sent=lambda: sent.append(len(llm_stub_server.requests)),
        )

    thread = threading.Thread(target=call)
    thread.start()
    try:
        # when the request has gone out, then on_sent has run while the answer is still held
        deadline = time.monotonic() + 10
        while not sent and time.monotonic() < deadline:
            time.sleep(0.005)
        assert sent and "reply" not in result
    finally:
        gate.set()
        thread.join(timeout=30)
    # and the call completes with it having run exactly once
    assert result["reply"].content == "done"  # type: ignore[attr-defined]
    assert len(sent) == 1


def test_on_sent_fires_when_the_call_ends_if_the_transport_cannot_report(settings):
    # given a client whose transport never reports a written request (no request hook)
    settings.LLM_MOTOR_MODEL = "m"
    order: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        order.append("answered")
        return httpx.Response(200, json=reply_text("fine"))

    client = _mock_client(handle, retries=0)
    # when a call is made, then on_sent runs once, after the answer came back
    llm_chat(
        client=client,
        messages=[{"role": "user", "content": "x"}],
        on_sent=lambda: order.append("sent"),
    )
    assert order == ["answered", "sent"]


def test_on_sent_fires_once_across_retries_and_never_fails_the_request(settings):
    # given a reporting transport that fails once with 503, and an on_sent that raises
    settings.LLM_MOTOR_MODEL = "m"
    calls: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        request.extensions["trace"]("http11.send_request_body.complete", {})
        calls.append("request")
        if calls.count("request") == 1:
            return httpx.Response(503, json={"error": {"message": "busy"}})
        return httpx.Response(200, json=reply_text("fine"))

    def on_sent() -> None:
        calls.append("sent")
        raise RuntimeError("cannot start a thread")

    client = openai.OpenAI(
        base_url="http://llm.test/v1",
        api_key="t",
        max_retries=2,
        http_client=report_sent(httpx.Client(transport=httpx.MockTransport(handle))),
    )
    # when the call is retried once, then on_sent ran once, at the first write, and the call
    # still succeeded
    reply = llm_chat(client=client, messages=[{"role": "user", "content": "x"}], on_sent=on_sent)
    assert reply.content == "fine"
    assert calls == ["sent", "request", "request"]
