"""File, fetch and shell operations run inside the sandbox (standard library only).

Invoked as ``/usr/bin/python3 -I -B /opt/motor-cortex/tools.py OP`` with one JSON object on stdin.
A resident supervisor answers exactly that request for the file operations (``FILE_OPS``) without
a new interpreter: its file server, a forked child of itself under the same limits and seccomp
filter as any command, calls ``respond`` (see supervisor.py). The answer is the same either way.

``read``, ``write``, ``edit``, ``list``, ``glob``, ``grep`` and ``fetch`` print one JSON object::

    {"ok": bool, "output": str, "error_code": str | null, "truncated": bool,
     "retryable": bool, "status": int | null}

and exit 0. ``bash`` runs ``{"command": str, "allowlist": [str, ...]}`` with PATH reduced to a
fresh directory of symlinks to the allowlisted programs only; its stdout, stderr and exit status
are the command's own.

Confinement of the file operations: every path is taken relative to the workspace (absolute paths
must lie under it; ``..`` is refused) and opened one component at a time with
``os.open(..., O_NOFOLLOW, dir_fd=parent)``. A symbolic link anywhere on the way is refused, never
followed, and every step is relative to a directory already opened, so renaming or swapping a
component for a symlink between a check and the use cannot lead outside the workspace. Writes go
to a temporary file in the opened parent directory and are renamed over the target, which
replaces a directory entry and never follows one.
"""

from __future__ import annotations

import errno
import os
import sys

# Only what `read`, `write`, `edit` and `list` need is imported here: a resident supervisor
# imports this module on a session's first file call, and its file server answers with the
# supervisor's own JSON codec (see `respond`). The modules of `fetch` (tool_fetch; http.client,
# ssl: about 15 ms of CPU) and of `bash` (tool_bash) are imported where those run, in an
# interpreter of their own; `glob` and `grep` (tool_search) and `re` (with enum, functools,
# collections: about 3 ms) where they are first called.
TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from collections.abc import Callable
    from typing import Any

if not __package__ and sys.path[:1] != [os.path.dirname(os.path.abspath(__file__))]:
    # run as a script (``python3 -I -B tools.py OP``): isolated mode leaves this directory off
    # sys.path. It goes first (see supervisor.py).
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

if TYPE_CHECKING or __package__:
    from .siblings import _load_sibling
    from .tool_files import op_edit, op_list, op_read, op_write
    from .tool_paths import ToolError, _result
    from .tool_paths import use_workspace as use_workspace
else:  # inside the sandbox, where this directory is on sys.path (see above)
    from siblings import _load_sibling
    from tool_files import op_edit, op_list, op_read, op_write
    from tool_paths import ToolError, _result
    from tool_paths import use_workspace as use_workspace


def op_glob(request: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = _load_sibling("tool_search").op_glob(request)
    return result


def op_grep(request: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = _load_sibling("tool_search").op_grep(request)
    return result


def op_fetch(request: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = _load_sibling("tool_fetch").op_fetch(request)
    return result


def op_bash(request: dict[str, Any]) -> int:
    status: int = _load_sibling("tool_bash").op_bash(request)
    return status


OPS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "read": op_read,
    "write": op_write,
    "edit": op_edit,
    "list": op_list,
    "glob": op_glob,
    "grep": op_grep,
    "fetch": op_fetch,
}


#: the operations a resident supervisor may serve in a forked child of itself instead of a fresh
#: interpreter (see supervisor.py): they read only their request and the workspace
FILE_OPS = frozenset({"read", "write", "edit", "list", "glob", "grep"})
#: the file operations that never write anything (they open files read-only and list directories)
READ_ONLY_OPS = frozenset({"read", "list", "glob", "grep"})


def respond(
    op: str,
    raw: bytes,
    *,
    loads: Callable[[bytes], Any] | None = None,
    dumps: Callable[[object], str] | None = None,
) -> str:
    """The JSON answer (one object) to request `raw` of operation `op` (any but ``bash``).

    `loads` and `dumps` stand in for json.loads and json.dumps (a supervisor's file server
    passes its own, which use json's C half without importing json)."""
    if loads is None or dumps is None:
        import json

        loads, dumps = json.loads, json.dumps
    try:
        request = loads(raw or b"{}")
        if not isinstance(request, dict):
            raise ValueError("the request must be a JSON object")
    except ValueError as exc:
        return dumps(_result(f"malformed request: {exc}", ok=False, error_code="invalid_args"))
    try:
        handler = OPS.get(op)
        if handler is None:
            raise ToolError("invalid_args", f"unknown operation {op!r}")
        result = handler(request)
    except (ToolError, OSError) as exc:
        result = _error_result(exc)
    return dumps(result)


def _error_result(exc: ToolError | OSError) -> dict[str, Any]:
    if isinstance(exc, ToolError):
        return _result(exc.message, ok=False, error_code=exc.code, retryable=exc.retryable)
    code = "too_large" if exc.errno in (errno.EFBIG, errno.ENOSPC, errno.EDQUOT) else "denied"
    return _result(f"{exc.strerror or exc}", ok=False, error_code=code)


def main(argv: list[str]) -> int:
    import json

    op = argv[0] if argv else ""
    raw = sys.stdin.buffer.read()
    if op == "bash":
        try:
            request = json.loads(raw or b"{}")
            if not isinstance(request, dict):
                raise ValueError("the request must be a JSON object")
        except ValueError as exc:
            print(
                json.dumps(
                    _result(f"malformed request: {exc}", ok=False, error_code="invalid_args")
                )
            )
            return 0
        try:
            return op_bash(request)
        except (ToolError, OSError) as exc:
            sys.stdout.write(json.dumps(_error_result(exc)))
            sys.stdout.flush()
            return 0
    sys.stdout.write(respond(op, raw))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
