"""The beat sweep that kills the sandboxes — and the browsers in them — of runs that have ended,
whichever process owns them: here a separate process that opened a run's session, started its
browser and never closes it. On both backends: a bwrap sandbox is found by its processes, a
docker one by its container's labels."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runs.models import RunStatus
from runs.services import run_cancel, run_start
from runs.tasks import sandbox_orphans_kill_task
from sandbox.reaper import bwrap_sandboxes, descendants, docker_sandboxes
from tests.runs.helpers import new_workspace

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db]

REPO = Path(__file__).resolve().parents[2]

#: a process that opens a session for a run, starts its browser, says so, and never lets go
HOLDER = """
import sys, time
from pathlib import Path
from sandbox.browser import SandboxBrowser, browser_mounts
from sandbox.types import SessionSpec
if sys.argv[3] == "docker":
    from sandbox.backends.docker import DockerBackend
    backend = DockerBackend(sweep=False)
else:
    from sandbox.backends.bwrap import BwrapBackend
    backend = BwrapBackend()
session = backend.open(SessionSpec(
    workspace=Path(sys.argv[2]), session_id=sys.argv[1], readonly_mounts=browser_mounts()))
state = SandboxBrowser(session).launch()
print("ready" if state.ok else "failed: " + state.message, flush=True)
time.sleep(600)
"""


@pytest.fixture(params=["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request, settings) -> str:
    settings.SANDBOX_BACKEND = request.param
    return str(request.param)


def sandboxes(backend: str) -> dict[str, list[int]]:
    """{run id: [the top process of each of its sandboxes]} on `backend`."""
    if backend == "bwrap":
        return bwrap_sandboxes()
    import docker

    engine = docker.from_env()
    return {
        run_id: [int(engine.containers.get(cid).attrs["State"]["Pid"]) for cid in ids]
        for run_id, ids in docker_sandboxes().items()
    }


@pytest.fixture
def hold(backend) -> Iterator:
    held: list[subprocess.Popen] = []
    runs: list[str] = []

    def start(run_id: str, workspace: str) -> subprocess.Popen:
        runs.append(run_id)
        process = subprocess.Popen(
            [sys.executable, "-c", HOLDER, run_id, workspace, backend],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        held.append(process)
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        return process

    yield start
    for process in held:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    if backend == "docker":
        # a killed holder leaves its container; remove those of this test's runs
        from sandbox.reaper import kill_containers

        for run_id, ids in docker_sandboxes().items():
            if run_id in runs:
                kill_containers(ids)


def _chromium_under(pids: list[int]) -> list[int]:
    found = []
    for pid in pids:
        for child in [pid, *descendants(pid)]:
            try:
                if Path(f"/proc/{child}/comm").read_text().strip() == "chromium":
                    found.append(child)
            except OSError:
                continue
    return found


def test_the_sweep_kills_the_sandbox_and_browser_of_an_ended_run_and_spares_a_live_one(
    agent, make_agent, hold, backend
):
    # given two runs whose sessions (each with its browser) are held open by another process
    ended = run_start(
        agent_id=agent.pk, task="a", tools=["browser"], workspace=new_workspace(), actor="t"
    )["run_id"]
    live = run_start(
        agent_id=make_agent().pk, task="b", tools=["browser"], workspace=new_workspace(), actor="t"
    )["run_id"]
    workspaces = {run_id: new_workspace() for run_id in (ended, live)}
    holders = {run_id: hold(run_id, workspaces[run_id]) for run_id in (ended, live)}
    found = sandboxes(backend)
    assert _chromium_under(found[ended]) and _chromium_under(found[live])
    doomed = [pid for pid in found[ended] for pid in [pid, *descendants(pid)]]

    # when one run is cancelled and the sweep runs
    run_cancel(run_id=ended, actor="t")
    assert sandbox_orphans_kill_task() == [ended]

    # then every process of the ended run's sandbox is gone; the live one is untouched
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in doomed):
        time.sleep(0.05)
    still = [p for p in doomed if Path(f"/proc/{p}/stat").exists()]
    states = [Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] for p in still]
    assert all(state in ("Z", "X") for state in states)
    after = sandboxes(backend)
    assert ended not in after
    assert _chromium_under(after[live])
    assert holders[live].poll() is None
    # a second sweep finds nothing more to kill
    assert sandbox_orphans_kill_task() == []
    from runs.models import MotorRun

    assert MotorRun.objects.get(pk=live).status == RunStatus.CREATED
