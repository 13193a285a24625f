"""manage.py follow_run against a real HTTP server and a real worker: steps printed as they
happen, the question answered from stdin, the exit status the run's outcome."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from pytest_django.live_server_helper import LiveServer

from cognition.services import agent_issue_token, personal_token_create
from runs.models import RunStatus
from runs.services import run_cancel, run_start
from tests.cognition.worker_support import run_status, wait_for
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import new_workspace

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("clean_run_queue"),
]

ROOT = Path(__file__).resolve().parents[2]


class Follow:
    """follow_run as a child process; its output lines collected by a thread."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "follow_run", *args],
            cwd=ROOT,
            env=dict(os.environ),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line.rstrip("\n"))

    def wait_for_line(self, start: str, timeout_s: float = 90.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            self.lines.append(line)
            if line.startswith(start):
                return line
        raise AssertionError(f"no line starting {start!r}; got {self.lines}")

    def finish(self, timeout_s: float = 90.0) -> int:
        code = self.process.wait(timeout=timeout_s)
        time.sleep(0.2)
        while not self._queue.empty():
            self.lines.append(self._queue.get())
        return code


def test_follow_prints_each_step_answers_the_question_and_exits_0_on_completion(
    live_server: LiveServer, agent, llm_stub_server, start_worker
) -> None:
    # given a worker and a model that writes, asks for a city, writes it and answers
    start_worker()
    llm_stub_server.add(
        reply_tools(tool_call("write", {"path": "plan.txt", "content": "draft"}, call_id="w")),
        reply_tools(tool_call("ask_user", {"question": "Which city?"}, call_id="q")),
        reply_tools(tool_call("write", {"path": "city.txt", "content": "Berlin"}, call_id="c")),
        reply_text("Wrote Berlin to city.txt."),
    )
    token = personal_token_create(user=agent.owner, name="cli", actor=agent.owner).raw
    run_id = run_start(
        agent_id=agent.pk,
        task="Ask for a city",
        tools=["write"],
        workspace=new_workspace(),
        actor="t",
    )["run_id"]
    # when follow_run follows it with the owner's token and the user types the answer
    follow = Follow(run_id, "--url", live_server.url, "--token", token, "--agent", agent.name)
    assert follow.wait_for_line("Following ") == f'Following {run_id}: "Ask for a city"'
    first = follow.wait_for_line("[attempt 1 · iteration 1]")
    assert first.startswith('[attempt 1 · iteration 1] write(path="plan.txt", content="draft") ')
    assert first.endswith(' ms → ok: "wrote 5 bytes to plan.txt"')
    assert follow.wait_for_line("? ") == "? Which city?"
    assert follow.process.stdin is not None
    follow.process.stdin.write("Berlin\n")
    follow.process.stdin.flush()
    # then the answer reaches the run, the next steps are printed, and the exit status is 0
    assert follow.wait_for_line("→ ") == "→ answered (200)"
    assert follow.finish() == 0
    assert run_status(run_id) == RunStatus.COMPLETED
    assert llm_stub_server.requests[2]["messages"][-1]["content"] == "Berlin"
    text = "\n".join(follow.lines)
    assert '[attempt 1 · iteration 3] write(path="city.txt", content="Berlin")' in text
    assert follow.lines[-2].startswith("completed after ")
    assert follow.lines[-1] == "  Wrote Berlin to city.txt."


def test_follow_last_with_an_agent_token_exits_2_when_the_run_is_cancelled(
    live_server: LiveServer, agent, llm_stub_server, start_worker
) -> None:
    start_worker()
    llm_stub_server.add(reply_tools(tool_call("ask_user", {"question": "Go on?"}, call_id="q")))
    token = agent_issue_token(agent=agent, actor=agent.owner).raw
    run_id = run_start(
        agent_id=agent.pk, task="Wait", tools=["write"], workspace=new_workspace(), actor="t"
    )["run_id"]
    wait_for(lambda: run_status(run_id) == RunStatus.AWAITING_INPUT, "the question")
    # when follow_run follows the agent's newest run without prompting, and the run is cancelled
    follow = Follow("--last", "--no-input", "--url", live_server.url, "--token", token)
    assert follow.wait_for_line("Following ") == f'Following {run_id}: "Wait"'
    run_cancel(run_id=run_id, actor="t", emit_signal=True)
    # then it ends with the cancelled run's status
    assert follow.finish() == 2
    assert any(line.startswith("cancelled after ") for line in follow.lines)


def test_follow_refuses_a_wrong_token_with_status_3(live_server: LiveServer, agent) -> None:
    follow = Follow("run_000000000000", "--url", live_server.url, "--token", "mc_wrong")
    assert follow.finish() == 3
    assert follow.lines == [
        "Cannot follow the run: 401 authentication_failed: Invalid or revoked agent token."
    ]
