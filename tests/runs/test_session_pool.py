"""A worker process's spare sandboxes (runs.sessions.session_pool): runs adopt them, runs granted
the browser start their own, the orphan sweep leaves spares alone, and 0 turns the pool off."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from runs.services import SliceOutcome, run_cancel, run_start, run_step
from runs.sessions import (
    orphan_sandboxes_kill,
    run_session_close,
    run_session_get,
    run_session_peek,
    session_pool,
    session_pool_stop,
)
from sandbox.browser import BROWSER_SITE
from sandbox.pool import workspace_move_into
from sandbox.types import ExecRequest
from tests.fixtures.llm import reply_text, reply_tools, tool_call

pytestmark = pytest.mark.django_db


@pytest.fixture
def pool_of(settings) -> Iterator[object]:
    """Turn this process's pool on with `size` spares and wait until it is full."""

    def make(size: int):
        settings.MOTOR_SANDBOX_POOL_SIZE = size
        pool = session_pool()
        assert pool is not None and pool.wait_full(60)
        return pool

    yield make
    session_pool_stop()


def _workspace(root: Path, name: str) -> Path:
    path = root / name
    path.mkdir()
    return path


def _ls(session) -> list[str]:
    result = session.exec(ExecRequest(argv=["/bin/ls", "-A", "/workspace"]))
    assert result.exit_code == 0, result.stderr
    return result.stdout.decode().split()


def test_a_runs_first_call_adopts_a_spare_and_the_pool_refills(
    agent, scripted_llm, tmp_path, pool_of, settings
) -> None:
    settings.MOTOR_SLICE_SECONDS = 0  # one iteration per slice
    pool = pool_of(1)
    (spare,) = pool.spares()
    # given a run that writes a file with its first call
    workspace = _workspace(tmp_path, "ws")
    (workspace / "given.txt").write_text("given")
    run_id = run_start(
        agent_id=agent.pk, task="t", tools=["code"], workspace=str(workspace), actor="t"
    )["run_id"]
    scripted_llm.add(
        reply_tools(
            tool_call("code", {"code": "print(open('given.txt').read()); open('out.txt','w')"})
        ),
        reply_text("done"),
    )
    client = scripted_llm.client()
    assert run_step(run_id=run_id, client=client, owner="w") is SliceOutcome.CONTINUED
    # then the call ran in the spare, which is now the run's session, in the run's workspace
    session = run_session_peek(run_id)
    assert session is not None and session.inner is spare and spare.id == run_id
    assert pool.adopted == 1
    from runs.models import Step

    (step,) = Step.objects.filter(attempt__run_id=run_id)
    assert step.result["output"].strip() == "given"
    assert sorted(p.name for p in workspace.iterdir()) == ["given.txt", "out.txt"]
    # and the pool started another spare in the background
    assert pool.wait_full(60) and spare not in pool.spares()
    assert run_step(run_id=run_id, client=client, owner="w") is SliceOutcome.FINISHED
    assert spare.closed


def test_browser_mounts_go_only_to_runs_granted_the_browser(tmp_path, pool_of) -> None:
    pool = pool_of(1)
    # a run without the browser adopts the spare: no browser files inside
    plain = run_session_get(
        run_id="run_plain01", workspace=str(_workspace(tmp_path, "a")), allowed_domains=()
    )
    try:
        assert pool.adopted == 1
        found = plain.exec(ExecRequest(argv=["/bin/ls", BROWSER_SITE]))
        assert found.exit_code != 0
        assert pool.wait_full(60)
        # a run granted the browser starts its own session with them, the spare stays
        browsing = run_session_get(
            run_id="run_browse01",
            workspace=str(_workspace(tmp_path, "b")),
            allowed_domains=(),
            tools=("browser", "code"),
        )
        try:
            assert pool.adopted == 1 and len(pool) == 1
            found = browsing.exec(ExecRequest(argv=["/bin/ls", BROWSER_SITE]))
            assert found.exit_code == 0 and found.stdout.split() == [b"greenlet", b"playwright"]
        finally:
            run_session_close("run_browse01")
    finally:
        run_session_close("run_plain01")


def test_a_session_whose_workspace_another_sandbox_took_is_replaced(tmp_path, pool_of) -> None:
    pool_of(1)
    workspace = _workspace(tmp_path, "ws")
    (workspace / "one").write_text("1")
    first = run_session_get(run_id="run_moved01", workspace=str(workspace), allowed_domains=())
    try:
        assert _ls(first) == ["one"]
        # when a sandbox of another worker process takes the run's workspace (its spare's slot
        # becomes the directory, with the run's files moved into it)
        other_slot = _workspace(tmp_path, "other-slot")
        workspace_move_into(other_slot, workspace)
        (workspace / "two").write_text("2")
        # then this process does not go on with a session bound to the old directory
        again = run_session_get(run_id="run_moved01", workspace=str(workspace), allowed_domains=())
        assert again is not first and first.closed
        assert _ls(again) == ["one", "two"]
    finally:
        run_session_close("run_moved01")


def test_the_orphan_sweep_leaves_spares_alone_and_kills_an_ended_runs_adopted_one(
    agent, tmp_path, pool_of
) -> None:
    pool = pool_of(2)
    workspace = _workspace(tmp_path, "ws")
    run_id = run_start(
        agent_id=agent.pk, task="t", tools=["code"], workspace=str(workspace), actor="t"
    )["run_id"]
    adopted = run_session_get(run_id=run_id, workspace=str(workspace), allowed_domains=())
    assert pool.adopted == 1
    assert pool.wait_full(60)
    spares = pool.spares()
    # while the run is alive, the sweep kills nothing
    assert orphan_sandboxes_kill() == []
    # once it has ended, the sweep finds its adopted sandbox under the run's id and kills it
    run_cancel(run_id=run_id, actor="t")
    assert orphan_sandboxes_kill() == [run_id]
    assert adopted.closed
    # and the spares are untouched
    assert all(not s.closed and os.path.exists(f"/proc/{s.pid}") for s in spares)
    assert len(pool) == 2


def test_stopping_the_pool_closes_every_spare(tmp_path, pool_of, settings) -> None:
    from sandbox.backends.bwrap_uids import _processes_of_uid

    pool = pool_of(2)
    spares = pool.spares()
    session_pool_stop()
    assert all(s.closed for s in spares)
    assert all(_processes_of_uid(s.lease.uid) == [] for s in spares)
    assert list((Path(settings.MOTOR_WORKSPACES_DIR) / ".pool").iterdir()) == []


def test_a_pool_of_zero_is_off_and_sessions_open_as_before(tmp_path, settings) -> None:
    settings.MOTOR_SANDBOX_POOL_SIZE = 0
    assert session_pool() is None
    workspace = _workspace(tmp_path, "ws")
    ino = workspace.stat().st_ino
    session = run_session_get(run_id="run_nopool1", workspace=str(workspace), allowed_domains=())
    try:
        assert session.id == "run_nopool1" and _ls(session) == []
        # the workspace is the very directory it was (nothing was swapped in)
        assert workspace.stat().st_ino == ino
        assert not (Path(settings.MOTOR_WORKSPACES_DIR) / ".pool").exists()
    finally:
        run_session_close("run_nopool1")
