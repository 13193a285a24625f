"""Reading skills from directories without ever following a link.

The walk holds a file descriptor for each directory and opens children relative to it with
``O_NOFOLLOW``, so a path component cannot be swapped for a symlink between the check and the
read. Every entry is examined with ``lstat`` semantics: a symlink, a hard-linked file
(``st_nlink > 1``), a device, FIFO or socket anywhere below the skill directory refuses the
skill. Denylisted directories (``node_modules/``, ``.git/``, …) are pruned — never entered and
never read — so what lies inside them cannot reach the skill either way (npm routinely leaves
symlinks in ``node_modules/.bin``). File contents are read only while the skill is still within
its size limits, so a huge file is never loaded.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .build import BUNDLE_PATH, assemble, size_problems
from .paths import DENIED_DIRS, PathKind, check_path, classify, is_skill_md, skipped_findings
from .types import Bundle, BundleError, BundleLimits, Finding, Problem

#: Written into a prepared workspace; never skill content and not worth a finding.
BASELINE_FILE = ".motor-baseline.json"

_READ_CHUNK = 65_536  # bytes
_WALK_FACTOR = 50  # entries examined per allowed skill file (100,000 with the default limit)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


@dataclass
class ScanResult:
    """What a directory walk found; nothing here has been validated as a skill yet."""

    content: dict[str, bytes] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    policy_raw: bytes | None = None
    problems: list[Problem] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    unreadable: bool = False  # the directory itself could not be opened (missing, link, file)


def _kind_name(mode: int) -> str:
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


def _read_at(dir_fd: int, name: str, expected: os.stat_result, cap: int) -> bytes | None:
    """Read a regular file relative to ``dir_fd``; None if it changed since it was listed."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (
            expected.st_dev,
            expected.st_ino,
        ):
            return None
        chunks = []
        remaining = cap + 1
        while remaining > 0:
            chunk = os.read(fd, min(_READ_CHUNK, remaining))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        if len(data) != expected.st_size:
            return None
        return data
    finally:
        os.close(fd)


def scan_directory(path: Path, *, limits: BundleLimits) -> ScanResult:
    """Walk a skill directory and collect content, sizes, policy.json, problems and findings.

    Never raises for content problems; they are returned so that callers can report them
    together with the SKILL.md problems.
    """
    result = ScanResult()
    problems = result.problems
    try:
        root_fd = os.open(path, _DIR_FLAGS)
    except FileNotFoundError:
        problems.append(Problem(BUNDLE_PATH, "not-found", f"{path} does not exist"))
        result.unreadable = True
        return result
    except OSError:
        result.unreadable = True
        if os.path.islink(path):
            problems.append(
                Problem(BUNDLE_PATH, "symlink", "the skill directory is a symbolic link")
            )
        else:
            problems.append(Problem(BUNDLE_PATH, "not-a-directory", f"{path} is not a directory"))
        return result

    skipped: list[tuple[str, PathKind]] = []
    total = 0
    visited = 0
    # Content files are limited to max_archive_entries; everything else is only looked at (for
    # links and devices), so a run's output next to its skill may hold many more entries.
    walk_budget = limits.max_archive_entries * _WALK_FACTOR
    stack: list[tuple[int, str]] = [(root_fd, "")]
    try:
        while stack:
            dir_fd, prefix = stack.pop()
            try:
                with os.scandir(dir_fd) as it:
                    entries = sorted(it, key=lambda e: e.name)
                for entry in entries:
                    rel = prefix + entry.name
                    visited += 1
                    if visited > walk_budget:
                        problems.append(
                            Problem(
                                BUNDLE_PATH,
                                "too-many-files",
                                f"more than {walk_budget:,} files and directories to check",
                            )
                        )
                        return result
                    if (
                        prefix == ""
                        and entry.name == BASELINE_FILE
                        and entry.is_file(follow_symlinks=False)
                    ):
                        continue
                    norm, path_problems = check_path(rel)
                    if path_problems:
                        problems.extend(path_problems)
                        continue
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:  # vanished or unreadable since the listing
                        problems.append(Problem(norm, "unreadable", "cannot be examined"))
                        continue
                    mode = st.st_mode
                    if stat.S_ISLNK(mode):
                        try:
                            target = os.readlink(entry.name, dir_fd=dir_fd)
                        except OSError:
                            target = "?"
                        problems.append(
                            Problem(
                                norm,
                                "symlink",
                                f"symbolic link to {target!r}; links are never followed or stored",
                            )
                        )
                    elif stat.S_ISDIR(mode):
                        if classify(norm) == "denied":
                            skipped.append((norm + "/", "denied"))
                            continue
                        try:
                            child = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
                        except OSError:
                            problems.append(
                                Problem(norm, "unreadable", "directory cannot be opened")
                            )
                            continue
                        stack.append((child, norm + "/"))
                    elif stat.S_ISREG(mode):
                        if st.st_nlink > 1:
                            problems.append(
                                Problem(
                                    norm,
                                    "hardlink",
                                    f"file has {st.st_nlink} hard links; skill files must be "
                                    "plain files",
                                )
                            )
                            continue
                        kind = classify(norm)
                        if kind == "policy":
                            # Information only: an unreadable or oversized one is just left out.
                            if st.st_size <= limits.max_file_bytes:
                                result.policy_raw = _read_at(
                                    dir_fd, entry.name, st, limits.max_file_bytes
                                )
                        elif kind == "content":
                            if len(result.sizes) >= limits.max_archive_entries:
                                problems.append(
                                    Problem(
                                        BUNDLE_PATH,
                                        "too-many-files",
                                        f"more than {limits.max_archive_entries:,} skill files",
                                    )
                                )
                                return result
                            result.sizes[norm] = st.st_size
                            total += st.st_size
                            if st.st_size > limits.max_file_bytes:
                                continue
                            if total > limits.max_total_bytes and not is_skill_md(norm):
                                continue
                            data = _read_at(dir_fd, entry.name, st, limits.max_file_bytes)
                            if data is None:
                                problems.append(
                                    Problem(norm, "file-changed", "file changed while being read")
                                )
                            else:
                                result.content[norm] = data
                        else:
                            skipped.append((norm, kind))
                    else:
                        problems.append(
                            Problem(
                                norm,
                                "special-file",
                                f"{_kind_name(mode)}; only regular files and directories are "
                                "allowed",
                            )
                        )
            finally:
                os.close(dir_fd)
    finally:
        for fd, _ in stack:
            os.close(fd)
    result.findings.extend(skipped_findings(skipped))
    result.skipped = [path for path, _ in skipped]
    return result


def scan_skill_dir(path: Path, *, limits: BundleLimits = BundleLimits()) -> dict[str, bytes]:
    """The content files of one skill directory as ``{relative path: bytes}``.

    Only SKILL.md, references/**, scripts/** and assets/** are returned; policy.json, denylisted
    and other files are left out. Raises :class:`BundleError` for links, hard links, devices,
    FIFOs or sockets anywhere below (pruned denylisted directories excepted), bad names and files
    or totals over the limits. SKILL.md itself is not validated here.
    """
    scanned = scan_directory(path, limits=limits)
    problems = scanned.problems + size_problems(scanned.sizes, limits)
    if problems:
        raise BundleError(problems)
    return dict(scanned.content)


def bundle_from_directory(
    path: Path,
    *,
    limits: BundleLimits = BundleLimits(),
    check_dir_name: bool = True,
) -> Bundle:
    """Read and validate the skill stored in directory ``path`` (its name is the directory's)."""
    path = Path(path)
    scanned = scan_directory(path, limits=limits)
    if scanned.unreadable:
        raise BundleError(scanned.problems)
    return assemble(
        content=scanned.content,
        sizes=scanned.sizes,
        policy_raw=scanned.policy_raw,
        dir_name=path.name or None,
        check_dir_name=check_dir_name,
        limits=limits,
        problems=scanned.problems,
        findings=scanned.findings,
    )


def _find_tree_skills(
    root: Path, limits: BundleLimits
) -> tuple[list[str], list[tuple[str, BundleError]]]:
    """Relative directories holding a SKILL.md in any letter case (not nested in another),
    plus errors for links met and for a search that went over its budget.

    Hidden directories are searched (collections keep skills in ``.curated/``, ``.system/``);
    denylisted ones (``.git/``, ``node_modules/``, ...) are not. There is no depth limit: the
    search examines at most ``max_archive_entries * 50`` entries, like one skill's walk.
    """
    found: list[str] = []
    errors: list[tuple[str, BundleError]] = []
    budget = limits.max_archive_entries * _WALK_FACTOR
    visited = 0
    stack: list[tuple[Path, str]] = [(root, "")]
    while stack:
        directory, rel = stack.pop()
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        visited += len(entries)
        if visited > budget:
            problem = Problem(
                BUNDLE_PATH,
                "too-many-files",
                f"more than {budget:,} files and directories to search for skills",
            )
            return sorted(found), [*errors, (BUNDLE_PATH, BundleError([problem]))]
        subdirs: list[tuple[Path, str]] = []
        for entry in entries:
            child_rel = f"{rel}/{entry.name}" if rel else entry.name
            if entry.name in DENIED_DIRS:
                continue
            if entry.is_symlink():
                problem = Problem(child_rel, "symlink", "symbolic links are never followed")
                errors.append((child_rel, BundleError([problem])))
                continue
            if entry.is_dir(follow_symlinks=False):
                subdirs.append((Path(entry.path), child_rel))
        for child, child_rel in subdirs:
            if _holds_skill_md(child):
                found.append(child_rel)
            else:
                stack.append((child, child_rel))
    found.sort()
    return found, errors


def _holds_skill_md(directory: Path) -> bool:
    """Whether `directory` has an entry named SKILL.md in any letter case (not read)."""
    try:
        with os.scandir(directory) as it:
            return any(is_skill_md(entry.name) for entry in it)
    except OSError:
        return False


def bundles_from_tree(
    path: Path, *, limits: BundleLimits = BundleLimits()
) -> tuple[list[Bundle], list[tuple[str, BundleError]]]:
    """The valid skills of :func:`locate_tree_skills`, and the errors (a directory that is one
    invalid skill is keyed by its own name)."""
    located, errors = locate_tree_skills(path, limits=limits)
    if errors and errors[0][0] == "." and _holds_skill_md(Path(path)):
        errors = [(Path(path).name, exc) for _, exc in errors]
    return [bundle for _, bundle in located], errors


def locate_tree_skills(
    path: Path, *, limits: BundleLimits = BundleLimits()
) -> tuple[list[tuple[str, Bundle]], list[tuple[str, BundleError]]]:
    """Read a directory that is one skill, or that holds skill directories.

    Returns ``([(where, bundle), ...], [(where, error), ...])``, ``where`` being the skill's
    directory relative to ``path`` (``"."`` for ``path`` itself).

    If ``path`` has a SKILL.md (in any letter case) it is one skill. Otherwise every directory below that holds one is a skill (keyed by its path relative to
    ``path``; skills are not looked for inside other skills or denylisted directories; hidden
    directories are searched; see :func:`_find_tree_skills` for the bound). Each skill is
    validated on its own: the valid ones are returned, the others listed with their error.
    Symbolic links met while searching are reported as errors.
    """
    path = Path(path)
    if os.path.islink(path):
        problem = Problem(BUNDLE_PATH, "symlink", "the skill directory is a symbolic link")
        return [], [(BUNDLE_PATH, BundleError([problem]))]
    if _holds_skill_md(path):
        try:
            return [(BUNDLE_PATH, bundle_from_directory(path, limits=limits))], []
        except BundleError as exc:
            return [], [(BUNDLE_PATH, exc)]
    found, errors = _find_tree_skills(path, limits)
    bundles: list[tuple[str, Bundle]] = []
    for rel in found:
        try:
            bundles.append((rel, bundle_from_directory(path / rel, limits=limits)))
        except BundleError as exc:
            errors.append((rel, exc))
    if not found and not errors:
        errors.append(
            (
                BUNDLE_PATH,
                BundleError(
                    [Problem(BUNDLE_PATH, "no-skills", f"no SKILL.md found in {path} or below")]
                ),
            )
        )
    errors.sort(key=lambda item: item[0])
    return bundles, errors
