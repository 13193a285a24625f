"""A skill's trip through a run's workspace: written in with a baseline, extracted back out.

What extraction installs follows the rules of `skills.install`; from a bundle's policy.json it
takes only the provenance (seed 000: new skills get no domains from the run that created them).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TypedDict

from django.db import transaction
from django.db.models import Model
from django.utils import timezone

from skills import bundle as bundle_lib
from skills.errors import SkillError, SkillHashMismatch, SkillNotFound, SkillValidationError
from skills.install import _bundle_error, _install_locked, _merge_pending_credentials
from skills.models import AuditAction, Policy, SkillVersion
from skills.policy_fields import _bundle_provenance
from skills.services import (
    Actor,
    _audit,
    _limits,
    _lock_skill,
    _recompute_hash,
    _storable,
    _version_files,
)


class ExtractionFailure(TypedDict):
    name: str
    reason: str


class ExtractionResult(TypedDict):
    created: list[str]
    updated: list[str]
    unchanged: list[str]
    failed: list[ExtractionFailure]


_DIR_OPEN_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE_CREATE_FLAGS = (
    os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
)


def _write_inside(root_fd: int, relative: str, data: bytes) -> None:
    """Create `relative` below the directory `root_fd` without following any link.

    Each component is opened relative to its parent with O_NOFOLLOW, so a symlink left in a
    reused workspace (`scripts -> /etc`) makes the write fail instead of escaping.
    """
    parts = relative.split("/")
    dir_fd = os.dup(root_fd)
    try:
        for part in parts[:-1]:
            try:
                os.mkdir(part, 0o755, dir_fd=dir_fd)
            except FileExistsError:
                pass
            next_fd = os.open(part, _DIR_OPEN_FLAGS, dir_fd=dir_fd)
            os.close(dir_fd)
            dir_fd = next_fd
        fd = os.open(parts[-1], _FILE_CREATE_FLAGS, 0o644, dir_fd=dir_fd)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    finally:
        os.close(dir_fd)


def skill_prepare_workspace(*, version: SkillVersion, workspace: Path) -> list[str]:
    """Write `version`'s files at the workspace root and the baseline the extraction diffs against.

    The stored bytes are re-hashed first (`SkillHashMismatch` when they do not match the
    version). Files are written without following links; a path that is refused or a link in
    the way raises `SkillValidationError`. Returns the relative paths written; changes no
    database row.
    """
    workspace = Path(workspace)
    workspace.mkdir(parents=True, exist_ok=True)
    files = _version_files(version)
    computed = _recompute_hash(files)
    if computed != version.content_hash:
        raise SkillHashMismatch(
            f"Skill {version.skill.name!r} v{version.number}: stored files hash to {computed}, "
            f"not the recorded {version.content_hash}; refusing to prepare a workspace with it.",
            details={"expected": version.content_hash, "actual": computed},
        )
    try:
        root_fd = os.open(workspace, _DIR_OPEN_FLAGS)
    except OSError as exc:
        raise SkillValidationError(
            f"Workspace {workspace} cannot be opened as a plain directory ({exc.strerror}).",
            details={"rule": "workspace", "path": str(workspace)},
        ) from exc
    try:
        for f in files:
            path, problems = bundle_lib.check_path(f.path)
            if problems or path != f.path:
                raise SkillValidationError(
                    f"Stored file path {f.path!r} is not a safe relative path.",
                    problems=problems,
                    details={"rule": "path", "path": f.path},
                )
            try:
                _write_inside(root_fd, f.path, bytes(f.data))
            except OSError as exc:
                raise SkillValidationError(
                    f"Cannot write {f.path} into workspace {workspace}: {exc.strerror} "
                    "(a link or a non-directory is in the way).",
                    details={"rule": "workspace-write", "path": f.path},
                ) from exc
    finally:
        os.close(root_fd)
    bundle_lib.write_baseline(
        workspace, ((f.path, bytes(f.data)) for f in files), skill_name=version.skill.name
    )
    return [f.path for f in files]


def skills_extract_from_workspace(
    *,
    workspace: Path,
    run_id: str | int,
    agent: Model | None,
    pending_credentials: Mapping[str, str] | None = None,
    actor: Actor | None = None,
) -> ExtractionResult:
    """Install the skills a run created or changed in `workspace` (seed 000 "Post-Run Extraction").

    Skill directories are the workspace root (when it holds a SKILL.md), `skills/<name>/` and
    `<name>/` (see `skills.bundle.find_skill_dirs`). Each is diffed against the baseline written
    by `skill_prepare_workspace` (missing baseline: every file is new). A skill without changes
    creates no version and keeps its status (a run's pending credentials are still stored for
    it as a policy-only edit). A changed skill is validated and installed in its own transaction,
    so one invalid skill never blocks the others; it is listed in `failed` with the reason.
    Nothing in the workspace is executed or modified.
    """
    workspace = Path(workspace)
    if workspace.is_symlink() or not workspace.is_dir():
        raise SkillValidationError(
            f"Workspace {workspace} is not a directory.",
            details={"rule": "workspace", "path": str(workspace)},
        )
    actor = actor or Actor.system(f"run {run_id}")
    limits = _limits()
    result: ExtractionResult = {"created": [], "updated": [], "unchanged": [], "failed": []}
    baseline = bundle_lib.read_baseline(workspace)
    timestamp = timezone.now().isoformat()
    for skill_dir in bundle_lib.find_skill_dirs(workspace):
        at_root = skill_dir == workspace
        prefix = "" if at_root else skill_dir.relative_to(workspace).as_posix() + "/"
        if at_root:
            label = (baseline.skill_name if baseline else None) or "."
        else:
            label = skill_dir.name
        try:
            current = bundle_lib.scan_skill_dir(skill_dir, limits=limits)
        except bundle_lib.BundleError as exc:
            result["failed"].append({"name": label, "reason": _bundle_error(exc, label).message})
            continue
        diff = bundle_lib.diff_against_baseline(current, baseline, prefix=prefix)
        if not diff.has_changes:
            if pending_credentials and agent is not None:
                _merge_credentials_unchanged(label, agent, pending_credentials, actor)
            result["unchanged"].append(label)
            continue
        try:
            # The workspace root is named after the run, not the skill: only subdirectories
            # must match the skill's name.
            bundle = bundle_lib.bundle_from_directory(
                skill_dir, limits=limits, check_dir_name=not at_root
            )
        except bundle_lib.BundleError as exc:
            result["failed"].append({"name": label, "reason": _bundle_error(exc, label).message})
            continue
        # Diff again on exactly the bytes being installed (the directory was read twice).
        diff = bundle_lib.diff_against_baseline(bundle.file_map(), baseline, prefix=prefix)
        extracted_from = {
            "run_id": str(run_id),
            "timestamp": timestamp,
            "changed_files": sorted(diff.changed + diff.added),
            "deleted_files": sorted(diff.deleted),
        }
        try:
            with transaction.atomic():
                installed = _install_locked(
                    bundle=bundle,
                    actor=actor,
                    agent=agent,
                    provenance=_bundle_provenance(bundle),
                    extracted_from=extracted_from,
                    pending_credentials=pending_credentials,
                    apply_proposal=False,
                )
        except SkillError as exc:
            result["failed"].append({"name": bundle.name, "reason": exc.message})
            continue
        if installed.skill_created:
            result["created"].append(bundle.name)
        elif installed.version_created:
            result["updated"].append(bundle.name)
        else:
            result["unchanged"].append(bundle.name)
    # Directory names come from the run's workspace and may not be UTF-8; the result is stored
    # as JSON by the caller, which cannot hold lone surrogates.
    return {
        "created": result["created"],
        "updated": result["updated"],
        "unchanged": [_storable(name) for name in result["unchanged"]],
        "failed": [
            {"name": _storable(f["name"]), "reason": _storable(f["reason"])}
            for f in result["failed"]
        ],
    }


def _merge_credentials_unchanged(
    name: str, agent: Model, pending: Mapping[str, str], actor: Actor
) -> None:
    """Store a run's credentials for a skill whose files did not change (policy-only edit)."""
    with transaction.atomic():
        try:
            skill = _lock_skill(name=name)
        except SkillNotFound:
            return
        policy = (
            Policy.objects.select_for_update(of=("self",))
            .select_related("skill", "agent")
            .filter(skill=skill, agent=agent)
            .first()
        )
        if policy is None:
            return
        change = _merge_pending_credentials(policy, pending, policy_is_new=False)
        if change:
            policy.save()
            version = skill.current_version
            _audit(
                action=AuditAction.POLICY_UPDATED,
                actor=actor,
                policy=policy,
                from_status=policy.status,
                to_status=policy.status,
                reason="pending credentials from run",
                content_hash=version.content_hash if version else "",
                version_number=version.number if version else None,
                changes=change,
            )
