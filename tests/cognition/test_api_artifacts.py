"""GET runs/{id}/artifacts/ and runs/{id}/artifacts/{path}: the owner lists and downloads what
a run produced (streamed); anyone else gets 404, as for the run itself."""

# ruff: noqa: F811 - pytest fixtures imported from core_support are parameters here
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from runs.models import MotorRun, RunStatus
from runs.services import run_start
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import drive

from .conftest import World, bearer
from .core_support import _clean_mutex_keys  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db

BODY = "name,email\nAnn,ann@example.com\n"


@pytest.fixture
def run_with_artifact(world: World, scripted_llm, tmp_path: Path, settings) -> MotorRun:
    settings.MOTOR_ARTIFACTS_DIR = tmp_path / "store"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run_id = run_start(
        agent_id=world.alpha.pk,
        task="Export users",
        tools=["write"],
        workspace=str(workspace),
        actor="test",
    )["run_id"]
    scripted_llm.add(
        reply_tools(tool_call("write", {"path": "export/users.csv", "content": BODY})),
        reply_text("Exported."),
    )
    drive(run_id, scripted_llm.client())
    run = MotorRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED
    return run


def test_the_owner_lists_and_downloads_an_artifact(world, run_with_artifact, session_client):
    run = run_with_artifact
    digest = hashlib.sha256(BODY.encode()).hexdigest()
    # the agent lists its run's artifacts
    listing = bearer(world.alpha_token).get(f"/api/v1/runs/{run.id}/artifacts/")
    assert listing.status_code == 200
    [item] = listing.json()["results"]
    assert {k: item[k] for k in ("name", "path", "size", "sha256", "mime")} == {
        "name": "users.csv",
        "path": "export/users.csv",
        "size": len(BODY),
        "sha256": digest,
        "mime": "text/csv",
    }
    assert item["expires_at"] > item["created_at"]
    # and downloads it: streamed, as an attachment, with its type, size and digest
    for client in (bearer(world.alpha_token), session_client(world.olivia)):
        response = client.get(f"/api/v1/runs/{run.id}/artifacts/export/users.csv")
        assert response.status_code == 200
        assert response.streaming
        assert b"".join(response.streaming_content) == BODY.encode()
        assert response["Content-Type"] == "text/csv"
        assert response["Content-Length"] == str(len(BODY))
        assert response["Content-Disposition"] == 'attachment; filename="users.csv"'
        assert response["X-Content-SHA256"] == digest


@pytest.mark.parametrize("what", ["list", "download"])
def test_another_agent_and_another_owner_get_404(world, run_with_artifact, session_client, what):
    run = run_with_artifact
    url = f"/api/v1/runs/{run.id}/artifacts/" + ("export/users.csv" if what == "download" else "")
    for client in (bearer(world.bravo_token), session_client(world.bob)):
        response = client.get(url)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
        assert BODY not in response.content.decode()


@pytest.mark.parametrize(
    "path",
    ["nope.csv", "export/../export/users.csv", "../../etc/passwd", "%2e%2e/etc/passwd"],
)
def test_a_path_that_is_not_an_artifact_is_404_naming_it(world, run_with_artifact, path):
    response = bearer(world.alpha_token).get(
        f"/api/v1/runs/{run_with_artifact.id}/artifacts/{path}"
    )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_a_purged_artifact_is_404_saying_it_is_no_longer_kept(world, run_with_artifact, settings):
    run = run_with_artifact
    (Path(settings.MOTOR_ARTIFACTS_DIR) / run.id / "artifacts" / "export" / "users.csv").unlink()
    response = bearer(world.alpha_token).get(f"/api/v1/runs/{run.id}/artifacts/export/users.csv")
    assert response.status_code == 404
    assert response.json()["error"]["message"] == (
        f"the artifact 'export/users.csv' of run {run.id} is no longer kept"
    )
