"""Running one command at a time under the session's limits (see `Runner`)."""

from __future__ import annotations

import errno
import os
import resource
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    import subprocess
    from types import ModuleType
    from typing import Any

    from .fileserver import _FileServer

if TYPE_CHECKING or __package__:
    from .confine import LimitTargets, _ChildSetup, _lower, _Spawner, limit_targets
    from .fileserver import FileServing
    from .poller import _READ, _WRITE, _host_still_there, _Poller
    from .protocol import _OOM_MARKERS, _READ_CHUNK, Config, ExecSpec, _result
    from .sweep import SIGKILL, SWEEP_GRACE_S, _sweep, reap_orphans, sweep_processes
else:  # inside the sandbox, where this directory is first on sys.path (see supervisor.py)
    from confine import LimitTargets, _ChildSetup, _lower, _Spawner, limit_targets
    from fileserver import FileServing
    from poller import _READ, _WRITE, _host_still_there, _Poller
    from protocol import _OOM_MARKERS, _READ_CHUNK, Config, ExecSpec, _result
    from sweep import SIGKILL, SWEEP_GRACE_S, _sweep, reap_orphans, sweep_processes


#: a workspace with more entries than this counts as over quota (inode exhaustion is disk abuse)
MAX_WORKSPACE_ENTRIES = 100_000


class _SlowPath(Exception):
    """The fast path cannot start this command; nothing was started."""


class _StartFailed(Exception):
    """The command's limits or seccomp filter could not be applied (subprocess's
    SubprocessError, raised as this so that catching it needs no import of subprocess)."""


#: errno values of a fork()/pipe() that failed under the inherited limits (nothing ran)
_RETRY_ERRNOS = frozenset({errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE})
#: address space (and data size) the supervisor keeps free when it holds a command's RLIMIT_AS
#: (RLIMIT_DATA) on the fast path (bytes)
_AS_HEADROOM = 32 * 1024 * 1024


def _own_address_space() -> int:
    with open("/proc/self/statm", "rb") as fh:
        return int(fh.read().split()[0]) * resource.getpagesize()


def _own_data() -> int:
    """This process's data and stack size (bytes): at least what RLIMIT_DATA counts."""
    with open("/proc/self/statm", "rb") as fh:
        return int(fh.read().split()[5]) * resource.getpagesize()


def workspace_usage(root: str, *, max_entries: int = MAX_WORKSPACE_ENTRIES) -> tuple[int, int]:
    """(allocated bytes, entries) under `root`, never following symlinks. Stops counting
    entries once past `max_entries`."""
    total = 0
    entries = 0
    stack = [root]
    while stack:
        path = stack.pop()
        try:
            with os.scandir(path) as it:
                for entry in it:
                    entries += 1
                    if entries > max_entries:
                        return total, entries
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return total, entries


class Runner(FileServing):
    """Runs one command at a time under the session's limits.

    With `inherit` (serve mode) commands start on the fast path: the limits go onto this process
    as soft limits for the instant of the spawn, the spawner thread (under the command filter)
    starts the command without any code between fork and exec, and the limits are restored. The
    command inherits them, and the command filter forbids it to change any rlimit, so the soft
    values bind it and everything it starts. Right after the spawn its hard limits are lowered to
    the same values (RLIMIT_CPU's SIGKILL one second past the soft limit), as the slow path sets
    them. The slow path (a full fork that sets the limits and the filter before exec) is taken
    when this process could not hold the limits itself for that instant: its own address space
    or CPU time too close to the command's limits, or the fork refused under them.

    File operations (the ``read``/``write``/``edit``/``list``/``glob``/``grep`` requests of
    tools.py, recognised by their exact argv) are answered in serve mode without starting a new
    interpreter: by a file server, a forked child of this process that takes on the session's
    limits and the command filter as the slow path does before its exec, then answers one
    request after another with tools.py's own code (imported here once, on the first such call).
    Per call, this process sets the server's RLIMIT_FSIZE (what is left of the workspace quota)
    and RLIMIT_CPU (its CPU time so far + cpu_seconds) from outside, and applies the call's
    timeout and workspace quota; a timeout, a quota hit or a crash kills the server and the next
    file call forks a new one. It stays non-dumpable (no exec resets that), so no other process
    of the sandbox can read the copy of this process's memory it holds. It is killed before any
    other command starts, so a command never shares the sandbox with it and every command
    starts and ends as before (the sweep included)."""

    def __init__(
        self,
        config: Config,
        *,
        inherit: bool = False,
        host_fd: int | None = None,
        spawner: _Spawner | None = None,
    ) -> None:
        """`spawner`: a spawner thread already started under the command filter of
        `config.unix_pairs` (a pooled sandbox starts one before its run is known)."""
        self.config = config
        #: the host's request stream (serve mode). The host sends nothing while a call runs, so
        #: the stream turning readable mid-call means it ended: the owner is gone, and the call
        #: and everything it started are killed instead of running on unobserved.
        self._host_fd = host_fd
        self._child_setup = _ChildSetup(unix_pairs=config.unix_pairs)
        if spawner is None and inherit:
            spawner = _Spawner(unix_pairs=config.unix_pairs)
        self._spawner = spawner
        #: tools.py, loaded on the first file operation (serve mode only)
        self._tools: ModuleType | None = None
        #: the file server, while file operations follow each other
        self._file_server: _FileServer | None = None
        self._tools_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools.py")
        #: this process's own limits, restored after each fast-path spawn
        self._own = {res: resource.getrlimit(res) for res, _s, _h in limit_targets(config, 0)}

    def _over_quota(self) -> bool:
        if not self.config.workspace_bytes:
            return False
        used, entries = workspace_usage(self.config.workspace)
        return used > self.config.workspace_bytes or entries > MAX_WORKSPACE_ENTRIES

    def _file_size_cap(self) -> int | None:
        """RLIMIT_FSIZE for the next call: the per-file cap, lowered to what is left of the
        workspace quota, so that one file can never push the workspace past it (0 when the
        quota is used up: writes then fail with EFBIG, deleting still works)."""
        cap = self.config.file_size_bytes or None
        if self.config.workspace_bytes:
            used, _entries = workspace_usage(self.config.workspace)
            left = max(0, self.config.workspace_bytes - used)
            cap = left if cap is None else min(cap, left)
        return cap

    def _popen(self, spec: ExecSpec, **extra: Any) -> subprocess.Popen[bytes]:
        import subprocess  # already imported by `_start`, on the main thread

        return subprocess.Popen(
            spec.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=spec.cwd,
            env=spec.env,
            close_fds=True,
            # the command's own session and process group (setsid in the vfork child)
            start_new_session=True,
            # SIGPIPE and SIGXFSZ back to their defaults (Python ignores both in this process)
            restore_signals=True,
            **extra,
        )

    def _spawn_inherited(self, spec: ExecSpec, targets: LimitTargets) -> subprocess.Popen[bytes]:
        """The fast path. Raises _SlowPath when nothing was started and the slow path should be
        used instead."""
        assert self._spawner is not None
        spawner = self._spawner
        for res, soft, _hard in targets:
            if res == resource.RLIMIT_AS:
                request_bytes = sum(len(a) for a in spec.argv)
                request_bytes += sum(len(k) + len(v) for k, v in spec.env.items())
                if _own_address_space() + _AS_HEADROOM + 4 * request_bytes > soft:
                    raise _SlowPath("this process's address space is too close to RLIMIT_AS")
            elif res == resource.RLIMIT_DATA:
                if _own_data() + _AS_HEADROOM > soft:
                    raise _SlowPath("this process's data size is too close to RLIMIT_DATA")
            elif res == resource.RLIMIT_CPU and time.process_time() + 1.0 >= soft:
                raise _SlowPath("this process's CPU time is too close to RLIMIT_CPU")
        applied: list[int] = []
        try:
            try:
                for res, soft, _hard in targets:
                    own_hard = self._own[res][1]
                    resource.setrlimit(res, (_lower(soft, own_hard), own_hard))
                    applied.append(res)
            except (OSError, ValueError) as exc:
                raise _SlowPath(f"cannot hold the command's limits: {exc}") from exc
            try:
                proc: subprocess.Popen[bytes] = spawner.call(lambda: self._popen(spec))
            except OSError as exc:
                if exc.errno in _RETRY_ERRNOS:
                    raise _SlowPath(f"fork refused under the command's limits: {exc}") from exc
                raise
            except MemoryError as exc:
                # the command may or may not have started: make sure it is gone, never retry
                sweep_processes()
                raise _StartFailed("out of memory while starting") from exc
        finally:
            for res in reversed(applied):
                resource.setrlimit(res, self._own[res])
        for res, soft, hard in targets:
            own_hard = self._own[res][1]
            try:
                resource.prlimit(proc.pid, res, (_lower(soft, own_hard), _lower(hard, own_hard)))
            except OSError:
                # already gone (or exec'd into something we may not touch): nothing to limit
                break
        return proc

    def _start(self, spec: ExecSpec, targets: LimitTargets) -> subprocess.Popen[bytes]:
        # the session's first command imports it, before any limit is applied to this process
        import subprocess

        try:
            if self._spawner is not None:
                try:
                    return self._spawn_inherited(spec, targets)
                except _SlowPath:
                    pass
            self._child_setup.prepare(targets)
            return self._popen(
                spec,
                preexec_fn=self._child_setup,  # noqa: PLW1509 - limits must be set pre-exec
            )
        except subprocess.SubprocessError as exc:
            raise _StartFailed(str(exc)) from exc

    def run(self, spec: ExecSpec) -> dict[str, Any]:
        started = time.monotonic()
        op = self._file_op(spec)
        try:
            if op is not None:
                assert self._tools is not None
                read_only = op in self._tools.READ_ONLY_OPS
                # an operation that writes nothing needs no file size cap and no quota checks
                # (nothing else runs beside the file server): no scans of the workspace for it
                file_size = None if read_only else self._file_size_cap()
                answered = self._file_server_call(
                    spec, op, limit_targets(self.config, file_size), started, read_only=read_only
                )
                if answered is not None:
                    return answered
            # a command never meets the file server: no process of ours but the supervisor is
            # there when it starts
            self.stop_file_server()
            proc = self._start(spec, limit_targets(self.config, self._file_size_cap()))
        except FileNotFoundError as exc:
            if exc.filename == spec.cwd:
                msg = f"working directory {spec.cwd} does not exist"
                return _result(exit_code=126, stderr=msg.encode(), error=("invalid_args", msg))
            msg = f"{spec.argv[0]}: command not found"
            return _result(exit_code=127, stderr=msg.encode(), error=("not_found", msg))
        except (PermissionError, IsADirectoryError, NotADirectoryError) as exc:
            if exc.filename == spec.cwd:
                msg = f"working directory {spec.cwd}: {exc.strerror or exc}"
            else:
                msg = f"{spec.argv[0]}: {exc.strerror or exc}"
            return _result(exit_code=126, stderr=msg.encode(), error=("denied", msg))
        except OSError as exc:
            msg = f"{spec.argv[0]}: cannot execute: {exc.strerror or exc}"
            return _result(exit_code=126, stderr=msg.encode(), error=("denied", msg))
        except _StartFailed as exc:
            msg = f"the command's limits or seccomp filter could not be applied: {exc}"
            return _result(exit_code=None, error=("sandbox_error", msg))
        return self._supervise(proc, spec, started)

    def _supervise(
        self, proc: subprocess.Popen[bytes], spec: ExecSpec, started: float
    ) -> dict[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        limit = spec.output_limit
        out_fd = proc.stdout.fileno()
        err_fd = proc.stderr.fileno()
        buffers: dict[int, bytearray] = {out_fd: bytearray(), err_fd: bytearray()}
        truncated = False
        timed_out = False
        quota_hit = False
        killed_by_us = False
        sel = _Poller()
        for stream in (proc.stdout, proc.stderr):
            os.set_blocking(stream.fileno(), False)
            sel.register(stream.fileno(), _READ, "out")
        stdin_fd = proc.stdin.fileno()
        stdin_data = memoryview(spec.stdin)
        if stdin_data:
            os.set_blocking(stdin_fd, False)
            sel.register(stdin_fd, _WRITE, "in")
        else:
            proc.stdin.close()
        pidfd: int | None = None
        try:
            pidfd = os.pidfd_open(proc.pid)
            sel.register(pidfd, _READ, "exit")
        except (AttributeError, OSError):
            pidfd = None
        if self._host_fd is not None:
            sel.register(self._host_fd, _READ, "host")
        deadline = started + spec.timeout_s
        scan_interval = self.config.quota_interval_s
        # no quota, no scans: nothing is due before the deadline (see `_await_answer`)
        next_scan = started + scan_interval if self.config.workspace_bytes else float("inf")
        exited = False
        open_outputs = 2
        nothing_left = False

        def kill_all() -> None:
            try:
                os.killpg(proc.pid, SIGKILL)
            except OSError:
                pass
            if self.config.sweep:
                sweep_processes(keep=proc.pid)

        while open_outputs or not exited:
            now = time.monotonic()
            if exited and (timed_out or quota_hit) and now > deadline + SWEEP_GRACE_S:
                # killed, reaped, yet something still holds the pipes (sweeping is off):
                # stop reading rather than wait forever
                break
            if not timed_out and not quota_hit and now >= deadline:
                timed_out = True
                killed_by_us = True
                kill_all()
            if self.config.workspace_bytes and not quota_hit and now >= next_scan:
                scan_started = time.monotonic()
                if self._over_quota():
                    quota_hit = True
                    killed_by_us = True
                    kill_all()
                # scanning a big workspace must not eat the call's time: back off
                scan_interval = max(
                    self.config.quota_interval_s, 4 * (time.monotonic() - scan_started)
                )
                next_scan = time.monotonic() + scan_interval
            if not exited and proc.poll() is not None:
                exited = True
                if pidfd is not None:
                    sel.unregister(pidfd)
                    os.close(pidfd)
                    pidfd = None
                # Whatever the command left behind dies now, which also closes every copy of
                # its output pipes so the reads below reach EOF.
                if self.config.sweep:
                    _clean, nothing_left = _sweep(keep=proc.pid)
                else:
                    try:
                        os.killpg(proc.pid, SIGKILL)
                    except OSError:
                        pass
                continue
            wait = min(deadline, next_scan) - time.monotonic()
            if pidfd is None and not exited:
                wait = min(wait, 0.01)
            events = sel.select(timeout=max(0.0, wait) if not (timed_out or quota_hit) else 0.05)
            for key, _ in events:
                fd = int(key.fd)
                if key.data == "host":
                    if not _host_still_there(fd):
                        # the owner is gone: nobody will read the result
                        kill_all()
                        os._exit(0)
                    sel.unregister(fd)
                    continue
                if key.data == "in":
                    try:
                        written = os.write(fd, stdin_data[:65536])
                        stdin_data = stdin_data[written:]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        stdin_data = stdin_data[:0]
                    if not stdin_data:
                        sel.unregister(fd)
                        proc.stdin.close()
                elif key.data == "out":
                    try:
                        chunk = os.read(fd, _READ_CHUNK)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        sel.unregister(fd)
                        open_outputs -= 1
                        continue
                    buf = buffers[fd]
                    room = limit - len(buf)
                    if room > 0:
                        buf += chunk[:room]
                    if len(chunk) > max(room, 0):
                        truncated = True
                # "exit": the loop head notices via poll()
        sel.close()
        if not proc.stdin.closed:
            try:
                proc.stdin.close()
            except OSError:
                pass
        proc.stdout.close()
        proc.stderr.close()
        returncode = proc.wait()
        if not nothing_left:
            reap_orphans()
        if self.config.workspace_bytes and not quota_hit and self._over_quota():
            quota_hit = True
        duration_ms = int((time.monotonic() - started) * 1000)
        exit_code: int | None = returncode if returncode >= 0 else None
        sig = -returncode if returncode < 0 else None
        out = bytes(buffers[out_fd])
        err = bytes(buffers[err_fd])
        oom = (sig == SIGKILL and not killed_by_us) or any(m in err for m in _OOM_MARKERS)
        return _result(
            exit_code=exit_code,
            sig=sig,
            stdout=out,
            stderr=err,
            duration_ms=duration_ms,
            timed_out=timed_out,
            truncated=truncated,
            oom=oom,
            workspace_exceeded=quota_hit,
        )
