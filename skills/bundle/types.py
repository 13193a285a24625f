"""Value types shared by every part of the bundle package.

Everything here is immutable and free of I/O so that it can be passed between the parser, the
filesystem and archive readers, the review and the Django layer without copying.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["info", "warning", "danger"]

#: File name of the host-side policy sidecar. Never skill content, never hashed, never trusted.
POLICY_FILE = "policy.json"
#: The one required file of a skill.
SKILL_MD = "SKILL.md"
#: The manifest that makes a skill an MCP skill (skills.bundle.manifest). Content, hashed.
SKILL_TOML = "skill.toml"


@dataclass(frozen=True)
class BundleLimits:
    """Size and shape limits applied to every way a skill enters the system."""

    max_file_bytes: int = 1_048_576  # 1 MiB per file
    max_total_bytes: int = 10_485_760  # 10 MiB per skill (and per uploaded archive, unpacked)
    max_archive_entries: int = 2000  # entries in one archive / files walked in one directory
    max_compression_ratio: int = 100  # unpacked bytes per packed byte


@dataclass(frozen=True)
class Problem:
    """One reason a bundle is refused. ``rule`` is a short stable identifier."""

    path: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message} [{self.rule}]"

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "rule": self.rule, "message": self.message}


class BundleError(ValueError):
    """A bundle (or a whole archive) was refused; ``problems`` lists every reason found."""

    def __init__(self, problems: Iterable[Problem] | str) -> None:
        if isinstance(problems, str):
            # Exception machinery elsewhere (task result backends, logging adapters) may rebuild
            # an exception from its message alone; keep that message as one problem.
            problems = [Problem(".", "bundle-error", problems)]
        self.problems: list[Problem] = list(problems)
        if not self.problems:
            raise ValueError("BundleError needs at least one problem")
        super().__init__(str(self))

    def __reduce__(self) -> tuple[type[BundleError], tuple[list[Problem]]]:
        return (type(self), (self.problems,))

    def __str__(self) -> str:
        return "; ".join(str(problem) for problem in self.problems)

    @property
    def rules(self) -> list[str]:
        """The rule ids of all problems, in order (handy for API error details)."""
        return [problem.rule for problem in self.problems]

    def to_dict(self) -> list[dict[str, str]]:
        return [problem.to_dict() for problem in self.problems]


@dataclass(frozen=True)
class Finding:
    """Something worth telling a reviewer that does not by itself refuse the bundle."""

    path: str
    rule: str
    message: str
    severity: Severity
    why: str = ""  # why the finding matters, for the reviewer (omitted from the dict if empty)

    def to_dict(self) -> dict[str, str]:
        out = {
            "path": self.path,
            "rule": self.rule,
            "message": self.message,
            "severity": self.severity,
        }
        if self.why:
            out["why"] = self.why
        return out


@dataclass(frozen=True)
class ParsedSkillMd:
    """SKILL.md split into its frontmatter mapping and markdown body."""

    frontmatter: dict[str, Any]
    body: str
    findings: list[Finding] = field(default_factory=list)


@dataclass(frozen=True)
class BundleFile:
    """One content file of a skill. ``path`` is relative, POSIX and NFC-normalised."""

    path: str
    data: bytes = field(repr=False)
    size: int
    sha256: str  # lowercase hex digest of ``data``

    @property
    def is_binary(self) -> bool:
        """Binary means "contains a NUL byte" (the same test the review uses)."""
        return b"\0" in self.data


@dataclass(frozen=True)
class Bundle:
    """A validated skill: everything needed to store it as a new version.

    ``files`` holds every content file sorted by path, SKILL.md included and policy.json never
    included. ``declared_policy`` is a policy.json that came with the input, parsed for
    information only: it is not content, not part of ``content_hash`` and never an approval.
    """

    name: str
    description: str
    frontmatter: dict[str, Any]
    body: str
    files: tuple[BundleFile, ...]
    content_hash: str
    findings: tuple[Finding, ...] = ()
    declared_policy: dict[str, Any] | None = None
    #: the validated skill.toml (a skills.bundle.manifest.McpManifest) of an MCP skill, else None
    manifest: Any = None

    @property
    def is_mcp(self) -> bool:
        """An MCP skill: it has a skill.toml, whose server script is one of its files."""
        return self.manifest is not None

    @property
    def total_size(self) -> int:
        """Sum of the content files' sizes in bytes."""
        return sum(f.size for f in self.files)

    def file_map(self) -> dict[str, bytes]:
        """Content files as ``{path: bytes}`` (the shape the review and diff functions take)."""
        return {f.path: f.data for f in self.files}

    def get(self, path: str) -> BundleFile | None:
        for bundle_file in self.files:
            if bundle_file.path == path:
                return bundle_file
        return None


def as_file_map(files: Mapping[str, bytes] | Bundle) -> dict[str, bytes]:
    """Accept either a Bundle or a ``{path: bytes}`` mapping; policy.json is always dropped."""
    if isinstance(files, Bundle):
        return files.file_map()
    return {path: data for path, data in files.items() if path != POLICY_FILE}
