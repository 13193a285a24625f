"""The file server: a forked child of the supervisor that answers tools.py's file operations
without a new interpreter (see `Runner`)."""

from __future__ import annotations

import gc
import marshal
import os
import resource
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from types import ModuleType
    from typing import Any

    from .confine import _ChildSetup, _Spawner
    from .protocol import Config

if TYPE_CHECKING or __package__:
    from .confine import _INF, LimitTargets, _lower
    from .poller import _READ, _host_still_there, _Poller
    from .protocol import (
        _HEADER,
        _OOM_MARKERS,
        _READ_CHUNK,
        ExecSpec,
        _json_dumps_spaced,
        _read_exact,
        _result,
        json_loads,
    )
    from .siblings import _load_sibling
    from .sweep import SIGKILL
else:  # inside the sandbox, where this directory is first on sys.path (see supervisor.py)
    from confine import _INF, LimitTargets, _lower
    from poller import _READ, _host_still_there, _Poller
    from protocol import (
        _HEADER,
        _OOM_MARKERS,
        _READ_CHUNK,
        ExecSpec,
        _json_dumps_spaced,
        _read_exact,
        _result,
        json_loads,
    )
    from siblings import _load_sibling
    from sweep import SIGKILL


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _close_other_fds(keep: int = 2) -> None:
    """Close every descriptor above `keep` (in a forked child: the host's stream, the egress
    bridge's sockets, ... must not stay reachable)."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        os.closerange(keep + 1, 65536)
        return
    for fd in fds:
        if fd > keep:
            try:
                os.close(fd)
            except OSError:
                pass


#: calls one file server answers before it is replaced by a fresh fork (its heap stays small)
FILE_SERVER_MAX_CALLS = 1000
#: what a call reads of the answer at first: a small answer in one read, without the 1 MiB
#: buffer (an mmap, a mremap and a munmap) a read of _READ_CHUNK allocates
_FIRST_READ = 65536
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class _FileServer:
    """A forked child of the supervisor that answers file operations one after another (see
    `Runner`): requests and answers are frames (4-byte big-endian length + body) on its stdin
    and stdout; it exits at EOF."""

    def __init__(self, pid: int, requests: int, answers: int, errors: int) -> None:
        self.pid = pid
        self.requests = requests
        self.answers = answers
        self.errors = errors
        self.calls = 0
        self.returncode: int | None = None
        #: its stderr, read by `stop`
        self.stderr = b""
        #: the soft RLIMIT_CPU and RLIMIT_FSIZE last set on it (None: not set by a call yet)
        self.cpu_soft: int | None = None
        self.fsize: tuple[int, int] | None = None
        #: what a call waits on: its answers, and the host's stream while `watching_host`
        self.poller = _Poller()
        self.poller.register(answers, _READ, "answer")
        self.watching_host = False
        #: /proc/PID/stat, kept open: each call reads its CPU time with one pread (-1: closed)
        try:
            self._stat_fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._stat_fd = -1

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def cpu_seconds(self) -> float:
        """CPU time used so far (user + system)."""
        try:
            fields = os.pread(self._stat_fd, 1024, 0).rsplit(b")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
        except (OSError, IndexError, ValueError):
            return 0.0

    def stop(self) -> int:
        """Kill and reap it, close its pipes; returns its exit status (as Popen does)."""
        if self.poll() is None:
            try:
                os.kill(self.pid, SIGKILL)
            except OSError:
                pass
            while self.returncode is None:
                try:
                    pid, status = os.waitpid(self.pid, 0)
                except ChildProcessError:
                    self.returncode = -SIGKILL
                    break
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        self.stderr = self._read_errors()
        self.poller.close()
        for fd in (self.requests, self.answers, self.errors, self._stat_fd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.requests = self.answers = self.errors = self._stat_fd = -1
        return self.returncode if self.returncode is not None else -SIGKILL

    def _read_errors(self) -> bytes:
        """What it wrote to stderr (read once it is gone), at most about 64 KiB."""
        chunks: list[bytes] = []
        if self.errors >= 0:
            os.set_blocking(self.errors, False)
            try:
                while chunk := os.read(self.errors, 65536):
                    chunks.append(chunk)
                    if sum(len(c) for c in chunks) > 65536:
                        break
            except OSError:
                pass
        return b"".join(chunks)


def _file_server_main(setup: _ChildSetup, tools: ModuleType) -> int:
    """The body of a file server once forked, under its limits and the command filter: answer
    framed requests on stdin until EOF. Returns the exit status."""
    setup()
    stdin = os.fdopen(0, "rb", buffering=0)
    last_env: dict[str, str] | None = None
    while True:
        header = _read_exact(stdin, _HEADER.size)
        if header is None:
            return 0
        (size,) = _HEADER.unpack(header)
        body = _read_exact(stdin, size) if size else b""
        if body is None:
            return 1
        # written by the supervisor itself (`Runner._file_server_call`), over a pipe only it holds
        op, request, env, cwd = marshal.loads(body)  # noqa: S302
        try:
            os.chdir(cwd)
        except OSError as exc:
            _write_all(2, f"working directory {cwd}: {exc.strerror}".encode())
            return 126
        if env != last_env:  # a run's calls all have the same environment
            os.environ.clear()
            os.environ.update(env)
            tools.use_workspace(env.get("MOTOR_WORKSPACE", "/workspace"))
            last_env = env
        answer = tools.respond(op, request, loads=json_loads, dumps=_json_dumps_spaced).encode()
        _write_all(1, _HEADER.pack(len(answer)) + answer)


class FileServing:
    """The file-server half of `Runner`: serving tools.py's file operations (see `Runner`)."""

    config: Config
    _host_fd: int | None
    _child_setup: _ChildSetup
    _spawner: _Spawner | None
    _tools: ModuleType | None
    _file_server: _FileServer | None
    _tools_path: str
    _own: dict[int, tuple[int, int]]

    def _over_quota(self) -> bool:
        """Whether the workspace is over its quota (`Runner` measures it)."""
        raise NotImplementedError

    def _file_op(self, spec: ExecSpec) -> str | None:
        """The tools.py file operation `spec` asks for, when it may be served by a fork."""
        argv = spec.argv
        if (
            self._spawner is None
            or len(argv) != 5
            or argv[0] not in ("/usr/bin/python3", sys.executable)
            or argv[1:3] != ["-I", "-B"]
            or argv[3] != self._tools_path
        ):
            return None
        if self._tools is None:
            try:
                self._tools = _load_sibling("tools")
            except Exception:  # noqa: BLE001 - the interpreter then reports what is wrong
                return None
        ops: frozenset[str] = self._tools.FILE_OPS
        return argv[4] if argv[4] in ops else None

    def _start_file_server(self, targets: LimitTargets) -> _FileServer:
        """Fork a file server under `targets` (see the class docstring). Raises OSError when
        the fork or a pipe failed (nothing started)."""
        tools = self._tools
        assert tools is not None
        setup = self._child_setup
        setup.prepare(targets)
        # the hard limits the server keeps for its life: RLIMIT_FSIZE at the per-file cap and
        # RLIMIT_CPU open, so that each call's soft limits can be set from outside
        setup.targets = [
            (res, soft, self._server_hard(res, hard)) for res, soft, hard in setup.targets
        ]
        pipes: list[int] = []
        try:
            for _ in range(3):
                pipes.extend(os.pipe())
            pid = os.fork()
        except BaseException:
            for fd in pipes:
                os.close(fd)
            raise
        req_r, req_w, ans_r, ans_w, err_r, err_w = pipes
        if pid == 0:  # the child: never returns
            status = 1
            try:
                # the parent's other threads do not exist here, yet their objects do: keep the
                # collector from finalizing any of them (a socket's finalizer would close a
                # descriptor number this child reuses)
                gc.freeze()
                os.setsid()
                os.dup2(req_r, 0)
                os.dup2(ans_w, 1)
                os.dup2(err_w, 2)
                _close_other_fds()
                status = _file_server_main(setup, tools)
            except BaseException:  # noqa: BLE001 - reported on stderr like an interpreter would
                try:
                    import traceback

                    _write_all(2, traceback.format_exc().encode(errors="replace"))
                except BaseException:  # noqa: BLE001, S110 - nothing left to report it to
                    pass
            finally:
                os._exit(status)
        for fd in (req_r, ans_w, err_w):
            os.close(fd)
        return _FileServer(pid, req_w, ans_r, err_r)

    def _server_hard(self, res: int, hard: int) -> int:
        """The hard limit the file server keeps for `res` (never above this process's own)."""
        own_hard = self._own[res][1]
        if res == resource.RLIMIT_FSIZE:
            return _lower(self.config.file_size_bytes or _INF, own_hard)
        if res == resource.RLIMIT_CPU:
            return own_hard
        return _lower(hard, own_hard)

    def stop_file_server(self) -> None:
        server, self._file_server = self._file_server, None
        if server is not None:
            server.stop()

    def _file_server_call(
        self, spec: ExecSpec, op: str, targets: LimitTargets, started: float, *, read_only: bool
    ) -> dict[str, Any] | None:
        """Answer file operation `op` on the file server (forked first when there is none).
        None when no server could take the request (nothing ran): the caller starts a fresh
        interpreter instead."""
        server = self._file_server
        if server is not None and (
            server.poll() is not None or server.calls >= FILE_SERVER_MAX_CALLS
        ):
            self.stop_file_server()
            server = None
        if server is None:
            if op in ("glob", "grep"):
                # they and their patterns (`re`) are imported here once: every later file
                # server (a new one follows each command) inherits them instead of importing
                # them again
                import re  # noqa: F401

                _load_sibling("tool_search")
            try:
                server = self._file_server = self._start_file_server(targets)
            except OSError:
                return None
        # this call's soft limits, set from outside (the server may not change any limit); one
        # the server already holds is not set again
        try:
            for res, soft, _hard in targets:
                if res == resource.RLIMIT_FSIZE:
                    hard = self._server_hard(res, _hard)
                    fsize = (_lower(soft, hard), hard)
                    if fsize != server.fsize:
                        resource.prlimit(server.pid, res, fsize)
                        server.fsize = fsize
                elif res == resource.RLIMIT_CPU:
                    used = int(server.cpu_seconds()) + 1
                    hard = self._own[res][1]
                    cpu_soft = _lower(used + soft, hard)
                    if cpu_soft != server.cpu_soft:
                        resource.prlimit(server.pid, res, (cpu_soft, hard))
                        server.cpu_soft = cpu_soft
        except OSError:
            self.stop_file_server()
            return None
        server.calls += 1
        body = marshal.dumps((op, spec.stdin, spec.env, spec.cwd))
        try:
            _write_all(server.requests, _HEADER.pack(len(body)) + body)
        except OSError:
            self.stop_file_server()
            return None
        return self._await_answer(server, spec, started, check_quota=not read_only)

    def _await_answer(
        self, server: _FileServer, spec: ExecSpec, started: float, *, check_quota: bool
    ) -> dict[str, Any]:
        """Wait for the server's answer under the call's timeout (and workspace quota)."""
        deadline = started + spec.timeout_s
        scan_interval = 0.05
        # without quota checks nothing is due before the deadline: the wait below then sleeps
        # until the answer (a `next_scan` left in the past would make it poll without sleeping)
        scanning = check_quota and bool(self.config.workspace_bytes)
        next_scan = started + scan_interval if scanning else float("inf")
        buf = bytearray()
        want = _FIRST_READ
        sel = server.poller
        if self._host_fd is not None and not server.watching_host:
            sel.register(self._host_fd, _READ, "host")
            server.watching_host = True
        timed_out = quota_hit = truncated = False
        answer: bytes | None = None
        while answer is None:
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            if scanning and now >= next_scan:
                scan_started = time.monotonic()
                if self._over_quota():
                    quota_hit = True
                    break
                scan_interval = max(0.05, 4 * (time.monotonic() - scan_started))
                next_scan = time.monotonic() + scan_interval
            wait = max(0.0, min(deadline, next_scan) - time.monotonic())
            gone = False
            for key, _ in sel.select(timeout=wait):
                if key.data == "host":
                    if not _host_still_there(int(key.fd)):
                        # the owner is gone: nobody will read the answer
                        server.stop()
                        os._exit(0)
                    # still there (it sent a frame early): not watched for the rest of
                    # this call, again from the next one
                    sel.unregister(key.fd)
                    server.watching_host = False
                    continue
                chunk = os.read(server.answers, want)
                if not chunk:
                    gone = True  # the server died: reported below
                    break
                buf += chunk
                if len(buf) >= _HEADER.size:
                    (size,) = _HEADER.unpack(bytes(buf[: _HEADER.size]))
                    # an answer over the output limit is cut there (and the server goes)
                    end = _HEADER.size + min(size, spec.output_limit)
                    if len(buf) >= end:
                        answer = bytes(buf[_HEADER.size : end])
                        truncated = size > spec.output_limit
                    want = max(1, min(_READ_CHUNK, end - len(buf)))
            if gone:
                break
        if answer is not None and not truncated and not timed_out and not quota_hit:
            if check_quota and self.config.workspace_bytes and self._over_quota():
                quota_hit = True
            duration_ms = int((time.monotonic() - started) * 1000)
            return _result(
                exit_code=0,
                stdout=answer,
                duration_ms=duration_ms,
                workspace_exceeded=quota_hit,
            )
        # timed out, over quota, an oversized answer or a dead server: it goes, the next file
        # call forks a new one
        killed_by_us = timed_out or quota_hit or truncated
        self._file_server = None
        returncode = server.stop()
        err = server.stderr
        if quota_hit or (check_quota and self.config.workspace_bytes and self._over_quota()):
            quota_hit = True
        duration_ms = int((time.monotonic() - started) * 1000)
        if timed_out or quota_hit or truncated:
            return _result(
                exit_code=None,
                sig=SIGKILL,
                stdout=answer or b"",
                stderr=err,
                duration_ms=duration_ms,
                timed_out=timed_out,
                truncated=truncated,
                workspace_exceeded=quota_hit,
            )
        sig = -returncode if returncode < 0 else None
        oom = (sig == SIGKILL and not killed_by_us) or any(m in err for m in _OOM_MARKERS)
        return _result(
            exit_code=returncode if returncode >= 0 else None,
            sig=sig,
            stderr=err,
            duration_ms=duration_ms,
            oom=oom,
        )
