"""The file tools of tools.py: read, write, edit and list."""

from __future__ import annotations

import errno
import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any

if TYPE_CHECKING or __package__:
    from .tool_paths import (
        ToolError,
        _display,
        _int_arg,
        _result,
        _str_arg,
        open_dir,
        open_file,
        split_path,
    )
else:  # inside the sandbox, where this directory is first on sys.path (see tools.py)
    from tool_paths import (
        ToolError,
        _display,
        _int_arg,
        _result,
        _str_arg,
        open_dir,
        open_file,
        split_path,
    )


READ_MAX_BYTES = 256 * 1024
WRITE_MAX_BYTES = 1024 * 1024
EDIT_MAX_BYTES = 1024 * 1024
LIST_MAX_ENTRIES = 1000


def op_read(request: dict[str, Any]) -> dict[str, Any]:
    parts = split_path(_str_arg(request, "path"))
    if not parts:
        raise ToolError("invalid_args", ".: is a directory; use list")
    offset = _int_arg(request, "offset", 1) or 1
    limit = _int_arg(request, "limit", None)
    dir_fd = open_dir(parts[:-1])
    try:
        fd = open_file(dir_fd, parts[-1], _display(parts))
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "rb") as handle:
        head = handle.read(8192)
        if b"\x00" in head:
            size = os.fstat(handle.fileno()).st_size
            raise ToolError(
                "invalid_args", f"{_display(parts)}: binary file ({size} bytes); use code"
            )
        handle.seek(0)
        lines: list[bytes] = []
        used = 0
        truncated = False
        last = offset - 1
        for number, line in enumerate(handle, start=1):
            if number < offset:
                continue
            if limit is not None and len(lines) >= limit:
                truncated = True
                break
            if used + len(line) > READ_MAX_BYTES:
                truncated = True
                if not lines:  # one enormous line: show its beginning
                    lines.append(line[:READ_MAX_BYTES])
                    last = number
                break
            lines.append(line)
            used += len(line)
            last = number
    text = b"".join(lines).decode("utf-8", errors="replace")
    if truncated:
        text += f"\n[showing lines {offset}-{last}; more follow; continue with offset={last + 1}]"
    elif not lines and offset > 1:
        text = f"[the file has fewer than {offset} lines]"
    return _result(text, truncated=truncated)


def _atomic_write(dir_fd: int, name: str, data: bytes, shown: str) -> None:
    mode = 0o644
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise ToolError("denied", f"{shown}: is a symbolic link; file tools never follow links")
        if stat.S_ISDIR(st.st_mode):
            raise ToolError("invalid_args", f"{shown}: is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise ToolError("invalid_args", f"{shown}: not a regular file")
        mode = stat.S_IMODE(st.st_mode)
    tmp = f".{name[:200]}.{os.urandom(6).hex()}.tmp"  # what secrets.token_hex(6) does
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, mode, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)  # O_CREAT's mode is reduced by the umask
            handle.write(data)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def op_write(request: dict[str, Any]) -> dict[str, Any]:
    parts = split_path(_str_arg(request, "path"))
    content = _str_arg(request, "content")
    if not parts:
        raise ToolError("invalid_args", "path must name a file")
    data = content.encode("utf-8")
    if len(data) > WRITE_MAX_BYTES:
        raise ToolError(
            "too_large", f"content is {len(data)} bytes; the limit is {WRITE_MAX_BYTES} bytes"
        )
    dir_fd = open_dir(parts[:-1], create=True)
    try:
        _atomic_write(dir_fd, parts[-1], data, _display(parts))
    except OSError as exc:
        code = "too_large" if exc.errno in (errno.EFBIG, errno.ENOSPC, errno.EDQUOT) else "denied"
        raise ToolError(code, f"{_display(parts)}: {exc.strerror}") from None
    finally:
        os.close(dir_fd)
    return _result(f"wrote {len(data)} bytes to {_display(parts)}")


def op_edit(request: dict[str, Any]) -> dict[str, Any]:
    parts = split_path(_str_arg(request, "path"))
    old = _str_arg(request, "old_string")
    new = _str_arg(request, "new_string")
    if not parts:
        raise ToolError("invalid_args", "path must name a file")
    if not old:
        raise ToolError("invalid_args", "old_string must not be empty")
    if old == new:
        raise ToolError("invalid_args", "old_string and new_string are identical")
    shown = _display(parts)
    dir_fd = open_dir(parts[:-1])
    try:
        fd = open_file(dir_fd, parts[-1], shown)
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(EDIT_MAX_BYTES + 1)
        if len(data) > EDIT_MAX_BYTES:
            raise ToolError("too_large", f"{shown}: larger than {EDIT_MAX_BYTES} bytes")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError("invalid_args", f"{shown}: not UTF-8 text") from None
        count = text.count(old)
        if count == 0:
            raise ToolError("conflict", f"{shown}: old_string was not found; read the file again")
        if count > 1:
            raise ToolError(
                "conflict",
                f"{shown}: old_string occurs {count} times; include more surrounding text so "
                "it matches exactly once",
            )
        updated = text.replace(old, new, 1).encode("utf-8")
        if len(updated) > WRITE_MAX_BYTES:
            raise ToolError(
                "too_large", f"{shown}: the result would exceed {WRITE_MAX_BYTES} bytes"
            )
        _atomic_write(dir_fd, parts[-1], updated, shown)
    finally:
        os.close(dir_fd)
    line = text[: text.index(old)].count("\n") + 1
    return _result(f"edited {shown}: replaced 1 occurrence at line {line}")


def op_list(request: dict[str, Any]) -> dict[str, Any]:
    parts = split_path(request.get("path") or ".")
    dir_fd = open_dir(parts)
    rows: list[str] = []
    total = 0
    try:
        with os.scandir(dir_fd) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                total += 1
                if len(rows) >= LIST_MAX_ENTRIES:
                    continue
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    rows.append(f"link  {entry.name} -> {os.readlink(entry.name, dir_fd=dir_fd)}")
                elif stat.S_ISDIR(st.st_mode):
                    rows.append(f"dir   {entry.name}/")
                elif stat.S_ISREG(st.st_mode):
                    rows.append(f"file  {entry.name} ({st.st_size} bytes)")
                else:
                    rows.append(f"other {entry.name}")
    finally:
        os.close(dir_fd)
    truncated = total > len(rows)
    if truncated:
        rows.append(f"[{total - len(rows)} more entries not shown]")
    if not rows:
        return _result(f"{_display(parts)} is empty")
    return _result("\n".join(rows), truncated=truncated)
