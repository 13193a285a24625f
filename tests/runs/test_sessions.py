"""One sandbox session per run in a worker process: warm across slices, closed when it must."""

from __future__ import annotations

import time

import pytest

from runs.services import SliceOutcome, run_cancel, run_start, run_step
from runs.sessions import open_run_sessions, run_session_peek
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import drive

pytestmark = pytest.mark.django_db

# /tmp inside the sandbox is a tmpfs of the session: a file there survives only within one session.
WRITE_TMP = "open('/tmp/marker', 'w').write('kept')\n"
READ_TMP = (
    "import os\nprint(open('/tmp/marker').read() if os.path.exists('/tmp/marker') else 'gone')\n"
)


def _wait_for(predicate, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return bool(predicate())


def test_the_session_stays_up_across_slices_and_closes_when_the_run_ends(
    agent, scripted_llm, tmp_path, settings
):
    settings.MOTOR_SLICE_SECONDS = 0  # one iteration per slice
    # given a run whose two code calls come from two LLM calls (two slices)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run_id = run_start(
        agent_id=agent.pk, task="t", tools=["code"], workspace=str(workspace), actor="t"
    )["run_id"]
    scripted_llm.add(
        reply_tools(tool_call("code", {"code": WRITE_TMP})),
        reply_tools(tool_call("code", {"code": READ_TMP})),
        reply_text("done"),
    )
    client = scripted_llm.client()
    # when the first slice ran, its session is still open for the run
    assert run_step(run_id=run_id, client=client, owner="w") is SliceOutcome.CONTINUED
    first = run_session_peek(run_id)
    assert first is not None
    # and the second slice ran in that same session (the tmpfs file is still there)
    assert run_step(run_id=run_id, client=client, owner="w") is SliceOutcome.CONTINUED
    assert run_session_peek(run_id) is first
    from runs.models import Step

    outputs = [s.result["output"].strip() for s in Step.objects.filter(attempt__run_id=run_id)]
    assert outputs == ["", "kept"]
    # then the final slice closes it
    assert run_step(run_id=run_id, client=client, owner="w") is SliceOutcome.FINISHED
    assert first.closed is True
    assert run_id not in open_run_sessions()


def test_a_cancelled_run_loses_its_session_at_the_next_wake_up(agent, scripted_llm, tmp_path):
    # given a run paused on a question after a sandboxed call (session kept for the answer)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run_id = run_start(
        agent_id=agent.pk, task="t", tools=["code"], workspace=str(workspace), actor="t"
    )["run_id"]
    scripted_llm.add(
        reply_tools(tool_call("code", {"code": WRITE_TMP})),
        reply_tools(tool_call("ask_user", {"question": "Go on?"})),
    )
    drive(run_id, scripted_llm.client())
    session = run_session_peek(run_id)
    assert session is not None and session.closed is False
    # when the run is cancelled and the wake-up message it sends is served here
    run_cancel(run_id=run_id, actor="t")
    outcome = run_step(run_id=run_id, client=scripted_llm.client(), owner="w")
    # then the session is closed and nothing else happened
    assert outcome is SliceOutcome.NOT_RUNNABLE
    assert session.closed is True
    assert run_id not in open_run_sessions()
    assert scripted_llm.remaining == 0 and len(scripted_llm.requests) == 2


def test_an_idle_session_is_closed_after_the_idle_timeout(agent, scripted_llm, settings, tmp_path):
    # given a short idle timeout and a run paused on a question after a sandboxed call
    settings.MOTOR_SANDBOX_IDLE_TIMEOUT_SECONDS = 1
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run_id = run_start(
        agent_id=agent.pk, task="t", tools=["code"], workspace=str(workspace), actor="t"
    )["run_id"]
    scripted_llm.add(
        reply_tools(tool_call("code", {"code": WRITE_TMP})),
        reply_tools(tool_call("ask_user", {"question": "Go on?"})),
    )
    drive(run_id, scripted_llm.client())
    session = run_session_peek(run_id)
    assert session is not None
    # when nobody uses it, the registry's reaper closes it
    assert _wait_for(lambda: session.closed)
    # then the run itself still waits for its answer
    from runs.models import MotorRun

    assert MotorRun.objects.get(pk=run_id).status == "awaiting_input"
    assert run_id not in open_run_sessions()


@pytest.mark.django_db(transaction=True)
def test_a_slice_whose_lease_is_taken_over_mid_call_kills_the_call_and_closes_the_session(
    agent, scripted_llm, tmp_path
):
    # given a slice (in a thread, as in a worker) running a long call on a network-granted run
    import threading

    from django.db import connections
    from django.db.models import F

    from runs.models import MotorRun, Step

    workspace = tmp_path / "ws"
    workspace.mkdir()
    program = (
        "import time\nopen('started', 'w').write('x')\ntime.sleep(30)\n"
        "open('finished', 'w').write('x')\n"
    )
    run_id = run_start(
        agent_id=agent.pk,
        task="t",
        tools=["code"],
        allowed_domains=["example.com"],
        workspace=str(workspace),
        actor="t",
    )["run_id"]
    scripted_llm.add(reply_tools(tool_call("code", {"code": program})))
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
    assert session is not None
    # when another slice takes the run over (its claim moves the fencing token)
    MotorRun.objects.filter(pk=run_id).update(lease_token=F("lease_token") + 1)
    thread.join(timeout=20)
    # then the call was killed, the slice wrote nothing more and its session is closed
    assert thread.is_alive() is False
    assert outcomes == [SliceOutcome.LEASE_LOST]
    assert session.closed is True and run_id not in open_run_sessions()
    assert not (workspace / "finished").exists()
    assert list(Step.objects.filter(attempt__run_id=run_id).values_list("state", flat=True)) == [
        "intent"
    ]
