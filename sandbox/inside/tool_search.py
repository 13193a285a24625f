"""The search tools of tools.py: glob and grep."""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    import re
    from collections.abc import Iterator
    from typing import Any

if TYPE_CHECKING or __package__:
    from .tool_paths import (
        _O_FILE,
        ToolError,
        _display,
        _result,
        _str_arg,
        open_dir,
        open_file,
        split_path,
    )
else:  # inside the sandbox, where this directory is first on sys.path (see tools.py)
    from tool_paths import (
        _O_FILE,
        ToolError,
        _display,
        _result,
        _str_arg,
        open_dir,
        open_file,
        split_path,
    )


GLOB_MAX_RESULTS = 1000
GREP_MAX_MATCHES = 200
GREP_MAX_FILE_BYTES = 4 * 1024 * 1024
GREP_LINE_CHARS = 300
WALK_MAX_ENTRIES = 100_000


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Translate a glob with ``**`` (any number of directories) into an anchored regex."""
    import re

    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            close = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] in ("!", "]") else i + 1)
            if close < 0:
                out.append(re.escape("["))
                i += 1
                continue
            body = pattern[i + 1 : close]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = close + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)


def _walk(dir_fd: int) -> Iterator[tuple[str, list[str], list[str], int]]:
    """os.fwalk from an open directory, never following links, capped at WALK_MAX_ENTRIES."""
    seen = 0
    for dirpath, dirnames, filenames, dfd in os.fwalk(".", dir_fd=dir_fd, follow_symlinks=False):
        dirnames.sort()
        seen += len(dirnames) + len(filenames)
        if seen > WALK_MAX_ENTRIES:
            raise ToolError("too_large", f"more than {WALK_MAX_ENTRIES} entries to search")
        rel = "" if dirpath == "." else dirpath[2:] + "/"
        yield rel, dirnames, sorted(filenames), dfd


def op_glob(request: dict[str, Any]) -> dict[str, Any]:
    pattern = _str_arg(request, "pattern")
    if not pattern or "\x00" in pattern:
        raise ToolError("invalid_args", "pattern must be a non-empty glob")
    if pattern.startswith("/") or ".." in pattern.split("/"):
        raise ToolError("denied", f"{pattern}: glob patterns are relative to the search path")
    pattern = pattern.removeprefix("./")
    regex = glob_regex(pattern)
    parts = split_path(request.get("path") or ".")
    prefix = "/".join(parts) + "/" if parts else ""
    dir_fd = open_dir(parts)
    found: list[str] = []
    truncated = False
    try:
        for rel, dirnames, filenames, _dfd in _walk(dir_fd):
            for name in filenames + [d + "/" for d in dirnames]:
                candidate = rel + name.rstrip("/")
                if regex.match(candidate):
                    if len(found) >= GLOB_MAX_RESULTS:
                        truncated = True
                        break
                    found.append(prefix + candidate + ("/" if name.endswith("/") else ""))
            if truncated:
                break
    finally:
        os.close(dir_fd)
    if not found:
        return _result(f"no paths match {pattern}")
    text = "\n".join(sorted(found))
    if truncated:
        text += f"\n[stopped at {GLOB_MAX_RESULTS} results]"
    return _result(text, truncated=truncated)


def _grep_file(fd: int, shown: str, regex: re.Pattern[str], hits: list[str], limit: int) -> bool:
    """Append matches of one file to `hits`; True when the limit was reached."""
    with os.fdopen(fd, "rb") as handle:
        if os.fstat(handle.fileno()).st_size > GREP_MAX_FILE_BYTES:
            return False
        data = handle.read()
    if b"\x00" in data[:8192]:
        return False
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        if regex.search(line):
            if len(hits) >= limit:
                return True
            text = line if len(line) <= GREP_LINE_CHARS else line[:GREP_LINE_CHARS] + "..."
            hits.append(f"{shown}:{number}: {text}")
    return False


def op_grep(request: dict[str, Any]) -> dict[str, Any]:
    import fnmatch
    import re

    pattern = _str_arg(request, "pattern")
    name_glob = _str_arg(request, "glob", required=False)
    flags = re.IGNORECASE if request.get("ignore_case") is True else 0
    try:
        regex = re.compile(pattern, flags)
    except re.error as exc:
        raise ToolError("invalid_args", f"invalid regular expression: {exc}") from None
    parts = split_path(request.get("path") or ".")
    hits: list[str] = []
    full = False
    parent_fd = open_dir(parts[:-1]) if parts else None
    try:
        is_file = False
        if parent_fd is not None:
            st = os.stat(parts[-1], dir_fd=parent_fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                raise ToolError(
                    "denied",
                    f"{_display(parts)}: is a symbolic link; file tools never follow links",
                )
            is_file = stat.S_ISREG(st.st_mode)
        if is_file and parent_fd is not None:
            fd = open_file(parent_fd, parts[-1], _display(parts))
            full = _grep_file(fd, _display(parts), regex, hits, GREP_MAX_MATCHES)
        else:
            dir_fd = open_dir(parts)
            prefix = "/".join(parts) + "/" if parts else ""
            try:
                for rel, _dirs, filenames, dfd in _walk(dir_fd):
                    for name in filenames:
                        if name_glob and not fnmatch.fnmatchcase(name, name_glob):
                            continue
                        try:
                            fd = os.open(name, _O_FILE, dir_fd=dfd)
                        except OSError:
                            continue  # links and unreadable entries are skipped
                        if not stat.S_ISREG(os.fstat(fd).st_mode):
                            os.close(fd)
                            continue
                        os.set_blocking(fd, True)
                        if _grep_file(fd, prefix + rel + name, regex, hits, GREP_MAX_MATCHES):
                            full = True
                            break
                    if full:
                        break
            finally:
                os.close(dir_fd)
    except FileNotFoundError:
        raise ToolError("not_found", f"{_display(parts)}: no such file or directory") from None
    finally:
        if parent_fd is not None:
            os.close(parent_fd)
    if not hits:
        return _result(f"no matches for {pattern!r}")
    text = "\n".join(hits)
    if full:
        text += f"\n[stopped at {GREP_MAX_MATCHES} matches]"
    return _result(text, truncated=full)
