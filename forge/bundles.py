"""Generated files as a skill bundle: validation, the manifest, and the import as a new version.

A generated skill enters the skill store exactly as a third-party MCP server bundle does: its
files are written to a directory and imported with `skills.imports.skill_import_directory`
(pending_review, validated file by file, the manifest part of the content hash). There is no
second way in.
"""

from __future__ import annotations

import tempfile
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skills import bundle as bundle_lib
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


def manifest_parse(text: str) -> dict[str, Any]:
    """The manifest as a dict; BundleRefused naming the TOML error."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BundleRefused(f"{MANIFEST}: not valid TOML: {exc} [manifest-toml]") from exc


def manifest_credentials(manifest: Mapping[str, Any]) -> list[str]:
    """The vault entry names of the manifest's [auth] table (``ENV = "vault:<name>"``)."""
    auth = manifest.get("auth") or {}
    names: list[str] = []
    if isinstance(auth, Mapping):
        for ref in auth.values():
            if isinstance(ref, str) and ref.startswith("vault:"):
                name = ref.removeprefix("vault:")
                if name and name not in names:
                    names.append(name)
    return names


def manifest_of_version(version: SkillVersion) -> dict[str, Any]:
    """The parsed manifest of a stored version ({} when it has none or it does not parse)."""
    file = version.files.filter(path=MANIFEST).first()
    if file is None:
        return {}
    try:
        return manifest_parse(bytes(file.data).decode("utf-8"))
    except (BundleRefused, UnicodeDecodeError):
        return {}


def version_texts(version: SkillVersion) -> dict[str, str]:
    """The generated files of a stored version as text (edit mode starts from these)."""
    out: dict[str, str] = {}
    for file in version.files.filter(path__in=SKILL_FILES):
        out[file.path] = bytes(file.data).decode("utf-8", errors="replace")
    return out


def bundle_check(files: Mapping[str, str], *, expected_name: str = "") -> dict[str, Any]:
    """Validate generated files as one skill; return the parsed manifest.

    Raises BundleRefused listing every problem: the bundle rules (file, rule), a manifest that
    is not TOML, a manifest name that differs from SKILL.md's, a renamed skill in edit mode.
    """
    data = {path: text.encode("utf-8") for path, text in files.items()}
    try:
        bundle = bundle_lib.bundle_from_files(data, dir_name=None, limits=_limits())
    except bundle_lib.BundleError as exc:
        raise BundleRefused(
            "the files are not a valid skill: " + "; ".join(str(p) for p in exc.problems)
        ) from exc
    manifest = manifest_parse(files[MANIFEST])
    name = manifest.get("name")
    if name != bundle.name:
        raise BundleRefused(
            f"{MANIFEST}: name {name!r} differs from SKILL.md's name {bundle.name!r} "
            "[manifest-name]"
        )
    if expected_name and bundle.name != expected_name:
        raise BundleRefused(
            f"SKILL.md: the skill is {expected_name!r} and keeps its name, not {bundle.name!r} "
            "[edit-keeps-name]"
        )
    return manifest


def bundle_import(
    *, files: Mapping[str, str], agent: Any, actor: Actor, source: str = FORGE_SOURCE
) -> InstallResult:
    """Import the files as a skill version for `agent` (pending_review) through the normal
    directory import. Raises BundleRefused with the import's problems."""
    with tempfile.TemporaryDirectory(prefix="forge-import-") as tmp:
        name = manifest_parse(files[MANIFEST]).get("name") or "skill"
        root = Path(tmp) / str(name)
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
