"""Run artifacts: the files a run produced, typed, kept outside its workspace for a while.

Which files count: every regular file in the run's workspace that the run wrote or changed
(modified at or after the run was created), outside hidden directories and caches. Symbolic links
are never followed: a sandboxed program could point one at a host file. At most
MOTOR_ARTIFACTS_MAX_FILES files, each at most MOTOR_ARTIFACTS_MAX_FILE_BYTES and together at
most MOTOR_ARTIFACTS_MAX_TOTAL_BYTES, are kept (in path order); the others are listed as omitted
with the rule they broke.

Lifecycle: when a run completes, `artifacts_gather` copies the files (outside any transaction)
to MOTOR_ARTIFACTS_DIR/<run id>/artifacts/<path>, and `artifacts_record` writes their rows in
the completion's transaction; the run's result and its motor_result signal list them as
{name, path, size, sha256, mime}. A copy whose completion never commits is overwritten by the
next try. `artifacts_purge` (celery-beat) deletes files and rows older than
MOTOR_ARTIFACTS_RETENTION_SECONDS. Downloads look an artifact up by its row, never by a path
taken from a request.
"""

from __future__ import annotations

import hashlib
import logging
import mimetypes
import os
import shutil
import stat
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import IO, Any

from django.conf import settings
from django.utils import timezone

from runs.errors import RunError
from runs.models import Artifact, MotorRun

logger = logging.getLogger(__name__)

#: directory names never searched for artifacts (tool caches, version control)
SKIPPED_DIRS = frozenset({"__pycache__", "node_modules"})
#: longest workspace path kept as an artifact (the Artifact.path column)
MAX_PATH_CHARS = 1000
#: most omitted files named in a run's result
MAX_LISTED_OMISSIONS = 50
_CHUNK = 1024 * 1024


class ArtifactNotFound(RunError):
    """No such artifact of this run (never produced, or purged after its retention period)."""

    code = "not_found"


@dataclass(frozen=True, slots=True)
class ArtifactFile:
    """One produced file as the result and the signal list it."""

    name: str
    path: str
    size: int
    sha256: str
    mime: str


def run_artifacts_dir(run_id: str) -> Path:
    """Where the artifacts of run `run_id` are kept."""
    return Path(settings.MOTOR_ARTIFACTS_DIR) / run_id / "artifacts"


def _storable(relative: str) -> bool:
    """Whether a workspace path fits the Artifact row (UTF-8 text, bounded lengths)."""
    try:
        relative.encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes in a file name (surrogate escapes)
        return False
    return len(relative) <= MAX_PATH_CHARS and len(PurePosixPath(relative).name) <= 255


def _candidates(workspace: Path, since_ns: int) -> list[tuple[str, int]]:
    """(relative path, size) of the regular files changed at or after `since_ns`, path order."""
    found: list[tuple[str, int]] = []
    for directory, dirs, files in os.walk(workspace, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS)
        for filename in files:
            if filename.startswith("."):
                continue
            full = Path(directory) / filename
            try:
                info = full.lstat()
            except OSError:
                continue
            if not stat.S_ISREG(info.st_mode) or info.st_mtime_ns < since_ns:
                continue
            found.append((full.relative_to(workspace).as_posix(), info.st_size))
    return sorted(found)


def _copy(source: Path, workspace: Path, target: Path) -> tuple[int, str] | None:
    """Copy one workspace file (never through a link) to `target`; (size, sha256) or None."""
    try:
        # the directory must still be inside the workspace, and the file itself not a link
        if not source.parent.resolve().is_relative_to(workspace):
            return None
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    digest = hashlib.sha256()
    size = 0
    target.parent.mkdir(parents=True, exist_ok=True)
    with os.fdopen(fd, "rb") as reader:
        if not stat.S_ISREG(os.fstat(reader.fileno()).st_mode):
            return None
        with open(target, "wb") as writer:
            while chunk := reader.read(_CHUNK):
                size += len(chunk)
                if size > settings.MOTOR_ARTIFACTS_MAX_FILE_BYTES:
                    break  # it grew since it was listed
                digest.update(chunk)
                writer.write(chunk)
    if size > settings.MOTOR_ARTIFACTS_MAX_FILE_BYTES:
        target.unlink(missing_ok=True)
        return None
    return size, digest.hexdigest()


def artifacts_gather(run: MotorRun) -> tuple[list[ArtifactFile], list[dict[str, str]]]:
    """Copy the files `run` produced to its artifacts directory; (kept files, omitted files).

    Outside any transaction (it reads and writes files). Omitted files are given as
    {path, reason}. A run without a workspace has none.
    """
    if not run.workspace or run.review:
        return [], []
    workspace = Path(run.workspace).resolve()
    if not workspace.is_dir():
        return [], []
    since_ns = int(run.created_at.timestamp() * 1_000_000) * 1000
    target_root = run_artifacts_dir(run.id)
    kept: list[ArtifactFile] = []
    omitted: list[dict[str, str]] = []
    total = 0
    max_files = int(settings.MOTOR_ARTIFACTS_MAX_FILES)
    max_file = int(settings.MOTOR_ARTIFACTS_MAX_FILE_BYTES)
    max_total = int(settings.MOTOR_ARTIFACTS_MAX_TOTAL_BYTES)
    for relative, size in _candidates(workspace, since_ns):
        if not _storable(relative):
            reason = f"its path is not UTF-8 text of at most {MAX_PATH_CHARS} characters"
        elif len(kept) >= max_files:
            reason = f"more than {max_files} files (MOTOR_ARTIFACTS_MAX_FILES)"
        elif size > max_file:
            reason = f"{size} bytes, over {max_file} (MOTOR_ARTIFACTS_MAX_FILE_BYTES)"
        elif total + size > max_total:
            reason = f"the run's artifacts would pass {max_total} bytes (MOTOR_ARTIFACTS_MAX_TOTAL_BYTES)"
        else:
            copied = _copy(workspace / relative, workspace, target_root / relative)
            if copied is None:
                reason = "it changed or could not be read while it was copied"
            else:
                size, sha256 = copied
                total += size
                mime = mimetypes.guess_type(relative)[0] or "application/octet-stream"
                name = PurePosixPath(relative).name
                kept.append(ArtifactFile(name, relative, size, sha256, mime))
                continue
        if len(omitted) < MAX_LISTED_OMISSIONS:
            # undecodable bytes of a file name are shown as U+FFFD: the result is JSON text
            shown = os.fsencode(relative).decode("utf-8", "replace")
            omitted.append({"path": shown, "reason": reason})
    return kept, omitted


def artifacts_record(run: MotorRun, files: list[ArtifactFile]) -> list[dict[str, Any]]:
    """Write the rows of `files` (caller's transaction) and return their listing."""
    Artifact.objects.bulk_create(
        [Artifact(run=run, **asdict(item)) for item in files], ignore_conflicts=True
    )
    return [asdict(item) for item in files]


def artifact_listing(run: MotorRun) -> list[dict[str, Any]]:
    """The run's artifacts still kept: {name, path, size, sha256, mime, created_at, expires_at}."""
    retention = timedelta(seconds=settings.MOTOR_ARTIFACTS_RETENTION_SECONDS)
    return [
        {
            "name": item.name,
            "path": item.path,
            "size": item.size,
            "sha256": item.sha256,
            "mime": item.mime,
            "created_at": item.created_at,
            "expires_at": item.created_at + retention,
        }
        for item in Artifact.objects.filter(run=run).order_by("path")
    ]


def artifact_open(*, run: MotorRun, path: str) -> tuple[Artifact, IO[bytes]]:
    """The artifact `path` of `run` and its bytes opened for reading (the caller closes them).

    Raises ArtifactNotFound when the run has no such artifact or its file is gone.
    """
    item = Artifact.objects.filter(run=run, path=path).first()
    if item is None:
        raise ArtifactNotFound(f"run {run.id} has no artifact {path[:200]!r}", path=path[:200])
    try:
        handle = open(run_artifacts_dir(run.id) / item.path, "rb")  # noqa: SIM115 - streamed
    except OSError:
        raise ArtifactNotFound(
            f"the artifact {path[:200]!r} of run {run.id} is no longer kept", path=path[:200]
        ) from None
    return item, handle


def artifacts_purge(*, now: datetime | None = None) -> int:
    """Delete artifacts older than MOTOR_ARTIFACTS_RETENTION_SECONDS, files first; how many."""
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.MOTOR_ARTIFACTS_RETENTION_SECONDS)
    expired = list(
        Artifact.objects.filter(created_at__lt=cutoff).values_list("pk", "run_id", "path")
    )
    runs: set[str] = set()
    for _, run_id, path in expired:
        (run_artifacts_dir(run_id) / path).unlink(missing_ok=True)
        runs.add(run_id)
    deleted, _ = Artifact.objects.filter(pk__in=[pk for pk, _, _ in expired]).delete()
    for run_id in runs:
        if not Artifact.objects.filter(run_id=run_id).exists():
            shutil.rmtree(run_artifacts_dir(run_id).parent, ignore_errors=True)
    if deleted:
        logger.info("purged %d run artifacts older than %s", deleted, cutoff.isoformat())
    return deleted
