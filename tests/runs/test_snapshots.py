"""Workspace snapshots in a real S3-compatible server (moto's server mode): files stored once
by content, restored exactly, a workspace past the quota refused, an unreachable store reported."""

from __future__ import annotations

import hashlib
import os
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from runs.snapshots import (
    RACY_NS,
    SnapshotTooLarge,
    StorageUnavailable,
    snapshot_restore,
    snapshot_store,
    snapshot_take,
    workspace_manifest,
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def s3(settings, monkeypatch) -> Iterator[tuple[ThreadedMotoServer, object]]:
    """A running S3-compatible server with an empty bucket, configured as the snapshot store."""
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    endpoint = f"http://127.0.0.1:{port}"
    # the server keeps its buckets in this process: start each test from none
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"))
    client = boto3.client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket="snaps")
    settings.MOTOR_SNAPSHOT_STORAGE_URL = "s3://snaps/motor"
    settings.MOTOR_SNAPSHOT_S3_ENDPOINT_URL = endpoint
    try:
        yield server, client
    finally:
        server.stop()


def keys(client) -> list[str]:
    return sorted(
        item["Key"] for item in client.list_objects_v2(Bucket="snaps").get("Contents", [])
    )


def test_unchanged_files_are_stored_once_and_a_restore_gives_the_workspace_back(
    s3, tmp_path: Path
) -> None:
    _, client = s3
    # given a workspace with two files (one in a directory, one executable)
    workspace = tmp_path / "ws"
    (workspace / "src").mkdir(parents=True)
    (workspace / "a.txt").write_text("alpha")
    (workspace / "src" / "run.sh").write_text("echo hi\n")
    (workspace / "src" / "run.sh").chmod(0o755)
    # when it is snapshotted, then one file changes and one is added
    first = snapshot_take(workspace, run_id="r1", seq=1, previous={})
    assert first is not None
    (workspace / "a.txt").write_text("alpha 2")
    (workspace / "b.txt").write_text("alpha")  # same content as the first a.txt
    second = snapshot_take(workspace, run_id="r1", seq=2, previous=first)
    # then each distinct content is one blob, and each snapshot one manifest
    assert second is not None
    blobs = sorted({entry[0] for entry in [*first.values(), *second.values()]})
    assert keys(client) == sorted(
        [f"motor/blobs/{digest}" for digest in blobs]
        + ["motor/manifests/r1/1.json", "motor/manifests/r1/2.json"]
    )
    assert len(blobs) == 3
    # and an unchanged workspace uploads nothing
    assert snapshot_take(workspace, run_id="r1", seq=3, previous=second) is None
    assert "motor/manifests/r1/3.json" not in keys(client)
    # and restored elsewhere, every file is there with its content and mode
    elsewhere = tmp_path / "other" / "ws"
    snapshot_restore(second, elsewhere)
    assert workspace_manifest(elsewhere) == second
    assert (elsewhere / "src" / "run.sh").stat().st_mode & 0o777 == 0o755
    assert (elsewhere / "b.txt").read_text() == "alpha"


def test_a_workspace_past_the_quota_is_refused_and_nothing_is_uploaded(
    s3, settings, tmp_path: Path
) -> None:
    _, client = s3
    settings.MOTOR_SNAPSHOT_MAX_BYTES = 10
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "big.bin").write_bytes(b"x" * 11)
    with pytest.raises(SnapshotTooLarge) as caught:
        snapshot_take(workspace, run_id="r1", seq=1, previous={})
    assert str(caught.value) == (
        "the workspace holds 11 bytes, more than the snapshot limit of 10 bytes "
        "(MOTOR_SNAPSHOT_MAX_BYTES, the workspace quota)"
    )
    assert keys(client) == []


def test_an_unreachable_store_is_reported_and_a_store_back_takes_the_snapshot(
    s3, tmp_path: Path
) -> None:
    server, client = s3
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("alpha")
    # given the store is down
    server.stop()
    with pytest.raises(StorageUnavailable) as caught:
        snapshot_take(workspace, run_id="r1", seq=1, previous={})
    assert "snapshot store s3://snaps: has blobs/" in str(caught.value)
    # when it is back
    server.start()
    manifest = snapshot_take(workspace, run_id="r1", seq=1, previous={})
    # then the same snapshot is stored
    assert manifest is not None and set(manifest) == {"a.txt"}
    assert "motor/manifests/r1/1.json" in keys(client)


def test_the_embedded_default_is_a_local_directory(settings, tmp_path: Path) -> None:
    settings.MOTOR_SNAPSHOT_STORAGE_URL = ""
    settings.MOTOR_SNAPSHOT_DIR = tmp_path / "store"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("alpha")
    manifest = snapshot_take(workspace, run_id="r1", seq=1, previous={})
    assert manifest is not None
    digest = manifest["a.txt"][0]
    assert (tmp_path / "store" / "blobs" / digest).read_text() == "alpha"
    assert (tmp_path / "store" / "manifests" / "r1" / "1.json").is_file()
    assert type(snapshot_store()).__name__ == "LocalStore"
    snapshot_restore(manifest, tmp_path / "back")
    assert (tmp_path / "back" / "a.txt").read_text() == "alpha"


def test_a_file_changed_behind_an_unchanged_size_and_mtime_is_hashed_again(tmp_path: Path) -> None:
    # given a workspace file hashed once it was older than the racy window (so remembered)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    target = workspace / "a.txt"
    target.write_text("alpha")
    time.sleep(RACY_NS / 1e9 + 0.1)
    first = workspace_manifest(workspace)
    assert first["a.txt"][0] == hashlib.sha256(b"alpha").hexdigest()
    # when a program rewrites it with as many bytes and sets its mtime back
    mtime = target.stat().st_mtime_ns
    target.write_text("omega")
    os.utime(target, ns=(mtime, mtime))
    # then the next manifest has the new content's digest (the ctime moved), the same mtime
    second = workspace_manifest(workspace)
    assert second["a.txt"] == [hashlib.sha256(b"omega").hexdigest(), 5, first["a.txt"][2], mtime]


def test_a_restore_gives_each_file_its_modification_time_back(tmp_path: Path, settings) -> None:
    settings.MOTOR_SNAPSHOT_STORAGE_URL = ""
    settings.MOTOR_SNAPSHOT_DIR = tmp_path / "store"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "old.txt").write_text("before the run")
    os.utime(workspace / "old.txt", ns=(1_600_000_000_123_456_789, 1_600_000_000_123_456_789))
    manifest = snapshot_take(workspace, run_id="r1", seq=1, previous={})
    assert manifest is not None
    snapshot_restore(manifest, tmp_path / "back")
    assert (tmp_path / "back" / "old.txt").stat().st_mtime_ns == 1_600_000_000_123_456_789
    assert workspace_manifest(tmp_path / "back") == manifest
