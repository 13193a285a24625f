"""A deployed skill survives the loss of every worker: real Celery worker processes run the motor
runs, the deployed server lives under the worker that called it, every worker is SIGKILLed, and
a fresh worker — with no server and no registered tool — starts the server again from what the
database says is deployed. The LLM is the stub server; the sandbox and the mcp SDK are real."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from django.conf import settings

from forge.models import DeployedServer, McpTool, ServerStatus
from forge.services import deploy_version
from runs.models import MotorRun, RunStatus, Step
from runs.services import run_start
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.faults import database_url, wait_for
from tests.runs.helpers import new_workspace
from tests.runs.test_worker_process import _descendants

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _servers_under(pid: int) -> list[int]:
    """Processes below `pid` running a skill's MCP server."""
    found = []
    for child in _descendants(pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"/skill/scripts/server.py" in cmdline:
            found.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")


def _status(run_id: str) -> str:
    return MotorRun.objects.filter(pk=run_id).values_list("status", flat=True).get()


def _run_echo(agent, llm, text: str) -> Step:
    """A motor run granted echoer__echo whose model calls it once; its step once completed."""
    llm.add(reply_tools(tool_call("echoer__echo", {"text": text})), reply_text("done"))
    run_id = run_start(
        agent_id=agent.pk,
        task=f"echo {text}",
        tools=["echoer__echo"],
        workspace=new_workspace(),
        actor="t",
    )["run_id"]
    wait_for(lambda: _status(run_id) in (RunStatus.COMPLETED, RunStatus.FAILED), "the run", 150)
    assert _status(run_id) == RunStatus.COMPLETED
    return Step.objects.get(attempt__run_id=run_id)


def test_a_deployed_skill_is_usable_after_every_worker_was_killed(
    agent, approved_mcp_skill, processes, llm_stub_server
):
    # given a deployed skill and two worker processes
    policy = approved_mcp_skill(agent)
    server_row = deploy_version(policy.skill.current_version, actor="owner")
    env = {"broker": settings.CELERY_BROKER_URL, "database": database_url()}
    workers = [processes.worker(**env, pool="prefork", concurrency=1) for _ in range(2)]
    # when a run uses the tool: a worker starts the server and the call returns its result
    first = _run_echo(agent, llm_stub_server, "first")
    assert (first.tool, first.result["ok"], first.result["output"]) == (
        "echoer__echo",
        True,
        '{\n  "echo": "first"\n}',
    )
    running = [pid for worker in workers for pid in _servers_under(worker.pid)]
    assert len(running) == 1, processes.log_text()[-4000:]
    # and every worker is SIGKILLed (the whole process group: the main process and its child)
    for worker in workers:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
    # then the server died with its worker: nothing of it is left running
    wait_for(lambda: not any(_alive(pid) for pid in running), "the server to end", 30)
    # when a fresh worker, with no server and no registered tool, takes the next run
    fresh = processes.worker(**env, pool="prefork", concurrency=1)
    second = _run_echo(agent, llm_stub_server, "second")
    # then it started the server again from the database and the call has the right result
    assert (second.tool, second.result["ok"], second.result["output"]) == (
        "echoer__echo",
        True,
        '{\n  "echo": "second"\n}',
    )
    restarted = _servers_under(fresh.pid)
    assert len(restarted) == 1 and restarted[0] not in running
    # and the database still says one deployed version, whose tool was called twice
    assert list(DeployedServer.objects.values_list("pk", "status")) == [
        (server_row.pk, ServerStatus.DEPLOYED)
    ]
    tool = McpTool.objects.get(qualified_name="echoer__echo")
    assert (tool.calls, tool.failures, tool.server.recent) == (2, 0, "11")
