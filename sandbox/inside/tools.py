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
import stat
import sys

# Only what `read`, `write`, `edit` and `list` need is imported here: a resident supervisor
# imports this module on a session's first file call, and its file server answers with the
# supervisor's own JSON codec (see `respond`). The modules of `fetch` (http.client, ssl: about
# 15 ms of CPU) and of `bash` are imported where those run, in an interpreter of their own, and
# `re` (with enum, functools, collections: about 3 ms) where a pattern is compiled.
TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    import http.client
    import re
    from collections.abc import Callable, Iterator
    from typing import Any

WORKSPACE = os.environ.get("MOTOR_WORKSPACE", "/workspace")

READ_MAX_BYTES = 256 * 1024
WRITE_MAX_BYTES = 1024 * 1024
EDIT_MAX_BYTES = 1024 * 1024
LIST_MAX_ENTRIES = 1000
GLOB_MAX_RESULTS = 1000
GREP_MAX_MATCHES = 200
GREP_MAX_FILE_BYTES = 4 * 1024 * 1024
GREP_LINE_CHARS = 300
WALK_MAX_ENTRIES = 100_000
FETCH_BODY_BYTES = 64 * 1024
FETCH_MAX_REDIRECTS = 5
FETCH_HOP_TIMEOUT_S = 20.0
BIN_DIRS = ("/usr/local/bin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/sbin", "/sbin")
#: variables that make bash or the dynamic loader run something before the command (compiled
#: where bash runs: compiling a pattern costs milliseconds of a file call's start)
_UNSAFE_ENV = r"^(BASH_ENV|ENV|SHELLOPTS|BASHOPTS|PS4|CDPATH|GLOBIGNORE|LD_.*|BASH_FUNC_.*)$"

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


# --------------------------------------------------------------------------- paths


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


# --------------------------------------------------------------------------- file ops


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


# --------------------------------------------------------------------------- fetch


class _Response:
    def __init__(
        self, status: int, reason: str, headers: list[tuple[str, str]], body: bytes, cut: bool
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body
        self.truncated = cut

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None


def _proxy_for(scheme: str) -> tuple[str, int] | None:
    import urllib.parse

    for key in (f"{scheme}_proxy", f"{scheme.upper()}_PROXY", "all_proxy", "ALL_PROXY"):
        value = os.environ.get(key)
        if value:
            parsed = urllib.parse.urlsplit(value if "://" in value else "http://" + value)
            if parsed.hostname:
                return parsed.hostname, parsed.port or 3128
    return None


def _read_body(resp: http.client.HTTPResponse, method: str, max_bytes: int) -> tuple[bytes, bool]:
    if method == "HEAD":
        return b"", False
    body = resp.read(max_bytes + 1)
    return body[:max_bytes], len(body) > max_bytes


def _one_request(
    method: str, url: str, headers: dict[str, str], body: bytes | None, max_bytes: int
) -> _Response:
    import http.client
    import socket
    import ssl
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    try:
        host = host if host.isascii() else host.encode("idna").decode("ascii")
    except UnicodeError:
        raise ToolError("invalid_args", f"{url}: invalid host name") from None
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        raise ToolError("invalid_args", f"{url}: invalid port") from None
    proxy = _proxy_for(scheme)
    if proxy is None:
        raise ToolError(
            "network_blocked",
            "this run has no network access; use ask_user to request a domain",
        )
    authority = host if ":" not in host else f"[{host}]"
    if port != (443 if scheme == "https" else 80):
        authority += f":{port}"
    conn: http.client.HTTPConnection
    if scheme == "http":
        conn = http.client.HTTPConnection(proxy[0], proxy[1], timeout=FETCH_HOP_TIMEOUT_S)
        target = urllib.parse.urlunsplit((scheme, authority, parts.path or "/", parts.query, ""))
        conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
    else:
        sock = socket.create_connection(proxy, timeout=FETCH_HOP_TIMEOUT_S)
        connect_to = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        sock.sendall(f"CONNECT {connect_to} HTTP/1.1\r\nHost: {connect_to}\r\n\r\n".encode())
        answer = http.client.HTTPResponse(sock, method="CONNECT")
        answer.begin()
        if answer.status != 200:
            data, cut = _read_body(answer, "GET", 4096)
            sock.close()
            return _Response(answer.status, answer.reason, answer.getheaders(), data, cut)
        context = ssl.create_default_context()
        wrapped = context.wrap_socket(sock, server_hostname=host)
        conn = http.client.HTTPSConnection(host, port, timeout=FETCH_HOP_TIMEOUT_S)
        conn.sock = wrapped
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    conn.putheader("Host", authority)
    conn.putheader("Accept-Encoding", "identity")
    conn.putheader("Connection", "close")
    for key, value in headers.items():
        if key.lower() not in ("host", "accept-encoding", "connection", "content-length"):
            conn.putheader(key, value)
    if body is not None:
        conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body)
    resp = conn.getresponse()
    data, cut = _read_body(resp, method, max_bytes)
    conn.close()
    return _Response(resp.status, resp.reason, resp.getheaders(), data, cut)


_SHOWN_HEADERS = ("content-type", "content-length", "location", "retry-after", "www-authenticate")
_CREDENTIAL_HEADERS = ("authorization", "cookie", "proxy-authorization")


def _origin(url: str) -> tuple[str, str, int | None]:
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port


def op_fetch(request: dict[str, Any]) -> dict[str, Any]:
    import http.client
    import ssl
    import urllib.parse

    url = _str_arg(request, "url")
    method = (_str_arg(request, "method", required=False) or "GET").upper()
    if method not in ("GET", "POST", "HEAD"):
        raise ToolError("invalid_args", f"method {method!r}: only GET, POST and HEAD are supported")
    headers_raw = request.get("headers") or {}
    if not isinstance(headers_raw, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers_raw.items()
    ):
        raise ToolError("invalid_args", "headers must be an object of strings")
    headers: dict[str, str] = dict(headers_raw)
    for key, value in headers.items():
        if any(c in key + value for c in "\r\n\x00"):
            raise ToolError("invalid_args", f"header {key!r} contains CR, LF or NUL")
    body_text = request.get("body")
    body = body_text.encode("utf-8") if isinstance(body_text, str) else None
    max_bytes = _int_arg(request, "max_bytes", FETCH_BODY_BYTES) or FETCH_BODY_BYTES
    hops: list[str] = []
    for _hop in range(FETCH_MAX_REDIRECTS + 1):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme.lower() not in ("http", "https") or not parsed.hostname:
            raise ToolError("invalid_args", f"{url}: only absolute http:// and https:// URLs")
        if any(c in url for c in " \r\n\x00"):
            raise ToolError("invalid_args", f"{url!r}: URL contains whitespace or control bytes")
        try:
            resp = _one_request(method, url, headers, body if method == "POST" else None, max_bytes)
        except ToolError:
            raise
        except ssl.SSLError as exc:
            raise ToolError("http_error", f"{url}: TLS failure: {exc.reason or exc}") from None
        except TimeoutError:
            raise ToolError(
                "timeout", f"{url}: no answer within {FETCH_HOP_TIMEOUT_S:.0f} s", retryable=True
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            raise ToolError("http_error", f"{url}: {exc}", retryable=True) from None
        verdict = resp.header("X-Motor-Egress")
        if verdict is not None:
            message = resp.body.decode("utf-8", errors="replace").strip()
            if verdict.startswith("denied"):
                prefix = f"redirect {len(hops)} refused: " if hops else ""
                return _result(
                    prefix + (message or f"{parsed.hostname} is not allowed ({verdict})"),
                    ok=False,
                    error_code="network_blocked",
                    retryable="tunnel_limit" in verdict,
                    status=resp.status,
                )
            return _result(
                f"{url}: the egress proxy could not reach the destination ({verdict}): {message}",
                ok=False,
                error_code="http_error",
                retryable=True,
                status=resp.status,
            )
        location = resp.header("Location")
        if resp.status in (301, 302, 303, 307, 308) and location:
            hops.append(f"{resp.status} -> {location}")
            if len(hops) > FETCH_MAX_REDIRECTS:
                break
            new_url = urllib.parse.urljoin(url, location)
            if _origin(new_url) != _origin(url):
                # never carry credentials to another origin
                headers = {k: v for k, v in headers.items() if k.lower() not in _CREDENTIAL_HEADERS}
            if resp.status == 303 or (resp.status in (301, 302) and method == "POST"):
                method = "GET"
                body = None
            url = new_url
            continue
        return _format_response(url, resp, hops)
    raise ToolError("http_error", f"more than {FETCH_MAX_REDIRECTS} redirects: " + "; ".join(hops))


def _format_response(url: str, resp: _Response, hops: list[str]) -> dict[str, Any]:
    import re

    lines = [f"HTTP {resp.status} {resp.reason}", f"url: {url}"]
    if hops:
        lines.append("redirects: " + "; ".join(hops))
    for key, value in resp.headers:
        if key.lower() in _SHOWN_HEADERS:
            lines.append(f"{key.lower()}: {value}")
    content_type = (resp.header("Content-Type") or "").lower()
    match = re.search(r"charset=([\w.-]+)", content_type)
    try:
        text = resp.body.decode(match.group(1) if match else "utf-8", errors="replace")
    except LookupError:
        text = resp.body.decode("utf-8", errors="replace")
    lines.append("")
    lines.append(text)
    if resp.truncated:
        lines.append(f"\n[body truncated at {len(resp.body)} bytes]")
    output = "\n".join(lines)
    if resp.status >= 400:
        retryable = resp.status == 429 or resp.status >= 500
        return _result(
            output,
            ok=False,
            error_code="http_error",
            retryable=retryable,
            truncated=resp.truncated,
            status=resp.status,
        )
    return _result(output, truncated=resp.truncated, status=resp.status)


# --------------------------------------------------------------------------- bash


def op_bash(request: dict[str, Any]) -> int:
    """Run the command under bash with PATH = a fresh directory of allowlisted symlinks."""
    import re
    import shutil
    import subprocess
    import tempfile

    command = _str_arg(request, "command")
    allowlist = request.get("allowlist")
    if not isinstance(allowlist, list) or not all(
        isinstance(n, str) and re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._+-]*", n) for n in allowlist
    ):
        raise ToolError("invalid_args", "allowlist must be a list of plain command names")
    try:
        bin_dir = tempfile.mkdtemp(prefix="motor-bin-")
    except OSError as exc:
        sys.stderr.write(f"cannot prepare the command directory in /tmp: {exc.strerror}\n")
        return 126
    try:
        for name in allowlist:
            for directory in BIN_DIRS:
                candidate = os.path.join(directory, name)
                if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                    os.symlink(candidate, os.path.join(bin_dir, name))
                    break
        unsafe = re.compile(_UNSAFE_ENV)
        env = {k: v for k, v in os.environ.items() if not unsafe.match(k)}
        env["PATH"] = bin_dir
        sys.stdout.flush()
        completed = subprocess.run(
            ["/bin/bash", "--noprofile", "--norc", "-c", command],
            env=env,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        code = completed.returncode
        return code if code >= 0 else 128 - code
    finally:
        shutil.rmtree(bin_dir, ignore_errors=True)


# --------------------------------------------------------------------------- main


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
