"""Generated files as a skill bundle: validation, the manifest, and the import as a new version.

A generated skill enters the skill store exactly as a third-party MCP server bundle does: its
files are written to a directory and imported with `skills.imports.skill_import_directory`
(pending_review, validated file by file, the manifest part of the content hash). There is no
second way in.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skills import bundle as bundle_lib
from skills.bundle import McpManifest, parse_manifest
from skills.errors import SkillError
from skills.imports import skill_import_directory
from skills.install import InstallResult
from skills.models import SkillVersion
from skills.services import Actor, _limits

from .generation import SKILL_FILES

#: the source of skills SkillForge creates (every version of one skill keeps its first source)
FORGE_SOURCE = "skillforge"
MANIFEST = "skill.toml"


class BundleRefused(ValueError):
    """Generated files that are not a valid skill; the message lists each file and rule."""


def manifest_of(files: Mapping[str, str] | Mapping[str, bytes]) -> McpManifest:
    """The validated manifest of generated files; BundleRefused naming every problem."""
    manifest, problems = parse_manifest(files.get(MANIFEST, ""), files=files)
    if manifest is None:
        raise BundleRefused("; ".join(str(p) for p in problems))
    return manifest


def manifest_of_version(version: SkillVersion) -> McpManifest | None:
    """The manifest of a stored version (None when it is not an MCP skill)."""
    file = version.files.filter(path=MANIFEST).first()
    if file is None:
        return None
    paths = dict.fromkeys(version.files.values_list("path", flat=True), b"")
    manifest, _ = parse_manifest(bytes(file.data), files=paths)
    return manifest


def version_texts(version: SkillVersion) -> dict[str, str]:
    """The generated files of a stored version as text (edit mode starts from these)."""
    out: dict[str, str] = {}
    for file in version.files.filter(path__in=SKILL_FILES):
        out[file.path] = bytes(file.data).decode("utf-8", errors="replace")
    return out


def as_bytes(files: Mapping[str, str] | Mapping[str, bytes]) -> dict[str, bytes]:
    return {
        path: data if isinstance(data, bytes) else data.encode("utf-8")
        for path, data in files.items()
    }


def bundle_check(files: Mapping[str, str], *, expected_name: str = "") -> bundle_lib.Bundle:
    """Validate generated files as one MCP skill (the bundle rules, skill.toml included).

    Raises BundleRefused listing every problem as ``<file>: <message> [<rule>]``, and for a
    skill not named `expected_name` (an edit keeps its name; a create may be given one).
    """
    try:
        bundle = bundle_lib.bundle_from_files(as_bytes(files), dir_name=None, limits=_limits())
    except bundle_lib.BundleError as exc:
        raise BundleRefused(
            "the files are not a valid skill: " + "; ".join(str(p) for p in exc.problems)
        ) from exc
    if bundle.manifest is None:
        raise BundleRefused(f"{MANIFEST}: missing; an MCP skill needs its manifest [manifest]")
    if expected_name and bundle.name != expected_name:
        raise BundleRefused(
            f"SKILL.md: the skill is named {expected_name!r}, not {bundle.name!r} [skill-name]"
        )
    return bundle


def bundle_import(
    *, files: Mapping[str, str], agent: Any, actor: Actor, source: str = FORGE_SOURCE
) -> InstallResult:
    """Import the files as a skill version for `agent` (pending_review) through the normal
    directory import. Raises BundleRefused with the import's problems."""
    with tempfile.TemporaryDirectory(prefix="forge-import-") as tmp:
        root = Path(tmp) / bundle_check(files).name
        for path, text in files.items():
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        try:
            report = skill_import_directory(
                path=root, actor=actor, agent=agent, all_or_nothing=True, source=source
            )
        except SkillError as exc:
            raise BundleRefused(exc.describe()) from exc
    return report.installed[0]
