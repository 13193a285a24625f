"""Workspace snapshots in object storage, so a run's files survive the host that wrote them.

A snapshot is a manifest `{path: [sha256, size, mode, mtime_ns]}` of every regular file of the
workspace (relative, "/"-separated paths; links and special files are not kept) plus each file's
content stored once under its sha256 (`blobs/<sha256>`): an unchanged file is never uploaded
twice, by this run or any other. Each snapshot's manifest is also written as
`manifests/<run id>/<seq>.json`; the run's latest one is kept in its `RunPlacement` row. A
restore gives each file its modification time back: what the run wrote is told from what the
workspace held before by that time (runs.artifacts), on any host.

A snapshot is taken after every tool call, so hashing must not read every file each time: a
file's sha256 is remembered (per process, for the last CACHE_WORKSPACES workspaces) with its size, mtime, ctime, device and inode, and reused while all five are
unchanged. The ctime cannot be set by a program in the sandbox, and a file whose ctime is less
than RACY_NS old when it is hashed is not remembered: filesystem timestamps advance in coarse
ticks, so a second write in the same tick could leave all five unchanged.

Storage: MOTOR_SNAPSHOT_STORAGE_URL. Empty: a local directory (MOTOR_SNAPSHOT_DIR), enough for
one host. `s3://bucket/prefix`: any S3-compatible store through boto3, at
MOTOR_SNAPSHOT_S3_ENDPOINT_URL when set, with boto3's usual credentials (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY in the environment).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from django.conf import settings

Manifest = dict[str, list[Any]]  # path -> [sha256, size, mode, mtime_ns]

#: a file changed less than this long (ns) before it is hashed is hashed again next time
RACY_NS = 1_000_000_000
#: workspaces whose file digests a process remembers (a few hundred bytes per file)
CACHE_WORKSPACES = 256


class StorageUnavailable(RuntimeError):
    """The object store did not take or give a snapshot; the message says which and why."""


class SnapshotTooLarge(ValueError):
    """The workspace is larger than MOTOR_SNAPSHOT_MAX_BYTES; the message gives both sizes."""


class Store(Protocol):
    def probe(self) -> None: ...
    def has(self, key: str) -> bool: ...
    def put(self, key: str, source: Path) -> None: ...
    def put_bytes(self, key: str, data: bytes) -> None: ...
    def get(self, key: str, target: Path) -> None: ...


class LocalStore:
    """Objects as files under a directory (the embedded default)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        return self.root / key

    def probe(self) -> None:
        """StorageUnavailable unless objects can be written here now."""
        self.put_bytes("probe", b"")

    def has(self, key: str) -> bool:
        return self._path(key).is_file()

    def put(self, key: str, source: Path) -> None:
        self.put_bytes(key, source.read_bytes())

    def put_bytes(self, key: str, data: bytes) -> None:
        target = self._path(key)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as handle:
                handle.write(data)
            os.replace(handle.name, target)
        except OSError as exc:
            raise StorageUnavailable(
                f"snapshot store {self.root}: cannot write {key}: {exc}"
            ) from exc

    def get(self, key: str, target: Path) -> None:
        try:
            shutil.copyfile(self._path(key), target)
        except OSError as exc:
            raise StorageUnavailable(
                f"snapshot store {self.root}: cannot read {key}: {exc}"
            ) from exc


class S3Store:
    """Objects in an S3-compatible bucket through boto3."""

    def __init__(self, bucket: str, prefix: str, endpoint_url: str | None) -> None:
        import boto3
        from botocore.config import Config

        self.bucket, self.prefix = bucket, prefix.strip("/")
        self.client = boto3.client(
            "s3",
            endpoint_url=endpoint_url or None,
            config=Config(
                connect_timeout=5, read_timeout=30, retries={"max_attempts": 2, "mode": "standard"}
            ),
        )

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _call(self, action: str, key: str, function: Any, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return function(Bucket=self.bucket, Key=self._key(key), **kwargs)
        except ClientError as exc:
            if action == "has" and exc.response.get("Error", {}).get("Code") in (
                "404",
                "NoSuchKey",
            ):
                return None
            raise StorageUnavailable(
                f"snapshot store s3://{self.bucket}: {action} {key}: {exc}"
            ) from exc
        except BotoCoreError as exc:
            raise StorageUnavailable(
                f"snapshot store s3://{self.bucket}: {action} {key}: {exc}"
            ) from exc

    def probe(self) -> None:
        """StorageUnavailable unless the bucket answers now."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.head_bucket(Bucket=self.bucket)
        except (BotoCoreError, ClientError) as exc:
            raise StorageUnavailable(f"snapshot store s3://{self.bucket}: {exc}") from exc

    def has(self, key: str) -> bool:
        return self._call("has", key, self.client.head_object) is not None

    def put(self, key: str, source: Path) -> None:
        with source.open("rb") as body:
            self._call("put", key, self.client.put_object, Body=body)

    def put_bytes(self, key: str, data: bytes) -> None:
        self._call("put", key, self.client.put_object, Body=data)

    def get(self, key: str, target: Path) -> None:
        answer = self._call("get", key, self.client.get_object)
        with target.open("wb") as out:
            shutil.copyfileobj(answer["Body"], out)


def snapshot_store() -> Store:
    """The configured store (MOTOR_SNAPSHOT_STORAGE_URL; empty: MOTOR_SNAPSHOT_DIR)."""
    url = str(getattr(settings, "MOTOR_SNAPSHOT_STORAGE_URL", "") or "")
    if not url:
        return LocalStore(Path(settings.MOTOR_SNAPSHOT_DIR))
    parsed = urlparse(url)
    endpoint = str(getattr(settings, "MOTOR_SNAPSHOT_S3_ENDPOINT_URL", "") or "") or None
    return S3Store(parsed.netloc, parsed.path, endpoint)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class _DigestCache:
    """sha256 of workspace files by (size, mtime, ctime, device, inode), for the last
    `limit` workspaces (least recently snapshotted dropped first); shared by a worker's threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._workspaces: OrderedDict[str, dict[str, tuple[tuple[int, ...], str]]] = OrderedDict()

    def take(self, workspace: str) -> dict[str, tuple[tuple[int, ...], str]]:
        with self._lock:
            return self._workspaces.pop(workspace, {})

    def keep(self, workspace: str, known: dict[str, tuple[tuple[int, ...], str]]) -> None:
        with self._lock:
            self._workspaces[workspace] = known
            while len(self._workspaces) > CACHE_WORKSPACES:
                self._workspaces.popitem(last=False)


_digests = _DigestCache()


def workspace_manifest(workspace: Path) -> Manifest:
    """Every regular file under `workspace` (never through a link):
    path -> [sha256, size, mode, mtime_ns]; a file unchanged since this process last hashed it
    is not read again (see the module docstring)."""
    found: Manifest = {}
    key = str(workspace)
    cached = _digests.take(key)
    known: dict[str, tuple[tuple[int, ...], str]] = {}
    now = time.time_ns()
    for directory, dirs, files in os.walk(workspace, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(directory, name)
            info = os.lstat(full)
            if not stat.S_ISREG(info.st_mode):
                continue
            relative = os.path.relpath(full, workspace).replace(os.sep, "/")
            signature = (
                info.st_size,
                info.st_mtime_ns,
                info.st_ctime_ns,
                info.st_dev,
                info.st_ino,
            )
            hit = cached.get(relative)
            digest = hit[1] if hit is not None and hit[0] == signature else _sha256(Path(full))
            if now - info.st_ctime_ns >= RACY_NS:
                known[relative] = (signature, digest)
            found[relative] = [
                digest,
                info.st_size,
                stat.S_IMODE(info.st_mode),
                info.st_mtime_ns,
            ]
    _digests.keep(key, known)
    return found


def snapshot_take(
    workspace: Path, *, run_id: str, seq: int, previous: Manifest, store: Store | None = None
) -> Manifest | None:
    """Upload the workspace's changed files and its manifest as snapshot `seq`; the manifest,
    or None when nothing changed since `previous`. SnapshotTooLarge past the quota (nothing
    uploaded), StorageUnavailable when the store refused (the earlier snapshot still stands)."""
    manifest = workspace_manifest(workspace)
    if manifest == previous:
        return None
    total = sum(int(entry[1]) for entry in manifest.values())
    limit = int(getattr(settings, "MOTOR_SNAPSHOT_MAX_BYTES", 256 * 1024 * 1024))
    if total > limit:
        raise SnapshotTooLarge(
            f"the workspace holds {total} bytes, more than the snapshot limit of {limit} bytes "
            f"(MOTOR_SNAPSHOT_MAX_BYTES, the workspace quota)"
        )
    store = store or snapshot_store()
    known = {entry[0] for entry in previous.values()}
    for relative, entry in manifest.items():
        digest = entry[0]
        if digest in known:
            continue
        key = f"blobs/{digest}"
        if not store.has(key):
            store.put(key, workspace / relative)
        known.add(digest)
    body = json.dumps(manifest, sort_keys=True).encode()
    store.put_bytes(f"manifests/{run_id}/{seq}.json", body)
    return manifest


def snapshot_restore(manifest: Manifest, workspace: Path, *, store: Store | None = None) -> None:
    """Make `workspace` hold exactly the manifest's files: fetched into a fresh directory that
    then replaces it, so a restore cut short leaves no half workspace in its place."""
    store = store or snapshot_store()
    workspace.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=".restore-", dir=workspace.parent))
    try:
        for relative, entry in manifest.items():
            digest, mode = entry[0], entry[2]
            target = fresh / relative
            if ".." in Path(relative).parts or Path(relative).is_absolute():
                raise StorageUnavailable(f"snapshot manifest: {relative!r} is not a workspace path")
            target.parent.mkdir(parents=True, exist_ok=True)
            store.get(f"blobs/{digest}", target)
            os.chmod(target, int(mode))
            if len(entry) > 3:  # the file's own time: it tells the run's writes from the rest
                os.utime(target, ns=(int(entry[3]), int(entry[3])))
        if workspace.exists():
            shutil.rmtree(workspace)
        os.replace(fresh, workspace)
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise
