"""The browser under real Celery worker processes, on both isolating backends: a worker SIGKILLed
right after an approved submitting click leaves its outcome unknown (reported, never clicked
again; a second click waits for the owner); a worker SIGKILLed in the middle of an action leaves
no browser process behind (the sandbox, and the browser in it, die with their owner: bwrap by
--die-with-parent, docker by the supervisor's stdin closing with the owner's attach socket); a
run's browser time is counted in the database, so the pool process that takes the run over after
a crash keeps counting."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runs.browser_models import BrowserTime
from runs.models import ApprovalRequest, MotorRun, RunStatus, Step
from runs.pipeline.decide import APPROVAL_SUMMARY
from runs.services import run_approve, run_start
from sandbox.reaper import descendants, docker_sandboxes, kill_containers
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.fixtures.portal import HOST, serve_portal
from tests.fixtures.upstream import upstream  # noqa: F401 (fixture)
from tests.runs.helpers import new_workspace
from tests.runs.test_worker_process import (  # noqa: F401 (fixture)
    _pool_children,
    _sandbox_processes,
    _status,
    _wait_for,
    start_worker,
)

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PORTAL = f"http://{HOST}"
SUBMIT = {"action": "click", "ref": "e7", "submit": True}


@pytest.fixture(params=["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request) -> Iterator[str]:
    """The isolating backend the test's workers run on (their SANDBOX_BACKEND)."""
    before = set(docker_sandboxes()) if request.param == "docker" else set()
    yield str(request.param)
    if request.param == "docker":
        # a killed owner's container stops but stays until a sweep; remove this test's
        for session_id, ids in docker_sandboxes().items():
            if session_id not in before:
                kill_containers(ids)


def _sandboxed(backend: str, worker, run_id: str) -> list[int]:
    """The processes of the run's sandbox: under the worker's bwrap, or in its container."""
    if backend == "bwrap":
        return _sandbox_processes(worker, run_id)
    import docker

    engine = docker.from_env()
    pids = [
        int(engine.containers.get(cid).attrs["State"]["Pid"])
        for cid in docker_sandboxes().get(run_id, [])
    ]
    return [pid for top in pids if top > 0 for pid in (top, *descendants(top))]


def _hosts(upstream) -> str:  # noqa: F811
    return f"{HOST}={upstream.ip},evil.test={upstream.ip}"


def _browse(call_id: str, **arguments: object) -> dict:
    return reply_tools(tool_call("browser", arguments, call_id=call_id))


def test_sigkill_between_the_approved_click_and_its_record_is_outcome_unknown_never_a_resubmit(
    backend,
    agent,
    llm_stub_server,
    start_worker,  # noqa: F811
    upstream,  # noqa: F811
    tmp_path,
):
    # given a worker that dies (SIGKILL, once) right after a call ran, before its result is kept
    upstream.routes_clear()
    serve_portal(upstream)
    marker = tmp_path / "crashed"
    worker = start_worker(
        SANDBOX_BACKEND=backend,
        MOTOR_SANDBOX_EGRESS_HOSTS=_hosts(upstream),
        MOTOR_TEST_CRASH_AT=f"after_execution:{marker}",
    )
    _wait_for(lambda: len(_pool_children(worker)) == 1, "the worker's pool process")
    # and a gated run that opens the meters page (that call's end is the first crash point:
    # a read-only call is reported as interrupted and the model reads the page again)
    llm_stub_server.add(
        _browse("nav", action="navigate", url=f"{PORTAL}/meters"),
        _browse("nav2", action="navigate", url=f"{PORTAL}/meters"),
        _browse("submit", **SUBMIT),
    )
    run_id = run_start(
        agent_id=agent.pk,
        task="Submit the readings",
        tools=["browser"],
        allowed_domains=[HOST],
        approval_required=True,
        workspace=new_workspace(),
        actor="t",
    )["run_id"]
    # (a browser starts in seconds, more on a loaded host: generous waits)
    _wait_for(lambda: _status(run_id) == RunStatus.AWAITING_APPROVAL, "the submit's approval", 240)
    assert marker.exists()
    marker.unlink()  # the next call's end (the approved click) kills the worker again
    approval = ApprovalRequest.objects.get(run_id=run_id)
    assert approval.action == {"tool": "browser", "arguments": SUBMIT}

    # when the owner approves and the worker dies right after the click (and the model, told
    # the outcome is unknown, wants to click again)
    llm_stub_server.add(_browse("again", **SUBMIT))
    run_approve(run_id=run_id, approval_id=approval.pk, actor="user:1")
    _wait_for(lambda: marker.exists(), "the crash after the click", 240)
    _wait_for(
        lambda: ApprovalRequest.objects.filter(run_id=run_id).count() == 2,
        "the owner asked about the second click",
        240,
    )

    # then the form went in once; the click's outcome is reported as unknown, and the second
    # click waits for the owner
    assert upstream.requests(HOST).count("POST /readings") == 1
    submit = Step.objects.get(attempt__run_id=run_id, tool_call_id="submit")
    assert (submit.state, submit.result["error_code"]) == ("done", "interrupted")
    assert "its outcome is unknown" in submit.result["output"]
    assert _status(run_id) == RunStatus.AWAITING_APPROVAL
    asked = ApprovalRequest.objects.filter(run_id=run_id).order_by("id").last()
    assert (asked.status, asked.summary, asked.action) == (
        "pending",
        APPROVAL_SUMMARY,
        {"tool": "browser", "arguments": SUBMIT},
    )
    time.sleep(2.0)
    assert upstream.requests(HOST).count("POST /readings") == 1


@pytest.mark.parametrize("action", ["page_load", "wait_on_the_page"])
def test_a_worker_sigkilled_mid_action_leaves_no_browser_process(
    backend,
    action,
    agent,
    llm_stub_server,
    start_worker,  # noqa: F811
    upstream,  # noqa: F811
):
    # given a run whose browser is in the middle of an action that may take 60 s: waiting on a
    # page that takes 20 s, or, on a loaded page, for a text that never appears (an action that
    # needs nothing from the host, so its end does not come from the owner's egress proxy)
    upstream.routes_clear()
    serve_portal(upstream)
    worker = start_worker(
        SANDBOX_BACKEND=backend,
        MOTOR_SANDBOX_EGRESS_HOSTS=_hosts(upstream),
        MOTOR_BROWSER_ACTION_TIMEOUT_SECONDS="60",
    )
    # (the upstream counts requests across tests: the path names this test's backend)
    slow = f"/slow?seconds=20&backend={backend}"
    if action == "page_load":
        llm_stub_server.add(_browse("slow", action="navigate", url=f"{PORTAL}{slow}"))
    else:
        llm_stub_server.add(
            _browse("nav", action="navigate", url=f"{PORTAL}/meters"),
            _browse("slow", action="wait", text="A text no page of the portal has"),
        )
    run_id = run_start(
        agent_id=agent.pk,
        task="Open the slow page",
        tools=["browser"],
        allowed_domains=[HOST],
        workspace=new_workspace(),
        actor="t",
    )["run_id"]
    if action == "page_load":
        _wait_for(lambda: upstream.seen(slow) == 1, "the page request", 240)
    else:
        _wait_for(
            lambda: Step.objects.filter(attempt__run_id=run_id, tool_call_id="slow").exists(),
            "the wait's intent",
            240,
        )
        time.sleep(1.0)  # the call reaches the browser
    sandboxed = _sandboxed(backend, worker, run_id)
    names = {Path(f"/proc/{pid}/comm").read_text().strip() for pid in sandboxed}
    assert "chromium" in names
    # when the worker process holding the run is killed (its parent first, so that no next
    # pool process takes the run over and sweeps the dead owner's sandbox: the sandbox must
    # die with its owner alone)
    owner = MotorRun.objects.filter(pk=run_id).values_list("lease_owner", flat=True).get()
    os.kill(worker.pid, signal.SIGKILL)
    os.kill(int(owner.split(":")[1]), signal.SIGKILL)

    # then the sandbox and every browser process in it are gone at once, not when the page
    # or the action's timeout ends
    def alive(pid: int) -> bool:
        try:
            state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            return False
        return state not in (b"Z", b"X")

    def all_gone() -> bool:
        return not any(alive(pid) for pid in sandboxed)

    _wait_for(all_gone, "the browser's processes to die with the worker", timeout_s=10)


def test_a_runs_browser_time_is_counted_across_worker_processes(
    backend,
    agent,
    llm_stub_server,
    start_worker,  # noqa: F811
    upstream,  # noqa: F811
    tmp_path,
):
    # given a worker whose runs have 1 s of browser time, and whose pool process dies (SIGKILL,
    # once) right after a call ran
    upstream.routes_clear()
    serve_portal(upstream)
    marker = tmp_path / "crashed"
    worker = start_worker(
        SANDBOX_BACKEND=backend,
        MOTOR_SANDBOX_EGRESS_HOSTS=_hosts(upstream),
        MOTOR_TEST_CRASH_AT=f"after_execution:{marker}",
        MOTOR_BROWSER_RUN_SECONDS="1",
    )
    _wait_for(lambda: len(_pool_children(worker)) == 1, "the worker's pool process")
    (first_process,) = _pool_children(worker)
    # (the first page answers after 1.5 s, so the first action outlasts the budget however fast
    # the browser starts)
    slow = f"/slow?seconds=1.5&backend={backend}"
    llm_stub_server.add(
        _browse("nav", action="navigate", url=f"{PORTAL}{slow}"),
        _browse("nav2", action="navigate", url=f"{PORTAL}/login"),
        reply_text("Out of browser time."),
    )
    run_id = run_start(
        agent_id=agent.pk,
        task="Read the meters",
        tools=["browser"],
        allowed_domains=[HOST],
        workspace=new_workspace(),
        actor="t",
    )["run_id"]

    # when the first action (more than 1 s) ran in that process,
    # which then died, and the run went on in the pool's next process
    _wait_for(lambda: marker.exists(), "the crash after the first action", 240)
    _wait_for(lambda: _status(run_id) == RunStatus.COMPLETED, "the run's end", 240)

    # then the first process's time was kept, and the next process refused the second action
    assert BrowserTime.objects.get(run_id=run_id).spent_ms >= 1000
    nav2 = Step.objects.get(attempt__run_id=run_id, tool_call_id="nav2")
    assert (nav2.result["ok"], nav2.result["error_code"]) == (False, "timeout")
    assert "this run has used its 1 s of browser time" in nav2.result["output"]
    assert upstream.seen(slow) == 1
    assert "GET /login" not in upstream.requests(HOST)
    assert first_process not in _pool_children(worker)
