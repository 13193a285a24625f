"""What a slice holds while it waits: no database connection, and no sandbox before a tool call."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections

from runs.models import MotorRun, RunStatus
from runs.services import SliceOutcome, run_start, run_step
from runs.sessions import run_session_peek
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import drive, new_workspace

pytestmark = pytest.mark.django_db(transaction=True)


def _other_backends() -> list[tuple[str, str]]:
    """(state, query) of every other connection to the test database."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT state, query FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return [(str(state), str(query)) for state, query in cursor.fetchall()]


def _slice_in_thread(
    run_id: str, client: Any, owner: str, seen: dict[str, Any]
) -> threading.Thread:
    """Run one slice in its own thread, as a worker does; its connection and outcome land in
    `seen`."""

    def slice_() -> None:
        seen["connection"] = connections["default"]
        try:
            seen["outcome"] = run_step(run_id=run_id, client=client, owner=owner)
        finally:
            connections.close_all()

    thread = threading.Thread(target=slice_)
    thread.start()
    return thread


def _wait_until(predicate: Any, what: str) -> None:
    event = threading.Event()
    for _ in range(600):
        if predicate():
            return
        event.wait(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_slice_holds_no_connection_while_the_model_thinks_and_opens_the_sandbox_meanwhile(
    agent, scripted_llm, tmp_path: Path, settings
):
    settings.MOTOR_SLICE_SECONDS = 0  # one iteration per slice, to look between them
    # given a run granted `read` whose first LLM reply is held back
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("hello\n")
    run_id = run_start(
        agent_id=agent.pk,
        task="Read the notes",
        tools=["read"],
        workspace=str(workspace),
        actor="test",
    )["run_id"]
    gate = scripted_llm.add_gated(reply_tools(tool_call("read", {"path": "notes.txt"})))
    scripted_llm.add(reply_text("The notes say hello."))
    client = scripted_llm.client()
    seen: dict[str, Any] = {}
    thread = _slice_in_thread(run_id, client, "slice-thread", seen)
    try:
        # when the slice is waiting for the model's first reply
        _wait_until(lambda: len(scripted_llm.requests) == 1, "the first LLM request")
        # then it has already taken the lease and started the run ...
        run = MotorRun.objects.get(pk=run_id)
        assert run.status == RunStatus.RUNNING and run.lease_owner == "slice-thread"
        # ... but holds no database connection and no transaction while it waits
        assert seen["connection"].connection is None
        assert not [
            state for state, _ in _other_backends() if state.startswith("idle in transaction")
        ]
        # ... and opens the run's sandbox session meanwhile, so the first call finds it ready
        _wait_until(lambda: run_session_peek(run_id) is not None, "the session opened ahead")
        warmed = run_session_peek(run_id)
    finally:
        gate.set()
        thread.join(timeout=60)
    # when the reply asks for a read, it runs in that session, which stays warm for the run
    assert seen["outcome"] is SliceOutcome.CONTINUED
    session = run_session_peek(run_id)
    assert session is warmed and session.closed is False
    assert drive(run_id, client) == [SliceOutcome.FINISHED]
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
    assert session.closed is True


def test_a_run_granted_no_sandbox_tool_opens_no_session(agent, scripted_llm):
    # given a run with no granted tool, whose model asks the user and then answers
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="Ask", actor="test")[
        "run_id"
    ]
    scripted_llm.add(reply_tools(tool_call("ask_user", {"question": "Which?"})))
    # when its slice runs, then no sandbox session was opened for it
    assert drive(run_id, scripted_llm.client()) == [SliceOutcome.PAUSED]
    assert run_session_peek(run_id) is None


@pytest.mark.django_db(transaction=True)
def test_a_session_opened_ahead_is_closed_when_the_run_is_cancelled_during_the_model_call(
    agent, scripted_llm, tmp_path: Path
):
    # given a run granted `read` whose model never answers before the run is cancelled
    from runs.services import run_cancel

    workspace = tmp_path / "ws"
    workspace.mkdir()
    run_id = run_start(
        agent_id=agent.pk, task="Read", tools=["read"], workspace=str(workspace), actor="test"
    )["run_id"]
    gate = scripted_llm.add_gated(reply_text("too late"))
    client = scripted_llm.client()
    outcome: dict[str, Any] = {}
    thread = _slice_in_thread(run_id, client, "w", outcome)
    _wait_until(lambda: run_session_peek(run_id) is not None, "the session opened ahead")
    session = run_session_peek(run_id)
    # when the run is cancelled while the model thinks, and the model then answers
    run_cancel(run_id=run_id, actor="test")
    gate.set()
    thread.join(timeout=60)
    # then the slice lost its lease and the session it opened ahead is closed
    assert outcome["outcome"] is SliceOutcome.LEASE_LOST
    assert session.closed is True and run_session_peek(run_id) is None


def test_a_waiting_signal_long_poll_holds_no_database_connection(agent):
    # given a long-poll for the agent's signals, in its own thread as in a web worker
    from cognition.api.signals import signals_wait
    from runs.outbox import signal_emit

    seen: dict[str, Any] = {}

    def long_poll() -> None:
        seen["connection"] = connections["default"]
        try:
            seen["signals"] = signals_wait(agent_id=agent.pk, after=0, limit=10, wait_s=25)
        finally:
            connections.close_all()

    thread = threading.Thread(target=long_poll)
    thread.start()
    try:
        # when it has read once and waits for a signal to commit
        _wait_until(
            lambda: "connection" in seen and seen["connection"].connection is None,
            "the long-poll to give its connection back",
        )
        # then it is still waiting, with no connection and no transaction of its own
        assert thread.is_alive()
        assert not [
            state for state, _ in _other_backends() if state.startswith("idle in transaction")
        ]
    finally:
        # and a signal committed now still wakes it with that signal
        signal_emit(agent_id=agent.pk, kind="motor_result", payload={"status": "woken"})
        thread.join(timeout=30)
    assert [signal.payload for signal in seen["signals"]] == [{"status": "woken"}]
