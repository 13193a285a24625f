"""A run's workspace must be a directory the project created for it inside MOTOR_WORKSPACES_DIR:
run_start refuses anything else (nothing created), and a session is never opened — so nothing is
bound or chowned — on any other directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runs.errors import InvalidRunParams
from runs.models import MotorRun
from runs.services import run_start
from runs.sessions import run_session_get
from sandbox.types import SandboxError

pytestmark = pytest.mark.django_db

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def root(settings, tmp_path: Path) -> Path:
    path = tmp_path / "workspaces"
    path.mkdir()
    settings.MOTOR_WORKSPACES_DIR = path
    return path


def owners(path: Path) -> list[tuple[str, int, int]]:
    """(relative path, uid, gid) of `path` and everything in it, without following links."""
    found = [(".", os.lstat(path).st_uid, os.lstat(path).st_gid)]
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            found.append((os.path.relpath(full, path), st.st_uid, st.st_gid))
    return sorted(found)


def refused(agent, workspace: str) -> InvalidRunParams:
    with pytest.raises(InvalidRunParams) as caught:
        run_start(agent_id=agent.pk, task="t", tools=["code"], workspace=workspace, actor="t")
    return caught.value


def test_a_run_without_a_workspace_is_refused_and_the_cwd_is_untouched(agent, root) -> None:
    # given the worker's current directory and who owns its files
    cwd = Path.cwd()
    before = owners(cwd / "runs")
    # when a run is started without a workspace (the service's old default)
    with pytest.raises(InvalidRunParams) as caught:
        run_start(agent_id=agent.pk, task="t", tools=["code"], actor="t")
    # then it is refused naming the field and rule, nothing exists, nothing was chowned
    assert caught.value.details == {"field": "workspace", "rule": "project_workspace"}
    assert "MOTOR_WORKSPACES_DIR" in caught.value.message
    assert MotorRun.objects.count() == 0
    assert owners(cwd / "runs") == before


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda root, tmp: "", id="empty"),
        pytest.param(lambda root, tmp: "   ", id="blank"),
        pytest.param(lambda root, tmp: str(PROJECT_ROOT), id="project-checkout"),
        pytest.param(lambda root, tmp: str(root), id="the-workspaces-dir-itself"),
        pytest.param(lambda root, tmp: str(tmp / "elsewhere"), id="outside"),
        pytest.param(lambda root, tmp: "workspaces/ws_1", id="relative"),
        pytest.param(lambda root, tmp: str(root / "ws_missing"), id="missing"),
        pytest.param(lambda root, tmp: str(root / "ws_1" / ".." / ".." / "elsewhere"), id="dotdot"),
        pytest.param(lambda root, tmp: str(root / "link"), id="symlink-out"),
        pytest.param(lambda root, tmp: str(root / "file"), id="a-file"),
    ],
)
def test_a_path_the_project_did_not_create_is_refused(agent, root, tmp_path, make) -> None:
    # given a project workspace, a directory outside, a link to it and a file
    (root / "ws_1").mkdir()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    (root / "link").symlink_to(outside)
    (root / "file").write_text("x")
    before = owners(outside)
    # when a run is started on the path
    error = refused(agent, make(root, tmp_path))
    # then it is refused with the rule, no run exists and the outside directory is as it was
    assert error.details == {"field": "workspace", "rule": "project_workspace"}
    assert MotorRun.objects.count() == 0
    assert owners(outside) == before


def test_a_directory_inside_the_workspaces_dir_is_accepted(agent, root) -> None:
    workspace = root / "ws_0123456789abcdef"
    workspace.mkdir()
    started = run_start(
        agent_id=agent.pk, task="t", tools=["code"], workspace=str(workspace), actor="t"
    )
    assert MotorRun.objects.get(pk=started["run_id"]).workspace == str(workspace)


def test_a_session_is_never_opened_on_a_directory_outside_the_workspaces(
    agent, root, tmp_path
) -> None:
    # given a directory outside the workspaces dir (a stored run's workspace, say, from before)
    outside = tmp_path / "checkout"
    outside.mkdir()
    (outside / "setup.py").write_text("print('hi')\n")
    before = owners(outside)
    # when a session is asked for on it
    with pytest.raises(SandboxError, match="MOTOR_WORKSPACES_DIR"):
        run_session_get(run_id="r-outside", workspace=str(outside), allowed_domains=())
    # then nothing was bound or chowned
    assert owners(outside) == before


def test_a_spare_sandboxs_slot_is_never_a_runs_workspace(agent, root, settings) -> None:
    # given a full pool of spare sandboxes, whose slots live in the workspaces dir
    from runs.sessions import session_pool, session_pool_stop

    settings.MOTOR_SANDBOX_POOL_SIZE = 1
    pool = session_pool()
    try:
        assert pool is not None and pool.wait_full(60)
        (slot,) = list((root / ".pool").iterdir())
        # when a run is asked for with a spare's slot as its workspace, it is refused: the slot
        # becomes another run's workspace when that run adopts the spare
        with pytest.raises(InvalidRunParams, match="spare sandbox"):
            run_start(agent_id=agent.pk, task="t", tools=["code"], workspace=str(slot), actor="t")
        with pytest.raises(SandboxError, match="spare sandbox"):
            run_session_get(run_id="r-slot", workspace=str(slot), allowed_domains=())
        assert not MotorRun.objects.exists()
    finally:
        session_pool_stop()
