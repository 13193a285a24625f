"""Run workspaces: the baseline written when a workspace is prepared, and the diff after a run.

When a run is prepared with a skill, the skill's files are written at the workspace root and
:func:`write_baseline` records ``relative path -> sha256`` in ``.motor-baseline.json``. After the
run, :func:`find_skill_dirs` locates skill directories, :func:`scan_skill_dir` reads them and
:func:`diff_against_baseline` says what changed.

The baseline lives inside the workspace, so the run could rewrite or delete it. That is safe by
construction: a deleted or unreadable baseline makes every file "added" (the skill is extracted
again and lands as pending_review); a forged baseline can at most make the extraction skip a
change, which leaves the installed skill as it was. Neither path can approve anything.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .filesystem import BASELINE_FILE
from .hashing import sha256_hex
from .paths import DENIED_DIRS, check_path, classify
from .types import SKILL_MD

BASELINE_VERSION = 1
#: Immediate subdirectories that are never a separate skill (content dirs of a root skill etc.).
_NOT_SKILL_DIRS = frozenset({"references", "scripts", "assets", "skills"}) | DENIED_DIRS


@dataclass(frozen=True)
class Baseline:
    """What a workspace held when it was prepared: relative path -> lowercase hex sha256."""

    skill_name: str | None
    files: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"version": BASELINE_VERSION, "skill": self.skill_name, "files": dict(self.files)}


@dataclass(frozen=True)
class WorkspaceDiff:
    """Three-way comparison of a skill directory with the baseline (paths relative to the skill)."""

    changed: list[str]
    added: list[str]
    deleted: list[str]

    @property
    def has_changes(self) -> bool:
        return bool(self.changed or self.added or self.deleted)

    def to_dict(self) -> dict[str, list[str]]:
        return {"changed": self.changed, "added": self.added, "deleted": self.deleted}


def write_baseline(
    workspace: Path, files: Iterable[tuple[str, bytes]], *, skill_name: str | None
) -> None:
    """Record the files a workspace was prepared with (written at its root).

    ``files`` are the skill's ``(relative path, bytes)`` pairs; policy.json is never recorded.
    The file is replaced atomically so a crash never leaves half a baseline.
    """
    workspace = Path(workspace)
    recorded: dict[str, str] = {}
    for raw_path, data in files:
        path, problems = check_path(raw_path)
        if problems:
            raise ValueError(f"not a valid skill file path: {problems[0]}")
        if classify(path) == "policy":
            continue
        recorded[path] = sha256_hex(bytes(data))
    baseline = Baseline(skill_name=skill_name, files=dict(sorted(recorded.items())))
    payload = json.dumps(baseline.to_dict(), indent=2, sort_keys=True).encode("utf-8")
    fd, tmp = tempfile.mkstemp(prefix=".motor-baseline.", dir=workspace)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
        os.replace(tmp, workspace / BASELINE_FILE)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


_MAX_BASELINE_BYTES = 4 * 1_048_576  # a baseline far larger than any skill is not ours


def read_baseline(workspace: Path) -> Baseline | None:
    """The workspace's baseline, or None when it is missing, not a plain file, or malformed.

    None means "treat every file as new" (see the module docstring for why that is safe).
    """
    path = Path(workspace) / BASELINE_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_BASELINE_BYTES:
            return None
        with os.fdopen(os.dup(fd), "rb") as handle:
            raw = handle.read(_MAX_BASELINE_BYTES + 1)
    finally:
        os.close(fd)
    try:
        loaded = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(loaded, dict) or not isinstance(loaded.get("files"), dict):
        return None
    files = loaded["files"]
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        return None
    skill = loaded.get("skill")
    return Baseline(skill_name=skill if isinstance(skill, str) else None, files=dict(files))


def _has_skill_md(directory: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(directory / SKILL_MD).st_mode)
    except OSError:
        return False


def _candidate(entry: os.DirEntry[str]) -> bool:
    """A directory (or a link that looks like one, so that the scan reports it) with SKILL.md."""
    if entry.name.startswith(".") or entry.name in _NOT_SKILL_DIRS:
        return False
    if entry.is_symlink():
        return os.path.isfile(os.path.join(entry.path, SKILL_MD))  # stat only, nothing is read
    return entry.is_dir(follow_symlinks=False) and _has_skill_md(Path(entry.path))


def find_skill_dirs(workspace: Path) -> list[Path]:
    """Skill directories in a run workspace, in this order:

    1. the workspace root itself, if it holds a SKILL.md (a prepared skill, or one written at
       the root as the motor prompt asks);
    2. each ``skills/<name>/`` holding a SKILL.md;
    3. each immediate ``<name>/`` holding a SKILL.md, except hidden and denylisted directories
       and the names ``references``, ``scripts``, ``assets`` and ``skills``.

    Nothing deeper is searched. A symbolic link that points at a skill directory is returned so
    that :func:`scan_skill_dir` refuses it with a ``symlink`` problem rather than it being
    silently dropped; nothing behind a link is ever read.
    """
    workspace = Path(workspace)
    found: list[Path] = []
    if _has_skill_md(workspace):
        found.append(workspace)
    skills_dir = workspace / "skills"
    try:
        skills_is_dir = stat.S_ISDIR(os.lstat(skills_dir).st_mode)
    except OSError:
        skills_is_dir = False
    if skills_is_dir:
        with os.scandir(skills_dir) as it:
            found.extend(Path(e.path) for e in sorted(it, key=lambda e: e.name) if _candidate(e))
    with os.scandir(workspace) as it:
        found.extend(Path(e.path) for e in sorted(it, key=lambda e: e.name) if _candidate(e))
    return found


def diff_against_baseline(
    current: Mapping[str, bytes], baseline: Baseline | None, *, prefix: str = ""
) -> WorkspaceDiff:
    """Compare a skill directory's content files with the baseline.

    ``current`` maps paths relative to the skill directory to bytes (as :func:`scan_skill_dir`
    returns them). ``prefix`` is the skill directory relative to the workspace root
    (``""`` for the root, ``"skills/foo/"`` for a nested one); only baseline entries under it that
    are skill content count. No baseline means every current file is added.
    """
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    before: dict[str, str] = {}
    if baseline is not None:
        for path, digest in baseline.files.items():
            if not path.startswith(prefix):
                continue
            rel = path[len(prefix) :]
            if classify(rel) == "content":
                before[rel] = digest.removeprefix("sha256:").lower()
    now = {path: sha256_hex(bytes(data)) for path, data in current.items() if path != "policy.json"}
    changed = sorted(p for p in now if p in before and before[p] != now[p])
    added = sorted(p for p in now if p not in before)
    deleted = sorted(p for p in before if p not in now)
    return WorkspaceDiff(changed=changed, added=added, deleted=deleted)
