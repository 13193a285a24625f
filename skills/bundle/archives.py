"""Reading skills from uploaded archives (.zip, .tar.gz/.tgz, .tar, plus .tar.bz2 and .tar.xz).

Every entry is examined before anything is returned. Problems that make the archive as a whole
untrustworthy refuse all of it with one :class:`BundleError` (path = the entry, or the archive's
file name for whole-archive rules):

=========================== ===============================================================
rule                        meaning
=========================== ===============================================================
path-traversal, path-*      an entry name that is absolute, climbs out with ``..``, or holds
                            backslashes, empty segments, control/bidi/zero-width characters
symlink, hardlink,          a link or device/FIFO entry (never extracted, never followed)
special-file
duplicate-path              two entries with the same name (after NFC normalisation)
archive-too-many-entries    more than ``max_archive_entries`` entries (checked from the zip
                            directory record before parsing it, and while streaming a tar)
archive-compression-ratio   unpacked/packed bytes above ``max_compression_ratio``: for each
                            zip entry that unpacks to more than 64 KiB (declared sizes first,
                            then actual bytes while reading), and for a compressed tar over
                            its whole stream once it passes 1 MiB (a tar's entries share one
                            compressed stream, so they have no packed size of their own)
archive-too-large           more than ``max_total_bytes`` unpacked, declared or actually read
archive-encrypted,          password-protected entries, damaged data, unknown format
archive-corrupt,
archive-format
=========================== ===============================================================

Headers are never trusted alone: data is read in 64 KiB chunks and reading stops at the first
cap crossed. For compressed tars the decompressed stream itself is capped, so a gzip bomb stops
after a bounded amount of work. A refusal found while an entry is being unpacked names that entry
(and the archive in its message); whole-archive totals name the archive.

Zip entry names are judged from the raw name in the archive: Python's reader cuts a name at its
first NUL, which would store ``run.sh<NUL>.txt`` as ``run.sh``; such a name is refused whole.

The ratio floors are deliberate: deflate's fixed overhead makes a tiny, very regular file (an
empty template, a run of spaces) look like a bomb, while anything under the floor cannot do harm
at any ratio; the size caps bound everything else.

Inside a valid archive, the skills are found like in a directory tree: ``SKILL.md`` (in any
letter case) at the top makes the archive one skill (no directory name to match); otherwise each
directory holding one (at any depth, hidden directories included, not inside another skill) is
a skill whose name must equal that directory's name.
Each skill is then validated on its own, as in :func:`bundles_from_tree`.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import stat
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

from .build import assemble
from .paths import (
    PathKind,
    check_path,
    classify,
    duplicate_problems,
    is_skill_md,
    skipped_findings,
)
from .types import Bundle, BundleError, BundleLimits, Problem

_CHUNK = 65_536  # bytes read per step
#: Below this many unpacked bytes (1 MiB) a compressed tar stream's ratio is not judged: tar
#: headers and small, very regular files compress extremely well without being a bomb.
_RATIO_FLOOR = 1_048_576
#: Below this many unpacked bytes (64 KiB) a zip entry's own ratio is not judged (see above).
_ENTRY_RATIO_FLOOR = 65_536
#: Room for tar headers and padding per entry when capping a decompressed tar stream (bytes).
_TAR_OVERHEAD_PER_ENTRY = 4096


class _Stop(Exception):
    """A whole-archive cap was crossed; stop reading at once."""


@dataclass
class _Collected:
    filename: str
    limits: BundleLimits
    packed_size: int
    problems: list[Problem] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    oversize: dict[str, int] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)
    dirs: set[str] = field(default_factory=set)
    skipped: list[tuple[str, PathKind]] = field(default_factory=list)
    entries: int = 0
    unpacked: int = 0
    current: str | None = None  # the entry whose data is being unpacked

    def archive_problem(self, rule: str, message: str) -> None:
        self.problems.append(Problem(self.filename, rule, message))

    def unpacking_problem(self, rule: str, message: str) -> None:
        """A bomb found while unpacking: the problem names the entry being read, if any."""
        if self.current is None:
            self.archive_problem(rule, message)
        else:
            self.problems.append(
                Problem(
                    self.current, rule, f"{message}, while unpacking this entry of {self.filename}"
                )
            )

    def total_problem(self, rule: str, message: str) -> None:
        """A whole-archive total crossed while unpacking: names the archive and the entry."""
        where = f" (crossed while unpacking {self.current})" if self.current else ""
        self.archive_problem(rule, message + where)

    def count_entry(self) -> None:
        self.entries += 1
        if self.entries > self.limits.max_archive_entries:
            self.archive_problem(
                "archive-too-many-entries",
                f"more than {self.limits.max_archive_entries:,} entries",
            )
            raise _Stop

    def add_unpacked(self, n: int) -> None:
        """Account for ``n`` more bytes of real unpacked data; stop at the whole-archive caps."""
        self.unpacked += n
        if self.unpacked > self.limits.max_total_bytes:
            self.total_problem(
                "archive-too-large",
                f"unpacks to more than {self.limits.max_total_bytes:,} bytes",
            )
            raise _Stop

    def check_stream_ratio(self, unpacked: int) -> None:
        """The whole compressed stream's ratio (tar archives), judged above 1 MiB."""
        packed = max(self.packed_size, 1)
        if unpacked > _RATIO_FLOOR and unpacked > packed * self.limits.max_compression_ratio:
            self.unpacking_problem(
                "archive-compression-ratio",
                f"the compressed stream unpacks to {unpacked:,} bytes from {self.packed_size:,} "
                f"(more than {self.limits.max_compression_ratio}x): a compression bomb",
            )
            raise _Stop

    def entry_ratio_problem(self, norm: str, unpacked: int, packed: int) -> Problem | None:
        """The refusal of one zip entry whose own ratio is too high (judged above 64 KiB)."""
        limit = self.limits.max_compression_ratio
        if unpacked > _ENTRY_RATIO_FLOOR and unpacked > max(packed, 1) * limit:
            return Problem(
                norm,
                "archive-compression-ratio",
                f"unpacks to {unpacked:,} bytes from {packed:,} (more than {limit}x) in "
                f"{self.filename}: a compression bomb",
            )
        return None

    def entry_name(self, raw: str, *, is_dir: bool) -> str | None:
        """Validate an entry name; return its normalised form, or None if refused/skippable."""
        name = raw
        while name.startswith("./"):
            name = name[2:]
        if is_dir:
            name = name.rstrip("/")
        if name in ("", "."):
            return None
        norm, problems = check_path(name)
        if problems:
            self.problems.extend(problems)
            return None
        if is_dir:
            self.dirs.add(norm)  # repeated directory entries are harmless; only files count
        else:
            self.names.append(norm)
        return norm

    def name_problems(self) -> list[Problem]:
        """Duplicate files, and names used both as a file and as a directory."""
        problems = duplicate_problems(self.names)
        problems += [
            Problem(name, "path-conflict", "is both a file and a directory entry")
            for name in sorted(set(self.names) & self.dirs)
        ]
        return problems

    def wants(self, norm: str, declared: int) -> bool:
        """Whether an entry's data should be unpacked (records why not when it should not)."""
        kind = classify(norm)
        if kind == "denied":
            self.skipped.append((norm, kind))
            return False
        if declared > self.limits.max_file_bytes:
            self.oversize[norm] = declared  # refused per skill later, never unpacked
            return False
        return True

    def read_stream(
        self, norm: str, declared: int, handle: IO[bytes] | None, *, packed: int | None = None
    ) -> None:
        """Unpack one entry in chunks, enforcing its declared size and the archive caps, and
        its own compression ratio when its packed size is known (zip)."""
        if handle is None:
            self.problems.append(Problem(norm, "archive-corrupt", "entry data cannot be read"))
            raise _Stop
        chunks = []
        got = 0
        self.current = norm
        with handle:
            while True:
                chunk = handle.read(_CHUNK)
                if not chunk:
                    break
                got += len(chunk)
                self.add_unpacked(len(chunk))
                if got > declared:
                    self.problems.append(
                        Problem(
                            norm, "archive-size-mismatch", "entry holds more data than declared"
                        )
                    )
                    raise _Stop
                if packed is not None:
                    problem = self.entry_ratio_problem(norm, got, packed)
                    if problem is not None:
                        self.problems.append(problem)
                        raise _Stop
                chunks.append(chunk)
        self.files[norm] = b"".join(chunks)


# -- zip ----------------------------------------------------------------------------------------

_EOCD = b"PK\x05\x06"
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_EOCD = b"PK\x06\x06"


def _zip_declared_entries(data: bytes) -> int | None:
    """Entry count from the end-of-central-directory record (ZIP64 aware); None if absent."""
    tail_start = max(0, len(data) - 65_557)  # EOCD (22 bytes) + the longest comment
    pos = data.rfind(_EOCD, tail_start)
    if pos < 0 or pos + 22 > len(data):
        return None
    (total,) = struct.unpack("<H", data[pos + 10 : pos + 12])
    if total != 0xFFFF:
        return int(total)
    locator = pos - 20  # the ZIP64 locator sits right before the classic record
    if locator < 0 or data[locator : locator + 4] != _ZIP64_LOCATOR:
        return None
    (record,) = struct.unpack("<Q", data[locator + 8 : locator + 16])
    if data[record : record + 4] != _ZIP64_EOCD or record + 40 > len(data):
        return None
    (total64,) = struct.unpack("<Q", data[record + 32 : record + 40])
    return int(total64)


def _collect_zip(data: bytes, c: _Collected) -> None:
    declared = _zip_declared_entries(data)
    if declared is not None and declared > c.limits.max_archive_entries:
        c.archive_problem(
            "archive-too-many-entries",
            f"{declared:,} entries; the limit is {c.limits.max_archive_entries:,}",
        )
        raise _Stop
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError) as exc:
        c.archive_problem("archive-corrupt", f"not a readable zip file ({exc})")
        raise _Stop from None
    with archive:
        infos = archive.infolist()
        if len(infos) > c.limits.max_archive_entries:
            c.archive_problem(
                "archive-too-many-entries",
                f"{len(infos):,} entries; the limit is {c.limits.max_archive_entries:,}",
            )
            raise _Stop
        wanted: list[tuple[str, zipfile.ZipInfo]] = []
        for info in infos:
            c.count_entry()
            mode = info.external_attr >> 16 if info.create_system == 3 else 0
            is_dir = info.is_dir() or stat.S_ISDIR(mode)
            # orig_filename is the name as stored; `filename` is cut at a NUL (see docstring).
            norm = c.entry_name(info.orig_filename, is_dir=is_dir)
            if norm is None:
                continue
            if stat.S_ISLNK(mode):
                c.problems.append(Problem(norm, "symlink", "symbolic link entry"))
                continue
            if mode and stat.S_IFMT(mode) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                c.problems.append(Problem(norm, "special-file", "device, FIFO or socket entry"))
                continue
            if is_dir:
                continue
            if info.flag_bits & 0x1:
                c.problems.append(
                    Problem(norm, "archive-encrypted", "password-protected entries are refused")
                )
                continue
            wanted.append((norm, info))
        if c.problems:
            return
        # Declared sizes first (cheap, before unpacking anything); entries that will never be
        # unpacked (denylisted) do not count. The same caps are enforced again on real bytes.
        declared_total = sum(info.file_size for norm, info in wanted if classify(norm) != "denied")
        if declared_total > c.limits.max_total_bytes:
            c.archive_problem(
                "archive-too-large",
                f"declares {declared_total:,} unpacked bytes; the limit is "
                f"{c.limits.max_total_bytes:,}",
            )
        for norm, info in wanted:
            if classify(norm) != "denied":
                problem = c.entry_ratio_problem(norm, info.file_size, info.compress_size)
                if problem is not None:
                    c.problems.append(problem)
        if c.problems:
            raise _Stop
        for norm, info in wanted:
            try:
                if c.wants(norm, info.file_size):
                    c.read_stream(
                        norm, info.file_size, archive.open(info), packed=info.compress_size
                    )
            except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, OSError) as exc:
                c.problems.append(Problem(norm, "archive-corrupt", f"cannot be unpacked ({exc})"))
                raise _Stop from None


# -- tar ----------------------------------------------------------------------------------------


class _CappedStream(io.RawIOBase):
    """A read-only stream that stops (via the collector) once too much has been decompressed."""

    def __init__(self, inner: IO[bytes], c: _Collected) -> None:
        self._inner = inner
        self._c = c
        self._cap = c.limits.max_total_bytes + (c.limits.max_archive_entries + 2) * (
            _TAR_OVERHEAD_PER_ENTRY
        )
        self.produced = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self._inner.read(min(len(buffer), _CHUNK))
        n = len(data)
        buffer[:n] = data
        self.produced += n
        if self.produced > self._cap:
            self._c.unpacking_problem(
                "archive-too-large",
                f"the compressed stream unpacks to more than {self._cap:,} bytes",
            )
            raise _Stop
        self._c.check_stream_ratio(self.produced)
        return n


def _tar_members(archive: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    while True:
        member = archive.next()
        if member is None:
            return
        yield member


def _collect_tar(data: bytes, c: _Collected, compression: str | None) -> None:
    raw: IO[bytes]
    if compression == "gz":
        raw = gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb")  # type: ignore[assignment]
    elif compression == "bz2":
        raw = bz2.BZ2File(io.BytesIO(data))
    elif compression == "xz":
        raw = lzma.LZMAFile(io.BytesIO(data))
    else:
        raw = io.BytesIO(data)
    stream = io.BufferedReader(_CappedStream(raw, c), buffer_size=_CHUNK)
    try:
        with tarfile.open(fileobj=stream, mode="r|") as archive:
            for member in _tar_members(archive):
                c.count_entry()
                norm = c.entry_name(member.name, is_dir=member.isdir())
                # The data after a header is this entry's, unpacked or skipped (the skip reads
                # it through the stream cap too), until the next header.
                c.current = norm if member.isreg() else None
                if norm is None:
                    continue
                if member.issym():
                    c.problems.append(
                        Problem(norm, "symlink", f"symbolic link entry (to {member.linkname!r})")
                    )
                elif member.islnk():
                    c.problems.append(
                        Problem(norm, "hardlink", f"hard link entry (to {member.linkname!r})")
                    )
                elif member.isdir():
                    continue
                elif member.issparse():
                    c.problems.append(Problem(norm, "special-file", "sparse file entry"))
                elif not member.isreg():
                    c.problems.append(Problem(norm, "special-file", "device or FIFO entry"))
                elif not c.problems:
                    # Once the archive is refused, keep walking headers (to report every bad
                    # entry) but stop unpacking data.
                    if c.wants(norm, member.size):
                        c.read_stream(norm, member.size, archive.extractfile(member))
    except _Stop:
        raise
    except (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError, ValueError) as exc:
        c.archive_problem("archive-corrupt", f"not a readable tar archive ({exc})")
        raise _Stop from None


# -- entry point --------------------------------------------------------------------------------


def _archive_format(filename: str, data: bytes) -> tuple[str, str | None] | None:
    lower = filename.lower()
    if lower.endswith(".zip"):
        return "zip", None
    if lower.endswith((".tar.gz", ".tgz")):
        return "tar", "gz"
    if lower.endswith((".tar.bz2", ".tbz2", ".tbz")):
        return "tar", "bz2"
    if lower.endswith((".tar.xz", ".txz")):
        return "tar", "xz"
    if lower.endswith(".tar"):
        return "tar", None
    if data.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip", None
    if data.startswith(b"\x1f\x8b"):
        return "tar", "gz"
    if len(data) > 262 and data[257:262] == b"ustar":
        return "tar", None
    return None


def _skill_roots(paths: list[str]) -> list[str]:
    """Directories holding a SKILL.md (any letter case) that are not inside another one."""
    candidates = sorted({p.rpartition("/")[0] for p in paths if is_skill_md(p.rpartition("/")[2])})
    if "" in candidates:
        return [""]
    roots: list[str] = []
    for candidate in candidates:
        if not any(candidate.startswith(root + "/") for root in roots):
            roots.append(candidate)
    return roots


def bundles_from_archive(
    data: bytes,
    *,
    filename: str,
    limits: BundleLimits = BundleLimits(),
) -> tuple[list[Bundle], list[tuple[str, BundleError]]]:
    """The valid skills of :func:`locate_archive_skills`, and the errors."""
    located, errors = locate_archive_skills(data, filename=filename, limits=limits)
    return [bundle for _, bundle in located], errors


def locate_archive_skills(
    data: bytes,
    *,
    filename: str,
    limits: BundleLimits = BundleLimits(),
) -> tuple[list[tuple[str, Bundle]], list[tuple[str, BundleError]]]:
    """Read every skill in an archive; see the module docstring for the rules.

    Returns ``([(skill directory in the archive, bundle), ...], [(directory, error), ...])``;
    the directory of a skill at the top of the archive is ``"."``. Raises :class:`BundleError` when the
    archive as a whole is refused, or holds no SKILL.md at all.
    """
    collected = _Collected(filename=filename, limits=limits, packed_size=len(data))
    fmt = _archive_format(filename, data)
    if fmt is None:
        raise BundleError(
            [
                Problem(
                    filename,
                    "archive-format",
                    "unknown archive format; use .zip, .tar.gz, .tgz or .tar",
                )
            ]
        )
    try:
        if fmt[0] == "zip":
            _collect_zip(data, collected)
        else:
            _collect_tar(data, collected, fmt[1])
    except _Stop:
        pass
    collected.problems.extend(collected.name_problems())
    if collected.problems:
        raise BundleError(_dedupe(collected.problems))

    every_path = sorted([*collected.files, *collected.oversize])
    roots = _skill_roots(every_path)
    if not roots:
        raise BundleError([Problem(filename, "skill-md-missing", "the archive holds no SKILL.md")])
    bundles: list[tuple[str, Bundle]] = []
    errors: list[tuple[str, BundleError]] = []
    for root in roots:
        prefix = root + "/" if root else ""
        content: dict[str, bytes] = {}
        sizes: dict[str, int] = {}
        skipped: list[tuple[str, PathKind]] = []
        policy_raw: bytes | None = None
        for path in every_path:
            if not path.startswith(prefix):
                continue
            rel = path[len(prefix) :]
            kind = classify(rel)
            if kind == "content":
                if path in collected.files:
                    content[rel] = collected.files[path]
                    sizes[rel] = len(content[rel])
                else:
                    sizes[rel] = collected.oversize[path]
            elif kind == "policy":
                policy_raw = collected.files.get(path, b"")
            else:
                skipped.append((rel, kind))
        skipped.extend(
            (path[len(prefix) :], kind)
            for path, kind in collected.skipped
            if path.startswith(prefix)
        )
        try:
            bundles.append(
                (
                    root or ".",
                    assemble(
                        content=content,
                        sizes=sizes,
                        policy_raw=policy_raw,
                        dir_name=root.rsplit("/", 1)[-1] if root else None,
                        limits=limits,
                        findings=skipped_findings(skipped),
                    ),
                )
            )
        except BundleError as exc:
            errors.append((root or ".", exc))
    return bundles, errors


def _dedupe(problems: list[Problem]) -> list[Problem]:
    seen: set[Problem] = set()
    out = []
    for problem in problems:
        if problem not in seen:
            seen.add(problem)
            out.append(problem)
    return out
