"""Turning a set of files into a validated :class:`Bundle` (or one :class:`BundleError`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from .hashing import content_hash, sha256_hex
from .manifest import parse_manifest
from .paths import (
    PathKind,
    check_path,
    classify,
    duplicate_problems,
    is_skill_md,
    skipped_findings,
)
from .skillmd import installation_problems, parse_skill_md, spec_findings, unstorable_text
from .types import (
    POLICY_FILE,
    SKILL_MD,
    SKILL_TOML,
    Bundle,
    BundleError,
    BundleFile,
    BundleLimits,
    Finding,
    Problem,
)

#: Path used for problems that concern the whole skill rather than one file.
BUNDLE_PATH = "."


def size_problems(sizes: Mapping[str, int], limits: BundleLimits) -> list[Problem]:
    """Per-file and total size problems for content files (sizes in bytes)."""
    problems = [
        Problem(
            path,
            "file-too-large",
            f"file is {size:,} bytes; the limit is {limits.max_file_bytes:,} bytes per file",
        )
        for path, size in sorted(sizes.items())
        if size > limits.max_file_bytes
    ]
    total = sum(sizes.values())
    if total > limits.max_total_bytes:
        problems.append(
            Problem(
                BUNDLE_PATH,
                "bundle-too-large",
                f"skill files total {total:,} bytes; the limit is {limits.max_total_bytes:,} "
                "bytes per skill",
            )
        )
    return problems


def read_declared_policy(
    raw: bytes | None, limits: BundleLimits
) -> tuple[dict[str, Any] | None, list[Finding]]:
    """Parse a policy.json that came with the input, for information only."""
    if raw is None:
        return None, []
    notice = Finding(
        POLICY_FILE,
        "policy-not-content",
        "policy.json came with the files: shown for information, not part of the content hash "
        "and never treated as an approval",
        "info",
    )
    if len(raw) > limits.max_file_bytes:
        return None, [
            notice,
            Finding(POLICY_FILE, "policy-too-large", "policy.json is too large to read", "warning"),
        ]
    try:
        parsed = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None, [
            notice,
            Finding(POLICY_FILE, "policy-invalid", "policy.json is not valid JSON", "warning"),
        ]
    if not isinstance(parsed, dict):
        return None, [
            notice,
            Finding(POLICY_FILE, "policy-invalid", "policy.json is not a JSON object", "warning"),
        ]
    where = unstorable_text(parsed)
    if where is not None:
        return None, [
            notice,
            Finding(
                POLICY_FILE,
                "policy-invalid",
                f"policy.json {where} holds a NUL or an unpaired surrogate character",
                "warning",
            ),
        ]
    return parsed, [notice]


def _canonical_skill_md(
    content: dict[str, bytes], sizes: dict[str, int], findings: list[Finding]
) -> list[Problem]:
    """Store a SKILL.md written in another letter case as ``SKILL.md`` (in place), or refuse
    a skill that has it in more than one case (which one counts would depend on the reader)."""
    variants = sorted(p for p in sizes if is_skill_md(p))
    if variants == [SKILL_MD] or not variants:
        return []
    if len(variants) > 1:
        listed = ", ".join(variants)
        return [
            Problem(
                path,
                "skill-md-ambiguous",
                f"SKILL.md is present in more than one letter case ({listed}); keep one",
            )
            for path in variants
            if path != SKILL_MD
        ]
    [variant] = variants
    sizes[SKILL_MD] = sizes.pop(variant)
    if variant in content:
        content[SKILL_MD] = content.pop(variant)
    findings.append(
        Finding(variant, "skill-md-case", f"{variant} is read and stored as SKILL.md", "info")
    )
    return []


def assemble(
    *,
    content: Mapping[str, bytes],
    sizes: Mapping[str, int] | None = None,
    policy_raw: bytes | None = None,
    dir_name: str | None,
    check_dir_name: bool = True,
    limits: BundleLimits,
    problems: Iterable[Problem] = (),
    findings: Iterable[Finding] = (),
) -> Bundle:
    """Validate already-classified content files and build the Bundle, or raise every problem.

    ``content`` maps valid, normalised content paths to their bytes. ``sizes`` may list files
    whose bytes were deliberately not read (because they were already known to be too large);
    when omitted the sizes are those of ``content``. ``problems``/``findings`` carry what the
    caller (directory scan, archive reader) already found. A ``SKILL.md`` in another letter
    case becomes ``SKILL.md``.
    """
    all_problems = list(problems)
    head_findings: list[Finding] = []
    tail_findings = list(findings)
    content = dict(content)
    sizes = dict(sizes) if sizes is not None else {p: len(d) for p, d in content.items()}
    all_problems.extend(size_problems(sizes, limits))
    all_problems.extend(_canonical_skill_md(content, sizes, head_findings))

    frontmatter: dict[str, Any] = {}
    body = ""
    if SKILL_MD not in sizes:
        all_problems.append(
            Problem(SKILL_MD, "skill-md-missing", "a skill needs a SKILL.md at its top level")
        )
    elif SKILL_MD in content and len(content[SKILL_MD]) <= limits.max_file_bytes:
        try:
            parsed = parse_skill_md(content[SKILL_MD])
        except BundleError as exc:
            all_problems.extend(exc.problems)
        else:
            frontmatter = parsed.frontmatter
            body = parsed.body
            head_findings.extend(parsed.findings)
            head_findings.extend(spec_findings(frontmatter, dir_name))
            all_problems.extend(
                installation_problems(frontmatter, dir_name if check_dir_name else None)
            )

    manifest = None
    if SKILL_TOML in content and len(content[SKILL_TOML]) <= limits.max_file_bytes:
        # an MCP skill's manifest is validated like the frontmatter: every problem refuses
        manifest, manifest_problems = parse_manifest(
            content[SKILL_TOML],
            files=content,
            skill_name=frontmatter.get("name")
            if isinstance(frontmatter.get("name"), str)
            else None,
        )
        all_problems.extend(manifest_problems)

    declared_policy, policy_findings = read_declared_policy(policy_raw, limits)
    if all_problems:
        raise BundleError(all_problems)

    files = tuple(
        BundleFile(
            path=path,
            data=bytes(content[path]),
            size=len(content[path]),
            sha256=sha256_hex(content[path]),
        )
        for path in sorted(content, key=lambda p: p.encode("utf-8"))
    )
    return Bundle(
        name=frontmatter["name"],
        description=frontmatter["description"],
        frontmatter=frontmatter,
        body=body,
        files=files,
        content_hash=content_hash((f.path, f.data) for f in files),
        findings=tuple(head_findings + tail_findings + policy_findings),
        declared_policy=declared_policy,
        manifest=manifest,
    )


def bundle_from_files(
    files: Mapping[str, bytes],
    *,
    dir_name: str | None,
    limits: BundleLimits = BundleLimits(),
) -> Bundle:
    """Validate a ``{relative path: bytes}`` mapping as one skill.

    Every path is checked (traversal, absolute, backslash, empty/dot segments, control, bidi and
    zero-width characters, NFC duplicates); content is SKILL.md, references/**, scripts/** and
    assets/**; policy.json becomes ``declared_policy``; denylisted and other paths are skipped
    with an info finding. All problems are collected and raised as one :class:`BundleError`.
    ``dir_name``, when given, must equal the skill's name.
    """
    problems: list[Problem] = []
    content: dict[str, bytes] = {}
    skipped: list[tuple[str, PathKind]] = []
    policy_raw: bytes | None = None
    valid_paths: list[str] = []
    for raw_path, data in files.items():
        path, path_problems = check_path(raw_path)
        if path_problems:
            problems.extend(path_problems)
            continue
        valid_paths.append(path)
        kind = classify(path)
        if kind == "content":
            content[path] = bytes(data)
        elif kind == "policy":
            policy_raw = bytes(data)
        else:
            skipped.append((path, kind))
    problems.extend(duplicate_problems(valid_paths))
    return assemble(
        content=content,
        policy_raw=policy_raw,
        dir_name=dir_name,
        limits=limits,
        problems=problems,
        findings=skipped_findings(skipped),
    )


def bundle_from_pasted(text: str, *, limits: BundleLimits = BundleLimits()) -> Bundle:
    """Scenario 6: a SKILL.md pasted as text becomes a one-file skill (no directory to match)."""
    # surrogatepass: text holding lone surrogates becomes bytes that fail SKILL.md decoding, so
    # it is refused as a BundleError (skill-md-encoding) instead of escaping as UnicodeError.
    data = text.encode("utf-8", errors="surrogatepass")
    return bundle_from_files({SKILL_MD: data}, dir_name=None, limits=limits)
