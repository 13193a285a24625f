"""Agent Skills bundles: parsing, validation, hashing, workspace diffs and deterministic review.

Plain Python with no Django import, so that anything (the skills app, workers, management
commands, tools without a database) can validate a skill. Limits are passed in as
:class:`BundleLimits`; nothing here reads settings.

Ways in, all returning validated :class:`Bundle` objects or raising one :class:`BundleError`
that lists every problem as ``<path>: <message> [<rule>]``:

* :func:`bundle_from_files` — a ``{path: bytes}`` mapping
* :func:`bundle_from_pasted` — a pasted SKILL.md
* :func:`bundle_from_directory` / :func:`bundles_from_tree` — directories on disk
* :func:`bundles_from_archive` — uploaded .zip / .tar.gz / .tgz / .tar
* :func:`scan_skill_dir` + :func:`diff_against_baseline` — run workspaces

The content hash is defined byte-for-byte in :mod:`skills.bundle.hashing`.

Decisions worth knowing (each module documents its own rules in full):

* Content is ``SKILL.md``, ``references/**``, ``scripts/**``, ``assets/**``. Any other file is
  not refused but skipped with an info finding; denylisted trees (``node_modules/``, ``.git/``,
  ``.cache/``, ``.local/``, Python caches and virtualenvs, ``__MACOSX/``) are pruned without
  being read. Dangerous things are refused wherever they are: links, devices, FIFOs, sockets,
  hard links, traversal, absolute or hidden-character names.
* The top-level ``policy.json`` is never content and never hashed; when present it is parsed
  into ``Bundle.declared_policy`` for information and is never an approval.
* YAML goes through a SafeLoader subclass that refuses duplicate keys; size, flow nesting and
  alias expansion are bounded before/while loading. Unquoted ``key: a: b`` values are repaired
  with a finding, as the Agent Skills client guide suggests.
* A top-level ``skill.toml`` makes the skill an MCP skill: it is content (hashed), validated by
  :mod:`skills.bundle.manifest` with file + rule problems, and parsed into ``Bundle.manifest``,
  a proposal (domains, credentials, limits) for the review, never an approval.
* ``SKILL.md`` is accepted in any letter case (``skill.md``, as peers do) and stored as
  ``SKILL.md``; two of them in one skill are refused.
* Every problem carries a stable ``rule`` id; whole-skill problems use the path ``"."`` and
  whole-archive problems the archive's file name.
"""

from __future__ import annotations

from .archives import bundles_from_archive, locate_archive_skills
from .build import BUNDLE_PATH, bundle_from_files, bundle_from_pasted
from .filesystem import (
    BASELINE_FILE,
    bundle_from_directory,
    bundles_from_tree,
    locate_tree_skills,
    scan_skill_dir,
)
from .hashing import content_hash, sha256_hex
from .manifest import McpManifest, SandboxLimits, parse_manifest
from .paths import (
    BIDI_CHARS,
    CONTENT_DIRS,
    DENIED_DIRS,
    DENIED_FILES,
    MAX_PATH_CHARS,
    ZERO_WIDTH_CHARS,
    check_path,
    classify,
)
from .rename import rename_bundle
from .review import InventoryEntry, ReviewFacts, review_bundle
from .skillmd import (
    MAX_DESCRIPTION_CHARS,
    MAX_NAME_CHARS,
    NAME_RE,
    installation_problems,
    parse_skill_md,
    spec_findings,
    unstorable_text,
)
from .types import (
    POLICY_FILE,
    SKILL_MD,
    SKILL_TOML,
    Bundle,
    BundleError,
    BundleFile,
    BundleLimits,
    Finding,
    ParsedSkillMd,
    Problem,
    Severity,
)
from .version_diff import FileChange, VersionDiff, diff_bundles
from .workspace import (
    Baseline,
    WorkspaceDiff,
    diff_against_baseline,
    find_skill_dirs,
    read_baseline,
    write_baseline,
)

__all__ = [
    "BASELINE_FILE",
    "BIDI_CHARS",
    "DENIED_FILES",
    "MAX_PATH_CHARS",
    "ZERO_WIDTH_CHARS",
    "BUNDLE_PATH",
    "CONTENT_DIRS",
    "DENIED_DIRS",
    "MAX_DESCRIPTION_CHARS",
    "MAX_NAME_CHARS",
    "NAME_RE",
    "POLICY_FILE",
    "SKILL_MD",
    "SKILL_TOML",
    "McpManifest",
    "SandboxLimits",
    "parse_manifest",
    "Baseline",
    "Bundle",
    "BundleError",
    "BundleFile",
    "BundleLimits",
    "FileChange",
    "Finding",
    "InventoryEntry",
    "ParsedSkillMd",
    "Problem",
    "ReviewFacts",
    "Severity",
    "VersionDiff",
    "WorkspaceDiff",
    "bundle_from_directory",
    "bundle_from_files",
    "bundle_from_pasted",
    "bundles_from_archive",
    "bundles_from_tree",
    "check_path",
    "classify",
    "content_hash",
    "diff_against_baseline",
    "diff_bundles",
    "find_skill_dirs",
    "installation_problems",
    "locate_archive_skills",
    "locate_tree_skills",
    "parse_skill_md",
    "read_baseline",
    "rename_bundle",
    "review_bundle",
    "scan_skill_dir",
    "sha256_hex",
    "spec_findings",
    "unstorable_text",
    "write_baseline",
]
