"""What changed between two versions of a skill: the files (unified diffs for text) and the
capabilities (domains, credentials, scripts, shell blocks and suspicious patterns) the new
version gains or loses."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .review import review_bundle
from .types import Bundle, Finding, as_file_map

_MAX_DIFF_CHARS = 200_000


@dataclass(frozen=True)
class FileChange:
    """One changed file: a unified diff for text, ``"binary changed"`` for binary data."""

    path: str
    binary: bool
    diff: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "binary": self.binary, "diff": self.diff}


@dataclass(frozen=True)
class VersionDiff:
    """What changed between two versions of a skill, files and capabilities."""

    added: list[str]
    removed: list[str]
    changed: list[FileChange]
    capability: list[str]
    domains_added: list[str] = field(default_factory=list)
    domains_removed: list[str] = field(default_factory=list)
    credentials_added: list[str] = field(default_factory=list)
    credentials_removed: list[str] = field(default_factory=list)
    new_suspicious: list[Finding] = field(default_factory=list)

    @property
    def has_changes(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "capability": list(self.capability),
            "new_suspicious": [f.to_dict() for f in self.new_suspicious],
            "added": list(self.added),
            "removed": list(self.removed),
            "changed": [c.to_dict() for c in self.changed],
            "domains_added": list(self.domains_added),
            "domains_removed": list(self.domains_removed),
            "credentials_added": list(self.credentials_added),
            "credentials_removed": list(self.credentials_removed),
        }


def _text_diff(path: str, old: bytes, new: bytes) -> str:
    old_lines = old.decode("utf-8", errors="replace").splitlines(keepends=True)
    new_lines = new.decode("utf-8", errors="replace").splitlines(keepends=True)
    out: list[str] = []
    size = 0
    for line in difflib.unified_diff(old_lines, new_lines, f"a/{path}", f"b/{path}", n=3):
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        size += len(line)
        if size > _MAX_DIFF_CHARS:
            out.append(f"... (diff truncated at {_MAX_DIFF_CHARS:,} characters)\n")
            break
        out.append(line)
    return "".join(out)


def diff_bundles(
    old: Mapping[str, bytes] | Bundle | None, new: Mapping[str, bytes] | Bundle
) -> VersionDiff:
    """Compare two versions (``old=None`` means there is no earlier version)."""
    new_map = as_file_map(new)
    old_map = as_file_map(old) if old is not None else {}
    added = sorted(p for p in new_map if p not in old_map)
    removed = sorted(p for p in old_map if p not in new_map)
    changed: list[FileChange] = []
    for path in sorted(p for p in new_map if p in old_map and old_map[p] != new_map[p]):
        before, after = old_map[path], new_map[path]
        if b"\0" in before or b"\0" in after:
            changed.append(FileChange(path, True, "binary changed"))
        else:
            changed.append(FileChange(path, False, _text_diff(path, before, after)))

    new_facts = review_bundle(new_map)
    old_facts = review_bundle(old_map) if old is not None else None
    old_domains = set(old_facts.referenced_domains) if old_facts else set()
    old_creds = set(old_facts.referenced_credentials) if old_facts else set()
    domains_added = sorted(set(new_facts.referenced_domains) - old_domains)
    domains_removed = sorted(old_domains - set(new_facts.referenced_domains))
    creds_added = sorted(set(new_facts.referenced_credentials) - old_creds)
    creds_removed = sorted(old_creds - set(new_facts.referenced_credentials))

    first = old is None
    capability: list[str] = []
    capability += [f"{'references' if first else 'now also references'} {d}" for d in domains_added]
    capability += [f"no longer references {d}" for d in domains_removed]
    capability += [f"{'needs' if first else 'now needs'} {c}" for c in creds_added]
    capability += [f"no longer needs {c}" for c in creds_removed]
    old_scripts = old_facts.has_scripts if old_facts else False
    if new_facts.has_scripts and not old_scripts:
        capability.append("includes scripts/" if first else "now includes scripts/")
    elif old_scripts and not new_facts.has_scripts:
        capability.append("no longer includes scripts/")
    old_shell = old_facts.has_shell_blocks if old_facts else False
    if new_facts.has_shell_blocks and not old_shell:
        capability.append("has shell code blocks" if first else "now has shell code blocks")

    old_keys = {(f.path, f.rule) for f in old_facts.suspicious} if old_facts else set()
    new_suspicious = [f for f in new_facts.suspicious if (f.path, f.rule) not in old_keys]
    for path, rule in sorted({(f.path, f.rule) for f in new_suspicious}):
        capability.append(f"new suspicious pattern in {path}: {rule}")
    return VersionDiff(
        added=added,
        removed=removed,
        changed=changed,
        capability=capability,
        domains_added=domains_added,
        domains_removed=domains_removed,
        credentials_added=creds_added,
        credentials_removed=creds_removed,
        new_suspicious=new_suspicious,
    )
