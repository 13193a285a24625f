"""Giving a skill another name: its SKILL.md's ``name`` line is rewritten, nothing else.

A skill's name lives in its SKILL.md, so a skill installed under another name than its author
gave must carry that name in its content (or it would not match its own directory when written
out, and the next extraction would refuse it). The rewrite replaces the top-level ``name:`` line
of the frontmatter (and the indented lines of a block value that follows it) with
``name: <new>``; the result is parsed again and must differ from the original in the name only.
"""

from __future__ import annotations

import dataclasses
import re

from .hashing import content_hash, sha256_hex
from .skillmd import installation_problems, parse_skill_md
from .types import SKILL_MD, Bundle, BundleError, Finding, Problem

_NAME_LINE = re.compile(r"^name[ \t]*:")
_FENCE = re.compile(r"^---[ \t]*$")


def _rewrite(text: str, new_name: str) -> str | None:
    lines = text.splitlines(keepends=True)
    fences = [
        i for i, line in enumerate(lines) if _FENCE.match(line.lstrip("\ufeff").rstrip("\r\n"))
    ]
    if len(fences) < 2:
        return None
    start, end = fences[0], fences[1]
    hits = [i for i in range(start + 1, end) if _NAME_LINE.match(lines[i].lstrip("\ufeff"))]
    if len(hits) != 1:
        return None
    first = hits[0]
    last = first + 1
    while last < end and lines[last][:1] in (" ", "\t"):
        last += 1  # the continuation of a block or folded value
    ending = "\r\n" if lines[first].endswith("\r\n") else "\n"
    return "".join([*lines[:first], f"name: {new_name}{ending}", *lines[last:]])


def rename_bundle(bundle: Bundle, new_name: str) -> Bundle:
    """`bundle` under `new_name`, with SKILL.md rewritten and the content hash recomputed.

    Raises :class:`BundleError` (path SKILL.md) when the new name breaks the installation rules
    or when the frontmatter's name cannot be rewritten as one line (``rename-unsupported``).
    """
    skill_md = bundle.get(SKILL_MD)
    assert skill_md is not None  # every valid bundle has one
    problems = [p for p in installation_problems({**bundle.frontmatter, "name": new_name}, None)]
    if problems:
        raise BundleError(problems)
    rewritten = _rewrite(skill_md.data.decode("utf-8"), new_name)
    parsed = parse_skill_md(rewritten) if rewritten is not None else None
    if parsed is None or parsed.frontmatter != {**bundle.frontmatter, "name": new_name}:
        raise BundleError(
            [
                Problem(
                    SKILL_MD,
                    "rename-unsupported",
                    "the frontmatter's 'name' is not one top-level 'name:' entry that can be "
                    "rewritten; rename the skill in its SKILL.md instead",
                )
            ]
        )
    data = rewritten.encode("utf-8")  # type: ignore[union-attr]
    files = tuple(
        dataclasses.replace(f, data=data, size=len(data), sha256=sha256_hex(data))
        if f.path == SKILL_MD
        else f
        for f in bundle.files
    )
    return dataclasses.replace(
        bundle,
        name=new_name,
        frontmatter=parsed.frontmatter,
        files=files,
        content_hash=content_hash((f.path, f.data) for f in files),
        findings=(
            *bundle.findings,
            Finding(
                SKILL_MD,
                "renamed",
                f"installed as {new_name!r}; its author named it {bundle.name!r}",
                "info",
            ),
        ),
    )
