"""Path rules for files inside a skill.

Every path that reaches us — a mapping key, a file found on disk, an archive entry — goes through
:func:`check_path` before anything else looks at it. A valid path is relative, POSIX (``/``
separators), NFC-normalised, free of ``..``, ``.`` and empty segments, and contains no control,
bidirectional-override or zero-width characters (they make two different names look the same to
a reviewer).

:func:`classify` then decides what a valid path *is*:

* ``"content"``  — ``SKILL.md`` (in any letter case, as peers accept it; the bundle stores it
  as ``SKILL.md``), ``references/**``, ``scripts/**``, ``assets/**``
* ``"policy"``   — the top-level ``policy.json`` (host-side sidecar, never content)
* ``"denied"``   — anything under ``node_modules/``, ``.cache/``, ``.local/``, ``.git/`` (and the
  Python caches/virtualenvs and ``__MACOSX/``, at any depth) or named ``*.log``, ``.DS_Store``,
  ``Thumbs.db``, ``desktop.ini``, and every file a host tool would execute or source
  (HOST_EXECUTED_DIRS / HOST_EXECUTED_FILES, any case): skipped without being read
* ``"ignored"``  — any other path: not part of the skill, skipped with an info finding
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from typing import Literal

from .types import POLICY_FILE, SKILL_MD, SKILL_TOML, Finding, Problem

PathKind = Literal["content", "policy", "denied", "ignored"]

CONTENT_DIRS = frozenset({"references", "scripts", "assets"})
# The denylist, the Python equivalents of node_modules (virtualenvs hold symlinks to the
# interpreter, caches hold compiled files) and macOS zip litter; none of it is ever content.
DENIED_DIRS = frozenset(
    {
        "node_modules",
        ".cache",
        ".local",
        ".git",
        ".venv",
        "__pycache__",
        ".pytest_cache",
        "__MACOSX",
    }
)
# Files a host tool executes or sources when it runs in a directory holding them: git reads
# .git/ (hooks, config) and .gitconfig / .gitmodules, shells source their rc and profile files,
# direnv runs .envrc. A run may write them in its workspace; they are data there, because nothing
# on the host runs git or a shell in a workspace (README, design notes), and never skill content,
# at any depth and in any letter case (case-insensitive filesystems would treat .GIT as .git).
HOST_EXECUTED_DIRS = frozenset({".git"})
HOST_EXECUTED_FILES = frozenset(
    {
        ".gitconfig",
        ".gitmodules",
        ".envrc",
        ".profile",
        ".login",
        ".logout",
        ".bashrc",
        ".bash_profile",
        ".bash_login",
        ".bash_logout",
        ".bash_aliases",
        ".zshrc",
        ".zshenv",
        ".zprofile",
        ".zlogin",
        ".zlogout",
        ".kshrc",
        ".mkshrc",
        ".cshrc",
        ".tcshrc",
        ".inputrc",
    }
)
DENIED_SUFFIXES = (".log",)
# Operating-system litter that zip tools on macOS/Windows add to uploads; never content.
DENIED_FILES = frozenset({".DS_Store", "Thumbs.db", "desktop.ini"})
#: Longest accepted path (characters; the database column holds 1024) and path segment
#: (bytes of UTF-8; NAME_MAX on common filesystems, so an exported skill can be written back).
MAX_PATH_CHARS = 1024
MAX_SEGMENT_BYTES = 255

# Embeddings/overrides (U+202A-202E), isolates (U+2066-2069) and the invisible direction marks
# (U+200E, U+200F, U+061C), which reorder or disguise how a name displays.
BIDI_CHARS = frozenset(
    chr(c) for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C]
)
ZERO_WIDTH_CHARS = frozenset({"\u200b", "\u200c", "\u200d", "\ufeff", "\u2060"})
_DRIVE = re.compile(r"^[A-Za-z]:")


def _has_control(text: str) -> bool:
    # Cc = C0/C1 controls (newline, NUL, ESC...); Zl/Zp = line and paragraph separators.
    return any(unicodedata.category(ch) in ("Cc", "Zl", "Zp") for ch in text)


def check_path(raw: str) -> tuple[str, list[Problem]]:
    """Validate one relative path; return its NFC form and every problem found.

    Problems name the path as given (made printable) so the user can find the offending entry.
    """
    shown = _printable(raw)
    problems: list[Problem] = []

    def refuse(rule: str, message: str) -> None:
        problems.append(Problem(shown, rule, message))

    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        refuse("path-encoding", "file names must be valid UTF-8")
    if raw == "":
        refuse("path-empty", "empty file name")
        return raw, problems
    if "\\" in raw:
        refuse("path-backslash", "backslashes are not allowed in file names; use '/'")
    if raw.startswith("/") or _DRIVE.match(raw):
        refuse("path-absolute", "absolute paths are not allowed")
    segments = raw.split("/")
    if ".." in segments:
        refuse("path-traversal", "'..' segments would leave the skill directory")
    inner = segments[1:] if raw.startswith("/") else segments
    if any(segment == "" for segment in inner):
        refuse("path-empty-segment", "empty path segment ('//' or a trailing '/')")
    if "." in segments:
        refuse("path-dot-segment", "'.' path segments are not allowed")
    if _has_control(raw):
        refuse("path-control-char", "control characters are not allowed in file names")
    if any(ch in BIDI_CHARS for ch in raw):
        refuse(
            "path-bidi",
            "bidirectional control characters (U+202A-202E, U+2066-2069, U+200E, U+200F, "
            "U+061C) are not allowed in file names",
        )
    if any(ch in ZERO_WIDTH_CHARS for ch in raw):
        refuse(
            "path-zero-width",
            "zero-width characters (U+200B-200D, U+2060, U+FEFF) are not allowed in file names",
        )
    if len(raw) > MAX_PATH_CHARS or any(
        len(segment.encode("utf-8", "surrogatepass")) > MAX_SEGMENT_BYTES for segment in segments
    ):
        refuse(
            "path-too-long",
            f"paths are limited to {MAX_PATH_CHARS} characters and {MAX_SEGMENT_BYTES} bytes "
            "per name",
        )
    normalised = unicodedata.normalize("NFC", raw) if not problems else raw
    return normalised, problems


def _printable(raw: str) -> str:
    """Render a hostile name so that it cannot reorder or hide text in an error message."""
    out = []
    for ch in raw:
        if (
            unicodedata.category(ch) in ("Cc", "Zl", "Zp")
            or ch in BIDI_CHARS
            or ch in ZERO_WIDTH_CHARS
            or 0xD800 <= ord(ch) <= 0xDFFF
        ):
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def is_skill_md(name: str) -> bool:
    """Whether a file name is SKILL.md in some letter case (``skill.md``, ``Skill.MD``)."""
    return name.lower() == SKILL_MD.lower()


def classify(path: str) -> PathKind:
    """Say what a valid, normalised path is (see the module docstring)."""
    segments = path.split("/")
    if any(segment in DENIED_DIRS for segment in segments):
        return "denied"
    folded = [segment.casefold() for segment in segments]
    if any(s in HOST_EXECUTED_DIRS for s in folded) or folded[-1] in HOST_EXECUTED_FILES:
        return "denied"
    if segments[-1].endswith(DENIED_SUFFIXES) or segments[-1] in DENIED_FILES:
        return "denied"
    if path == POLICY_FILE:
        return "policy"
    if is_skill_md(path) or path == SKILL_TOML:
        return "content"
    if len(segments) >= 2 and segments[0] in CONTENT_DIRS:
        return "content"
    return "ignored"


def duplicate_problems(paths: Iterable[str], *, rule: str = "duplicate-path") -> list[Problem]:
    """Problems for names that occur twice once NFC-normalised, and for file/dir collisions."""
    counts = Counter(unicodedata.normalize("NFC", p) for p in paths)
    problems = [
        Problem(
            path,
            rule,
            f"{count} entries have this name (after Unicode NFC normalisation)",
        )
        for path, count in sorted(counts.items())
        if count > 1
    ]
    names = set(counts)
    for path in sorted(names):
        segments = path.split("/")
        for i in range(1, len(segments)):
            parent = "/".join(segments[:i])
            if parent in names:
                problems.append(
                    Problem(parent, "path-conflict", f"is a file but also a directory of {path}")
                )
    return problems


def skip_group(path: str, kind: PathKind) -> str:
    """The name a skipped path is reported under (its denylisted directory or top-level name)."""
    segments = path.split("/")
    if kind == "denied":
        for i, segment in enumerate(segments[:-1]):
            if segment in DENIED_DIRS:
                return "/".join(segments[: i + 1]) + "/"
        return path
    return segments[0] + ("/" if len(segments) > 1 else "")


def skipped_findings(skipped: Iterable[tuple[str, PathKind]]) -> list[Finding]:
    """One info finding per skipped directory or top-level name, instead of one per file."""
    groups: set[tuple[str, PathKind]] = {(skip_group(path, kind), kind) for path, kind in skipped}
    findings = []
    for group, kind in sorted(groups):
        if kind == "denied":
            findings.append(
                Finding(group, "path-denylisted", f"skipped {group}: never skill content", "info")
            )
        else:
            findings.append(
                Finding(
                    group,
                    "path-not-allowed",
                    f"ignored {group}: skill content is SKILL.md, references/, scripts/ and "
                    "assets/",
                    "info",
                )
            )
    return findings
