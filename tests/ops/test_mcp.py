"""The MCP face of core.*, served by `manage.py serve_mcp` (uvicorn, a real process) and driven by
the mcp SDK's own client: the same tools as /api/v1/tools/, a run started, its question answered
and its result heard through core_signals; refusals exactly as the REST API's."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from django.conf import settings
from django.test import Client as DjangoClient
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from cognition.models import Agent
from cognition.services import agent_issue_token
from runs.models import MotorRun, RunStatus
from runs.services import run_start
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import new_workspace
from tests.runs.test_worker_process import _database_url

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def mcp_url(tmp_path: Path) -> Iterator[str]:
    """`manage.py serve_mcp` on a free port, on the test database."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (tmp_path / "mcp.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "manage.py", "serve_mcp", "--port", str(port)],
        cwd=ROOT,
        env={
            **os.environ,
            "DATABASE_URL": _database_url(),
            "MOTOR_WORKSPACES_DIR": str(settings.MOTOR_WORKSPACES_DIR),
        },
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(url, timeout=1)
            break
        except httpx.TransportError:
            assert process.poll() is None, (tmp_path / "mcp.log").read_text()
            assert time.monotonic() < deadline, "serve_mcp did not start"
            time.sleep(0.3)
    try:
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
        log.close()


def _mcp(url: str, token: str, **headers: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}", **headers}, timeout=60)
    return Client(streamable_http_client(url, http_client=http))


def _call(url: str, token: str, name: str, arguments: dict[str, Any], **headers: str) -> dict:
    async def go() -> dict:
        async with _mcp(url, token, **headers) as client:
            result = await client.call_tool(name, arguments)
            return json.loads(result.content[0].text)

    return asyncio.run(go())


def _token(agent: Agent) -> str:
    return agent_issue_token(agent=agent, actor=agent.owner).raw


def test_the_tools_are_those_of_the_rest_api_plus_core_signals(mcp_url: str, agent) -> None:
    token = _token(agent)

    async def go() -> Any:
        async with _mcp(mcp_url, token) as client:
            return await client.list_tools()

    tools = asyncio.run(go()).tools
    rest = DjangoClient().get("/api/v1/tools/", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert [t.name for t in tools] == [s["function"]["name"] for s in rest] + ["core_signals"]
    for tool, schema in zip(tools, rest, strict=False):
        assert tool.description == schema["function"]["description"]
        assert tool.input_schema == schema["function"]["parameters"]


@pytest.mark.usefixtures("clean_run_queue")
def test_a_brain_starts_a_run_answers_its_question_and_gets_its_result_over_mcp(
    mcp_url: str, agent, llm_stub_server, start_worker
) -> None:
    # given an agent trusted to relay its user's consent, a worker and a scripted model
    Agent.objects.filter(pk=agent.pk).update(trusted_for_relayed_consent=True)
    token = _token(agent)
    start_worker()
    llm_stub_server.add(
        reply_tools(tool_call("ask_user", {"question": "Which city?"}, call_id="q")),
        reply_tools(tool_call("write", {"path": "city.txt", "content": "Berlin"}, call_id="w")),
        reply_text("Wrote Berlin to city.txt."),
    )
    user = {"X-Motor-Trigger": "user_message"}
    # when it starts a run through core_act
    started = _call(
        mcp_url,
        token,
        "core_act",
        {"mode": "agentic", "task": "Ask me for a city", "tools": ["write"], "domains": []},
        **user,
    )
    assert started["ok"] is True, started
    run_id = started["result"]["run_id"]
    # then the question arrives as a motor_result signal through core_signals
    page = _call(mcp_url, token, "core_signals", {"after": 0, "wait": 30})
    assert page["ok"] is True
    (question,) = page["result"]["results"]
    assert (question["kind"], question["run_id"], question["payload"]["status"]) == (
        "motor_result",
        run_id,
        "awaiting_input",
    )
    assert question["payload"]["question"] == "Which city?"
    # when it answers on the user's behalf
    answered = _call(
        mcp_url,
        token,
        "core_task",
        {"action": "respond", "run_id": run_id, "answer": "Berlin"},
        **user,
    )
    assert answered["ok"] is True, answered
    # then the result arrives as the next signal, and the run is complete
    cursor = page["result"]["next"]
    result_page = _call(mcp_url, token, "core_signals", {"after": cursor, "wait": 30})
    (done,) = result_page["result"]["results"]
    assert (done["run_id"], done["payload"]["status"]) == (run_id, "completed")
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
    status = _call(mcp_url, token, "core_task", {"action": "status", "run_id": run_id})
    assert status["result"]["status"] == "completed"

    # and the signals resource lists both, oldest first
    async def read() -> Any:
        async with _mcp(mcp_url, token) as client:
            return await client.read_resource("motor://signals")

    listed = json.loads(asyncio.run(read()).contents[0].text)
    assert [s["payload"]["status"] for s in listed["result"]] == ["awaiting_input", "completed"]


@pytest.mark.parametrize(
    "authorization", [None, "Bearer mc_not-a-real-token", "Token abc", "Bearer"]
)
def test_an_unauthenticated_call_is_refused_exactly_as_the_rest_api_refuses_it(
    mcp_url: str, authorization: str | None
) -> None:
    headers = {"Authorization": authorization} if authorization is not None else {}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    mcp = httpx.post(
        mcp_url,
        json=body,
        headers={**headers, "Accept": "application/json, text/event-stream"},
        timeout=10,
    )
    extra = {"HTTP_AUTHORIZATION": authorization} if authorization is not None else {}
    rest = DjangoClient().get("/api/v1/tools/", **extra)
    assert mcp.status_code == rest.status_code == 401
    assert mcp.json() == rest.json()
    assert mcp.headers.get("WWW-Authenticate") == rest.get("WWW-Authenticate")


def test_another_agents_run_is_refused_as_the_rest_api_refuses_it(mcp_url: str, make_agent) -> None:
    owner_agent, other = make_agent(), make_agent()
    run_id = run_start(
        agent_id=owner_agent.pk, task="Mine", tools=["write"], workspace=new_workspace(), actor="t"
    )["run_id"]
    token = _token(other)
    refused = _call(mcp_url, token, "core_task", {"action": "status", "run_id": run_id})
    rest = DjangoClient().get(f"/api/v1/runs/{run_id}/", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert rest.status_code == 404
    assert refused == {"ok": False, "error": rest.json()["error"]}
    # and nothing changed for the run
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.CREATED
