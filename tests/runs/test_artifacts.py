"""Run artifacts: the files a run wrote are kept outside its workspace, typed, listed in the
result and the signal, bounded by count and size, downloadable by staff, purged after retention."""

from __future__ import annotations

import hashlib
import os
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from runs.artifacts import artifacts_gather, artifacts_purge, run_artifacts_dir
from runs.models import Artifact, MotorRun, RunStatus, Signal
from runs.services import run_start
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import drive

pytestmark = pytest.mark.django_db

CSV = "day,rate\nmon,1.08\n"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def store(tmp_path, settings) -> Path:
    settings.MOTOR_ARTIFACTS_DIR = tmp_path / "store"
    return settings.MOTOR_ARTIFACTS_DIR


@pytest.fixture
def completed_run(agent, scripted_llm, tmp_path, store) -> MotorRun:
    """A run that wrote report.csv and out/data.json in a workspace that already held notes.txt
    (from before the run) and gains a link to a host file."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("prepared before the run")
    run_id = run_start(
        agent_id=agent.pk,
        task="Write the report",
        tools=["filesystem"],
        workspace=str(workspace),
        actor="test",
    )["run_id"]
    (workspace / "leak.txt").symlink_to("/etc/hostname")
    scripted_llm.add(
        reply_tools(
            tool_call("write", {"path": "report.csv", "content": CSV}),
            tool_call("write", {"path": "out/data.json", "content": '{"a": 1}'}),
        ),
        reply_text("Report written."),
    )
    drive(run_id, scripted_llm.client())
    return MotorRun.objects.get(pk=run_id)


def test_the_files_a_run_wrote_are_typed_artifacts_in_its_result_and_signal(completed_run, store):
    run = completed_run
    assert run.status == RunStatus.COMPLETED
    expected = [
        {
            "name": "data.json",
            "path": "out/data.json",
            "size": 8,
            "sha256": _sha(b'{"a": 1}'),
            "mime": "application/json",
        },
        {
            "name": "report.csv",
            "path": "report.csv",
            "size": len(CSV),
            "sha256": _sha(CSV.encode()),
            "mime": "text/csv",
        },
    ]
    # the result and the signal list exactly what the run wrote (not the file from before
    # it, not the link)
    assert run.result["artifacts"] == expected
    assert run.result["artifacts_omitted"] == []
    assert Signal.objects.get(run=run).payload["result"]["artifacts"] == expected
    # and the bytes are kept outside the workspace, under the data directory
    kept = run_artifacts_dir(run.id)
    assert kept == store / run.id / "artifacts"
    assert (kept / "report.csv").read_text() == CSV
    assert sorted(p.relative_to(kept).as_posix() for p in kept.rglob("*") if p.is_file()) == [
        "out/data.json",
        "report.csv",
    ]
    rows = list(Artifact.objects.filter(run=run).values_list("path", "size", "mime"))
    assert rows == [("out/data.json", 8, "application/json"), ("report.csv", len(CSV), "text/csv")]


def test_count_and_size_limits_keep_the_first_files_and_name_the_others(
    agent, tmp_path, store, settings
):
    # given a run whose workspace gained four files after it was created
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run = MotorRun.objects.get(
        pk=run_start(agent_id=agent.pk, task="t", workspace=str(workspace), actor="t")["run_id"]
    )
    for name, size in (("a.txt", 10), ("b.bin", 5000), ("c.txt", 30), ("d.txt", 40)):
        (workspace / name).write_bytes(b"x" * size)
    (workspace / ".git").mkdir()
    (workspace / ".git" / "HEAD").write_text("ref")
    settings.MOTOR_ARTIFACTS_MAX_FILES = 2
    settings.MOTOR_ARTIFACTS_MAX_FILE_BYTES = 1000
    settings.MOTOR_ARTIFACTS_MAX_TOTAL_BYTES = 10_000
    # when its artifacts are gathered
    kept, omitted = artifacts_gather(run)
    # then the first two that fit are kept, and each other is named with the rule it broke
    assert [(f.path, f.size) for f in kept] == [("a.txt", 10), ("c.txt", 30)]
    assert omitted == [
        {"path": "b.bin", "reason": "5000 bytes, over 1000 (MOTOR_ARTIFACTS_MAX_FILE_BYTES)"},
        {"path": "d.txt", "reason": "more than 2 files (MOTOR_ARTIFACTS_MAX_FILES)"},
    ]
    assert not (run_artifacts_dir(run.id) / "b.bin").exists()


def test_the_purge_deletes_artifacts_past_retention_files_first(completed_run, store, settings):
    run = completed_run
    settings.MOTOR_ARTIFACTS_RETENTION_SECONDS = 3600
    Artifact.objects.filter(run=run, path="report.csv").update(
        created_at=timezone.now() - timedelta(hours=2)
    )
    # when the purge runs
    assert artifacts_purge() == 1
    # then the expired artifact's row and file are gone; the other stays
    assert list(Artifact.objects.filter(run=run).values_list("path", flat=True)) == [
        "out/data.json"
    ]
    assert not (run_artifacts_dir(run.id) / "report.csv").exists()
    assert (run_artifacts_dir(run.id) / "out" / "data.json").exists()
    # and once the last one expires, the run's directory goes too
    assert artifacts_purge(now=timezone.now() + timedelta(hours=2)) == 1
    assert not (store / run.id).exists()
    assert Artifact.objects.count() == 0


def test_staff_download_artifacts_in_the_admin_others_cannot(completed_run):
    run = completed_run
    item = Artifact.objects.get(run=run, path="report.csv")
    url = reverse("admin:runs_artifact_download", args=[item.pk])
    users = get_user_model().objects
    staff = users.create_superuser(username="staff", password="pw")
    plain = users.create_user(username="plain", password="pw", is_staff=False)
    client = Client()
    client.force_login(staff)
    # the run page links it, and the download streams the bytes as an attachment
    page = client.get(reverse("admin:runs_motorrun_change", args=[quote(run.id)]))
    assert url in page.content.decode()
    response = client.get(url)
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == CSV.encode()
    assert response["Content-Type"] == "text/csv"
    assert response["Content-Disposition"] == 'attachment; filename="report.csv"'
    # a user who is not staff is sent to the login page and gets no bytes
    client.force_login(plain)
    refused = client.get(url)
    assert refused.status_code == 302 and "/login/" in refused["Location"]
    # a purged artifact is a 404
    os.unlink(run_artifacts_dir(run.id) / "report.csv")
    client.force_login(staff)
    assert client.get(url).status_code == 404


def test_a_file_name_that_is_not_utf8_or_too_long_is_omitted_and_the_run_still_completes(
    agent, scripted_llm, tmp_path, store
):
    # given a run whose workspace gains a file with undecodable bytes in its name and one with
    # a path longer than the store keeps, and a normal one
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run_id = run_start(agent_id=agent.pk, task="t", workspace=str(workspace), actor="t")["run_id"]
    with open(os.path.join(os.fsencode(workspace), b"bad-\xff.txt"), "wb") as handle:
        handle.write(b"x")
    deep = workspace / "/".join(["d" * 200] * 5)
    deep.mkdir(parents=True)
    (deep / "long.txt").write_text("y")
    (workspace / "ok.txt").write_text("z")
    scripted_llm.add(reply_text("Done."))
    # when it completes
    drive(run_id, scripted_llm.client())
    run = MotorRun.objects.get(pk=run_id)
    # then the normal file is an artifact and the other two are named as omitted, with the rule
    assert run.status == RunStatus.COMPLETED
    assert [item["path"] for item in run.result["artifacts"]] == ["ok.txt"]
    reasons = {item["reason"] for item in run.result["artifacts_omitted"]}
    assert reasons == {"its path is not UTF-8 text of at most 1000 characters"}
    assert sorted(item["path"][:8] for item in run.result["artifacts_omitted"]) == [
        "bad-\ufffd.txt"[:8],
        "d" * 8,
    ]
