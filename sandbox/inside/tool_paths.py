"""What every tool of tools.py shares: the workspace, paths opened one component at a time
without following a symbolic link, the request's arguments, and the shape of errors and results."""

from __future__ import annotations

import errno
import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any


WORKSPACE = os.environ.get("MOTOR_WORKSPACE", "/workspace")


def use_workspace(path: str) -> None:
    """Take every later request's paths relative to `path` (a supervisor's file server answers
    each request for the workspace that request's environment names)."""
    global WORKSPACE
    WORKSPACE = path


_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_O_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class ToolError(Exception):
    def __init__(self, code: str, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable


def _result(
    output: str,
    *,
    ok: bool = True,
    error_code: str | None = None,
    truncated: bool = False,
    retryable: bool = False,
    status: int | None = None,
) -> dict[str, Any]:
    return {
        "ok": ok,
        "output": output,
        "error_code": error_code,
        "truncated": truncated,
        "retryable": retryable,
        "status": status,
    }


def split_path(path: object) -> list[str]:
    """Workspace-relative components of `path`; raises ToolError for anything outside."""
    if path is None or path == "":
        return []
    if not isinstance(path, str):
        raise ToolError("invalid_args", "path must be a string")
    if "\x00" in path:
        raise ToolError("invalid_args", "path contains a NUL byte")
    if path.startswith("/"):
        root = WORKSPACE.rstrip("/")
        if path != root and not path.startswith(root + "/"):
            raise ToolError(
                "denied",
                f"{path}: absolute paths must lie inside /workspace; use a relative path",
            )
        path = path[len(root) :]
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ToolError("denied", f"{path}: '..' is not allowed in paths")
    return parts


def _display(parts: list[str]) -> str:
    return "/".join(parts) or "."


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _is_plain_non_dir(name: str, dir_fd: int) -> bool:
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except OSError:
        return False
    return not stat.S_ISLNK(mode) and not stat.S_ISDIR(mode)


def open_dir(parts: list[str], *, create: bool = False) -> int:
    """Open the workspace directory `parts` without following any symlink; returns an fd."""
    fd = os.open(WORKSPACE, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    for index, part in enumerate(parts):
        shown = _display(parts[: index + 1])
        try:
            try:
                nxt = os.open(part, _O_DIR, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise ToolError("not_found", f"{shown}: no such directory") from None
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                nxt = os.open(part, _O_DIR, dir_fd=fd)
        except OSError as exc:
            # O_NOFOLLOW|O_DIRECTORY on a symlink fails with ELOOP or ENOTDIR. The entry may
            # have been swapped back since, so only a plain non-directory counts as "not a
            # directory"; anything else was a link at the moment of the open.
            plain_file = exc.errno == errno.ENOTDIR and _is_plain_non_dir(part, fd)
            os.close(fd)
            if plain_file:
                raise ToolError("invalid_args", f"{shown}: not a directory") from None
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise ToolError(
                    "denied", f"{shown}: is a symbolic link; file tools never follow links"
                ) from None
            raise ToolError("denied", f"{shown}: {exc.strerror}") from None
        except ToolError:
            os.close(fd)
            raise
        os.close(fd)
        fd = nxt
    return fd


def open_file(dir_fd: int, name: str, shown: str) -> int:
    """Open a regular file in `dir_fd` for reading, refusing symlinks and special files."""
    try:
        fd = os.open(name, _O_FILE, dir_fd=dir_fd)
    except FileNotFoundError:
        raise ToolError("not_found", f"{shown}: no such file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP or _is_link(name, dir_fd):
            raise ToolError(
                "denied", f"{shown}: is a symbolic link; file tools never follow links"
            ) from None
        raise ToolError("denied", f"{shown}: {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    if stat.S_ISDIR(mode):
        os.close(fd)
        raise ToolError("invalid_args", f"{shown}: is a directory; use list")
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise ToolError("invalid_args", f"{shown}: not a regular file")
    os.set_blocking(fd, True)
    return fd


def _int_arg(request: dict[str, Any], key: str, default: int | None) -> int | None:
    value = request.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ToolError("invalid_args", f"{key} must be a positive integer")
    return value


def _str_arg(request: dict[str, Any], key: str, *, required: bool = True) -> str:
    value = request.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise ToolError("invalid_args", f"{key} must be a string")
    return value
