"""Cancelling a run kills its running sandboxed call, on each isolating backend."""

from __future__ import annotations

import os
import threading
import time

import pytest
from django.db import connections

from runs.models import MotorRun, Step
from runs.services import SliceOutcome, run_cancel, run_start, run_step
from runs.sessions import open_run_sessions, run_session_peek
from tests.fixtures.llm import reply_tools, tool_call

PROGRAM = (
    "import time\nopen('started', 'w').write('x')\ntime.sleep(30)\n"
    "open('finished', 'w').write('x')\n"
)


def _descendants(pid: int) -> set[int]:
    """Every process below `pid` (through /proc/<pid>/task/*/children)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children") as fh:
                    children = {int(child) for child in fh.read().split()}
            except OSError:
                continue
            todo.extend(children - found)
            found |= children
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def _wait_for(predicate, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("backend", ["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def test_cancelling_a_run_kills_its_running_call(backend, agent, scripted_llm, settings, tmp_path):
    # given a run on `backend` whose slice (in a thread, as in a worker) runs a 30-second program
    settings.SANDBOX_BACKEND = backend
    settings.MOTOR_CALL_WATCH_INTERVAL_SECONDS = 0.2
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run_id = run_start(
        agent_id=agent.pk, task="t", tools=["code"], workspace=str(workspace), actor="t"
    )["run_id"]
    scripted_llm.add(reply_tools(tool_call("code", {"code": PROGRAM})))
    outcomes: list[SliceOutcome] = []

    def slice_() -> None:
        try:
            outcomes.append(run_step(run_id=run_id, client=scripted_llm.client(), owner="w1"))
        finally:
            connections.close_all()

    thread = threading.Thread(target=slice_)
    thread.start()
    assert _wait_for(lambda: (workspace / "started").exists())
    session = run_session_peek(run_id)
    assert session is not None and session.backend == backend
    # (the sandbox's processes, the running program among them; on bwrap its uid may be leased
    # again at once by a spare sandbox the pool starts, so processes are followed by pid)
    sandbox_pids = _descendants(session.inner._proc.pid) if backend == "bwrap" else set()
    assert backend != "bwrap" or len(sandbox_pids) >= 2  # the supervisor and the program at least
    # when the run is cancelled while the program runs
    assert run_cancel(run_id=run_id, actor="t")["new_status"] == "cancelled"
    thread.join(timeout=25)
    # then the call was killed long before the program's end, the slice recorded nothing more,
    # and the session is closed
    assert thread.is_alive() is False
    assert outcomes == [SliceOutcome.LEASE_LOST]
    assert session.closed is True and run_id not in open_run_sessions()
    assert MotorRun.objects.get(pk=run_id).status == "cancelled"
    assert list(Step.objects.filter(attempt__run_id=run_id).values_list("state", flat=True)) == [
        "intent"
    ]
    # and nothing of the program runs anywhere any more
    assert not (workspace / "finished").exists()
    if backend == "bwrap":
        assert [pid for pid in sandbox_pids | {session.inner._proc.pid} if _alive(pid)] == []
    else:
        import docker

        engine = docker.from_env()
        labelled = engine.containers.list(
            all=True, filters={"label": f"motor-cortex.session={session.id}"}
        )
        assert labelled == []
