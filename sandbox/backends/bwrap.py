"""The bubblewrap backend: one resident bwrap sandbox per session, commands forked inside it.

Layout of a session
-------------------
* Host side: ``bwrap`` is started with an empty environment, in its own process group and — when
  the worker runs as root — as an unprivileged host uid taken from a configurable range
  (``MOTOR_SANDBOX_UID_RANGE``, default ``600000-609999``), one uid per live session. bwrap then
  builds an unprivileged user namespace, so the sandboxed process is unprivileged both inside
  (uid 1000) and outside (that host uid), with every capability dropped and no_new_privs set.
* Inside: a fresh root containing read-only binds of /usr (and the merged-/usr symlinks), the few
  /etc files Python and the allowlisted commands read, synthesised /etc/passwd, /etc/group and
  /etc/hosts, a fresh /proc (bwrap keeps /proc/sys and friends read-only) and a minimal /dev
  (read-only, with a size-capped /dev/shm), a size-capped tmpfs /tmp, the workspace read-write
  at /workspace, the supervisor read-only at /opt/motor-cortex. Everything else — /run, /var,
  /home, the project, the data dir, other workspaces, host sockets — is simply not there. Every
  namespace is new (net: loopback only); nested user namespaces are disabled.
* The supervisor (``sandbox/inside/supervisor.py``, started as ``python3 -I -S -B -c BOOT serve``
  from bytecode the backend compiled when it was created) is the sandbox's PID 1 (``--as-pid-1``):
  non-dumpable, immune to signals from inside, under its own seccomp filter; it forks each
  command with rlimits and the stricter command filter (see sandbox/inside/supervisor.py) and
  kills whatever a command leaves behind.
* With network enabled, the host runs an ``EgressProxy`` on ``<runtime dir>/net/egress.sock``;
  that directory alone is bound (read-only) at /run/motor-cortex and the supervisor bridges
  127.0.0.1:3128 to it. Proxy variables point there; NO_PROXY is never set.
* Writable inside: /workspace (quota) and the sized tmpfs mounts only; the argument list is
  checked against that rule (sandbox/backends/mounts.py) before bwrap starts.

Host paths the unprivileged uid could not traverse (a workspace under a root-only data dir) are
bind-mounted by the root worker into a staging directory of the session's runtime dir, inside a
private mount namespace created just for the bwrap launch (nothing appears in the host's mount
table), before the launcher drops to the sandbox uid and execs bwrap.

Each runtime dir records its owner (pid + the pid's start time) and sandbox uid in
``owner.json``. bwrap dies with its owner (--die-with-parent), but files stay; a backend sweeps
the dirs of dead owners when it is created (``BwrapBackend.sweep_orphans``).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import logging
import os
import queue
import secrets
import select
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sandbox.backends._protocol import exec_message
from sandbox.backends.mounts import check_bwrap_args
from sandbox.inside.supervisor import BOOT as SUPERVISOR_BOOT
from sandbox.inside.supervisor import MAX_FRAME_BYTES, ProtocolError, encode_frame, precompile
from sandbox.types import ExecRequest, ExecResult, SandboxError, SessionSpec

logger = logging.getLogger(__name__)

INSIDE_DIR = Path(__file__).resolve().parent.parent / "inside"
SANDBOX_UID = 1000
SANDBOX_GID = 1000
BRIDGE_PORT = 3128
PROXY_URL = f"http://127.0.0.1:{BRIDGE_PORT}"
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
#: how long bwrap + the supervisor may take to come up (seconds)
STARTUP_TIMEOUT_S = 15.0
#: extra time over a call's own timeout before the supervisor is declared hung (seconds)
RESULT_GRACE_S = 15.0
#: how long close() waits for a running call to notice that its sandbox died (seconds)
CLOSE_WAIT_S = 10.0
#: the file in a session's runtime dir naming its owning process and sandbox uid
OWNER_FILE = "owner.json"
#: a runtime dir without an owner record younger than this may still be being set up (seconds)
UNOWNED_GRACE_S = 60.0
#: size cap of /dev/shm inside (bytes)
SHM_BYTES = 16 * 1024 * 1024

# Read-only system files a Python or coreutils process may read; absent ones are skipped.
_SYSTEM_RO_BINDS = (
    "/usr",
    "/etc/alternatives",
    "/etc/ssl/certs",
    "/etc/ca-certificates",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/mime.types",
)
_MERGED_USR = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")

_PASSWD = (
    "root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n"
    f"sandbox:x:{SANDBOX_UID}:{SANDBOX_GID}:sandbox:/workspace:/bin/sh\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
)
_GROUP = f"root:x:0:\nsandbox:x:{SANDBOX_GID}:\nnogroup:x:65534:\n"
_HOSTS = "127.0.0.1 localhost sandbox\n::1 localhost\n"
_NSSWITCH = "passwd: files\ngroup: files\nhosts: files\n"


def _find_bwrap() -> str:
    path = shutil.which("bwrap", path="/usr/local/bin:/usr/bin:/bin")
    if path is None:
        raise SandboxError(
            "bubblewrap (bwrap) is not installed; install the 'bubblewrap' package "
            "(bin/setup-host does) — commands are never run unsandboxed"
        )
    return path


def _parse_uid_range(text: str) -> range:
    try:
        low_s, high_s = text.split("-", 1)
        low, high = int(low_s), int(high_s)
    except ValueError as exc:
        raise SandboxError(
            f"MOTOR_SANDBOX_UID_RANGE must look like 600000-609999, got {text!r}"
        ) from exc
    if not (1000 <= low <= high < 2**32 - 2):
        raise SandboxError(f"MOTOR_SANDBOX_UID_RANGE {text!r} is out of bounds (1000..2^32-3)")
    return range(low, high + 1)


def _default_runtime_root() -> Path:
    configured = os.environ.get("MOTOR_SANDBOX_RUNTIME_DIR")
    if configured:
        return Path(configured)
    if os.geteuid() == 0 and os.path.isdir("/run") and os.access("/run", os.W_OK):
        return Path("/run/motor-cortex")
    return Path(tempfile.gettempdir()) / f"motor-cortex-{os.geteuid()}"


def _private_dir(path: Path, mode: int = 0o711) -> Path:
    """Create `path` (mode `mode`) or accept an existing directory we own; refuse symlinks and
    directories owned by someone else (another user squatting on a shared /tmp)."""
    try:
        path.mkdir(mode=mode, parents=True)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise SandboxError(f"runtime directory {path} is not a directory owned by this user")
    if st.st_mode & 0o022:
        os.chmod(path, mode)
    return path


class _UidLease:
    """Exclusive use of one host uid for one session, across processes (flock on a file)."""

    def __init__(self, uid: int, fd: int) -> None:
        self.uid = uid
        self._fd = fd

    @classmethod
    def acquire(cls, uids: range, lock_dir: Path) -> _UidLease:
        start = secrets.randbelow(len(uids))
        for i in range(len(uids)):
            uid = uids[(start + i) % len(uids)]
            fd = os.open(lock_dir / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            if _processes_of_uid(uid):
                # a process of a previous holder is still alive; never share a uid with it
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
                continue
            return cls(uid, fd)
        raise SandboxError(f"no free sandbox uid in {uids.start}-{uids.stop - 1}")

    def release(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


def _processes_of_uid(uid: int) -> list[int]:
    """Live (non-zombie) processes owned by `uid`."""
    pids: list[int] = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid != uid:
                    continue
                with open(f"/proc/{name}/stat", "rb") as fh:
                    state = fh.read().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state not in (b"Z", b"X"):
                pids.append(int(name))
    return pids


def _process_start(pid: int) -> str:
    """The kernel's start time of `pid` (clock ticks since boot), "" when it does not exist.
    A pid alone can be reused after its process died; pid + start time cannot."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return ""
    return fields[19].decode() if len(fields) > 19 else ""


def _write_owner(runtime_dir: Path, uid: int | None) -> None:
    """Record who owns a runtime dir (this process: pid + start time) and its sandbox uid."""
    import json

    pid = os.getpid()
    record = {"pid": pid, "start": _process_start(pid), "uid": uid}
    tmp = runtime_dir / f"{OWNER_FILE}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(record))
    tmp.replace(runtime_dir / OWNER_FILE)


def _read_owner(runtime_dir: Path) -> dict[str, Any] | None:
    import json

    try:
        record = json.loads((runtime_dir / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _open_files_under(root: Path) -> set[str]:
    """Paths under `root` that some process holds open."""
    prefix = f"{root}/"
    found: set[str] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{name}/fd")
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{name}/fd/{fd}")
                if target.startswith(prefix):
                    found.add(target)
    return found


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(p) for p in fh.read().split()]
    except (OSError, ValueError):
        return []


def _chown_tree(root: Path, uid: int, gid: int, sandbox_uids: range) -> None:
    """Give the whole workspace to the sandbox uid without ever following a symlink (fd-relative
    walk, so a swapped path cannot redirect the chown outside the tree). A regular file with
    several hard links that no sandbox uid owns is left alone: one of its other names may lie
    outside the workspace."""
    os.chown(root, uid, gid, follow_symlinks=False)
    for _dirpath, dirnames, filenames, dirfd in os.fwalk(root, follow_symlinks=False):
        for name in dirnames + filenames:
            try:
                st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and st.st_uid not in sandbox_uids:
                    logger.warning("not chowning multiply-linked workspace file %s", name)
                    continue
                os.chown(name, uid, gid, dir_fd=dirfd, follow_symlinks=False)
            except FileNotFoundError:
                continue


def _data_fd(text: str) -> int:
    """A pipe read end holding `text` (small: fits the pipe buffer), for --ro-bind-data."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, text.encode())
    finally:
        os.close(write_end)
    return read_end


_CLONE_NEWNS = 0x00020000
_MS_BIND = 0x1000
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18


class _Launcher:
    """Runs in the forked child before bwrap is exec'd (root workers only): a private mount
    namespace, the staged bind mounts, then the permanent switch to the sandbox uid."""

    def __init__(self, staged: list[tuple[bytes, bytes]], uid: int, gid: int) -> None:
        import ctypes

        self._libc = ctypes.CDLL(None, use_errno=True)
        self._staged = staged
        self._uid = uid
        self._gid = gid

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            import ctypes

            err = ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")

    def run(self) -> None:
        libc = self._libc
        self._check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        self._check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "make / private")
        for source, target in self._staged:
            self._check(libc.mount(source, target, None, _MS_BIND | _MS_REC, None), "bind")
        os.setgroups([])
        os.setresgid(self._gid, self._gid, self._gid)
        os.setresuid(self._uid, self._uid, self._uid)


class _Spawner:
    """Starts every bwrap from one long-lived thread. --die-with-parent (PR_SET_PDEATHSIG)
    follows the *thread* that forked the sandbox, so a session opened from a short-lived thread
    (a thread pool, a request handler) would otherwise die when that thread ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], dict[str, Any], threading.Event]]
        self._jobs = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def call(self, fn: Callable[[], Any]) -> Any:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                # also after os.fork(): the child of a forking worker has no spawner thread yet
                self._jobs = queue.SimpleQueue()
                self._thread = threading.Thread(
                    target=self._loop, args=(self._jobs,), name="bwrap-spawner", daemon=True
                )
                self._thread.start()
            jobs = self._jobs
        box: dict[str, Any] = {}
        done = threading.Event()
        jobs.put((fn, box, done))
        done.wait()
        if "error" in box:
            raise box["error"]
        return box["value"]

    @staticmethod
    def _loop(
        jobs: queue.SimpleQueue[tuple[Callable[[], Any], dict[str, Any], threading.Event]],
    ) -> None:
        while True:
            fn, box, done = jobs.get()
            try:
                box["value"] = fn()
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                box["error"] = exc
            finally:
                done.set()


_spawner = _Spawner()


class BwrapSession:
    """One resident bwrap sandbox. Thread-safe: calls are serialised."""

    backend = "bwrap"

    def __init__(
        self,
        *,
        spec: SessionSpec,
        session_id: str,
        proc: subprocess.Popen[bytes],
        runtime_dir: Path,
        lease: _UidLease | None,
        proxy: Any,
        log_path: Path,
        sandbox_uids: range | None = None,
    ) -> None:
        self.id = session_id
        self.spec = spec
        self._sandbox_uids = sandbox_uids if sandbox_uids is not None else range(0)
        self.host_uid = lease.uid if lease else os.geteuid()
        self._proc = proc
        self._runtime_dir = runtime_dir
        self._lease = lease
        self._proxy = proxy
        self._log_path = log_path
        self._call_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._closed = False
        self._pipes_closed = False
        self._caller: int | None = None
        self.last_used = time.monotonic()
        self._on_close: list[Callable[[BwrapSession], None]] = []
        assert proc.stdin is not None and proc.stdout is not None
        self._wfd = proc.stdin.fileno()
        self._rfd = proc.stdout.fileno()
        self._rbuf = bytearray()

    # ------------------------------------------------------------------ protocol plumbing

    def _send(self, message: Mapping[str, Any]) -> None:
        self._send_bytes(encode_frame(message))

    def _send_bytes(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                written = os.write(self._wfd, view)
            except (BrokenPipeError, OSError) as exc:
                raise SandboxError(f"sandbox supervisor is gone: {exc}{self._log_tail()}") from exc
            view = view[written:]

    def _recv(self, deadline: float) -> dict[str, Any]:
        import json
        import struct

        while True:
            if len(self._rbuf) >= 4:
                (size,) = struct.unpack(">I", self._rbuf[:4])
                if size > MAX_FRAME_BYTES:
                    raise SandboxError("sandbox supervisor sent an oversized frame")
                if len(self._rbuf) >= 4 + size:
                    body = bytes(self._rbuf[4 : 4 + size])
                    del self._rbuf[: 4 + size]
                    try:
                        message = json.loads(body)
                    except ValueError as exc:
                        raise SandboxError(f"sandbox supervisor sent garbage: {exc}") from exc
                    if not isinstance(message, dict):
                        raise SandboxError("sandbox supervisor sent a non-object frame")
                    return message
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxError("sandbox supervisor did not answer in time")
            try:
                ready, _, _ = select.select([self._rfd], [], [], remaining)
                if not ready:
                    continue
                chunk = os.read(self._rfd, 1024 * 1024)
            except (OSError, ValueError) as exc:
                raise SandboxError(f"reading from the sandbox supervisor failed: {exc}") from exc
            if not chunk:
                raise SandboxError(f"sandbox supervisor exited{self._log_tail()}")
            self._rbuf += chunk

    def _log_tail(self) -> str:
        try:
            with open(self._log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - 2000))
                tail = fh.read().decode(errors="replace").strip()
        except OSError:
            return ""
        return f": {tail}" if tail else ""

    def handshake(self, config: Mapping[str, Any]) -> None:
        self._send({"op": "configure", "config": dict(config)})
        reply = self._recv(time.monotonic() + STARTUP_TIMEOUT_S)
        if reply.get("op") != "ready":
            raise SandboxError(f"sandbox failed to start: {reply.get('message', reply)}")

    def _reclaim_workspace(self) -> None:
        """Give the workspace back to this session's uid when another session took it.

        Two sessions may share a workspace one call at a time: a run's session stays warm in
        one worker process while a slice of the same run in another process opens its own, with
        another leased uid, and chowns the workspace to it. Back in the first session, the
        sandbox uid could no longer enter /workspace (mode 0700) or change the files the other
        one made. Whoever runs a call owns the workspace for it: one lstat per call, a chown of
        the tree only when the owner changed."""
        if self._lease is None:
            return
        workspace = Path(self.spec.workspace)
        try:
            owner = os.lstat(workspace).st_uid
        except OSError:
            return  # gone: the call reports it
        if owner != self._lease.uid:
            logger.info(
                "session %s: workspace %s belonged to uid %s; handing it back to uid %s",
                self.id,
                workspace,
                owner,
                self._lease.uid,
            )
            try:
                _chown_tree(workspace, self._lease.uid, self._lease.uid, self._sandbox_uids)
            except OSError as exc:
                raise SandboxError(
                    f"cannot hand workspace {workspace} to the sandbox uid: {exc}"
                ) from exc

    # ------------------------------------------------------------------ Session API

    @property
    def closed(self) -> bool:
        return self._closed

    def add_close_callback(self, callback: Callable[[BwrapSession], None]) -> None:
        self._on_close.append(callback)

    def exec(self, request: ExecRequest) -> ExecResult:
        message = exec_message(request, self.spec.limits)
        with self._call_lock:
            if self._closed:
                raise SandboxError(f"sandbox session {self.id} is closed")
            self.last_used = time.monotonic()
            self._reclaim_workspace()
            try:
                frame = encode_frame(message)
            except ProtocolError as exc:
                raise ValueError(f"exec request too large: {exc}") from exc
            self._caller = threading.get_ident()
            try:
                self._send_bytes(frame)
                reply = self._recv(time.monotonic() + message["timeout_s"] + RESULT_GRACE_S)
            except SandboxError as exc:
                closed_meanwhile = self._closed
                self.close()
                if closed_meanwhile:
                    raise SandboxError(
                        f"sandbox session {self.id} was closed during the call"
                    ) from exc
                raise
            finally:
                self._caller = None
                self.last_used = time.monotonic()
                if self._closed:
                    self._close_pipes()
        op = reply.get("op")
        if op == "error":
            if reply.get("code") == "invalid_args":
                raise ValueError(f"invalid exec request: {reply.get('message')}")
            raise SandboxError(f"sandbox error: {reply.get('message')}")
        if op != "result":
            self.close()
            raise SandboxError(f"sandbox supervisor answered {op!r} to an exec request")
        error = reply.get("error")
        if isinstance(error, dict) and error.get("code") == "sandbox_error":
            raise SandboxError(str(error.get("message")))
        return ExecResult(
            exit_code=reply.get("exit_code"),
            stdout=base64.b64decode(reply.get("stdout_b64") or ""),
            stderr=base64.b64decode(reply.get("stderr_b64") or ""),
            duration_ms=int(reply.get("duration_ms") or 0),
            timed_out=bool(reply.get("timed_out")),
            truncated=bool(reply.get("truncated")),
            oom=bool(reply.get("oom")),
            signal=reply.get("signal"),
            workspace_exceeded=bool(reply.get("workspace_exceeded")),
        )

    def close(self) -> None:
        """Kill the sandbox and everything in it, stop the proxy, remove the runtime dir.
        Idempotent; safe to call from any thread, also while a call is running (that call then
        fails with SandboxError)."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        # Kill the sandbox's init first: the death of a PID namespace's init kills every process
        # in it, and bwrap (its parent) then exits and reaps it, so no zombie is left to the
        # host's init. Killing bwrap's group afterwards covers a bwrap that is still setting up.
        for child in _children(self._proc.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(child, signal.SIGKILL)
        try:
            self._proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                logger.error("bwrap pid %s did not exit after SIGKILL", self._proc.pid)
        if self._lease is not None:
            deadline = time.monotonic() + 5.0
            while _processes_of_uid(self._lease.uid) and time.monotonic() < deadline:
                for pid in _processes_of_uid(self._lease.uid):
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.01)
        if self._proxy is not None:
            try:
                self._proxy.close()
            except Exception:  # noqa: BLE001 - closing must finish the rest of the teardown
                logger.exception("closing the egress proxy of session %s failed", self.id)
        shutil.rmtree(self._runtime_dir, ignore_errors=True)
        if self._lease is not None:
            self._lease.release()
        # The pipes are closed only while no call uses them: closing them under a reader would
        # fail its read with EBADF, or let the fd number be reused by another file the reader
        # then reads. The sandbox is dead, so a running call sees EOF promptly; if the lock
        # cannot be had, that call closes them on its way out (exec's finally).
        if self._caller != threading.get_ident():
            if self._call_lock.acquire(timeout=CLOSE_WAIT_S):
                try:
                    self._close_pipes()
                finally:
                    self._call_lock.release()
            else:
                logger.error("a call of session %s did not end after its sandbox died", self.id)
        for callback in self._on_close:
            with contextlib.suppress(Exception):
                callback(self)

    def _close_pipes(self) -> None:
        """Close the supervisor's pipes; the caller holds `_call_lock`."""
        if self._pipes_closed:
            return
        self._pipes_closed = True
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def __enter__(self) -> BwrapSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BwrapBackend:
    """Opens bwrap sessions. `egress_resolver` is handed to the egress proxy (tests point an
    allowed test host name at a local server with it)."""

    name = "bwrap"

    def __init__(
        self,
        *,
        uid_range: str | None = None,
        runtime_root: Path | None = None,
        egress_resolver: Any = None,
        sweep: bool = True,
    ) -> None:
        self._bwrap = _find_bwrap()
        self._uids = _parse_uid_range(
            uid_range or os.environ.get("MOTOR_SANDBOX_UID_RANGE", "600000-609999")
        )
        self._runtime_root = runtime_root or _default_runtime_root()
        self._egress_resolver = egress_resolver
        precompile(str(INSIDE_DIR))
        if sweep:
            self.sweep_orphans()

    def sweep_orphans(self) -> list[Path]:
        """Remove the runtime dirs (supervisor log, staging dirs, dead egress socket) of
        sessions whose owning process is gone, and kill whatever still runs under their sandbox
        uid unless another session holds that uid now. A live owner's dir is never touched.
        Returns the removed dirs."""
        root = self._runtime_root
        if not root.is_dir():
            return []
        try:
            root_st = os.lstat(root)
        except OSError:
            return []
        if not stat.S_ISDIR(root_st.st_mode) or root_st.st_uid != os.geteuid():
            return []
        removed: list[Path] = []
        in_use: set[str] | None = None
        for entry in sorted(root.iterdir()):
            if entry.name == "uids" or entry.is_symlink() or not entry.is_dir():
                continue
            owner = _read_owner(entry)
            if owner is None:
                # no record: a dir of a release before owner records, or one being set up
                # right now (the record is written right after the dir is made)
                try:
                    age = time.time() - entry.stat().st_mtime
                except OSError:
                    continue
                if age < UNOWNED_GRACE_S:
                    continue
                # an older release's live session keeps its supervisor.log open in bwrap
                if in_use is None:
                    in_use = _open_files_under(root)
                if any(path.startswith(f"{entry}/") for path in in_use):
                    continue
            else:
                pid, start = owner.get("pid"), owner.get("start")
                if isinstance(pid, int) and start and _process_start(pid) == start:
                    continue
                uid = owner.get("uid")
                if isinstance(uid, int) and uid in self._uids:
                    self._reap_uid(uid)
            shutil.rmtree(entry, ignore_errors=True)
            if not entry.exists():
                removed.append(entry)
                logger.warning("removed the runtime dir of a dead sandbox owner: %s", entry)
        return removed

    def _reap_uid(self, uid: int) -> None:
        """Kill what still runs as `uid` — only while no live session leases it."""
        lock_dir = self._runtime_root / "uids"
        try:
            fd = os.open(lock_dir / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # another session took this uid after the owner died: leave it alone
            deadline = time.monotonic() + 5.0
            while (pids := _processes_of_uid(uid)) and time.monotonic() < deadline:
                for pid in pids:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.01)
        finally:
            os.close(fd)

    def open(self, spec: SessionSpec) -> BwrapSession:
        session_id = spec.session_id or secrets.token_hex(8)
        workspace = Path(spec.workspace)
        try:
            st = os.lstat(workspace)
        except OSError as exc:
            raise SandboxError(f"workspace {workspace} is not usable: {exc.strerror}") from exc
        if not stat.S_ISDIR(st.st_mode):
            raise SandboxError(f"workspace {workspace} is not a directory (symlinks are refused)")
        for host_path, inside in spec.readonly_mounts:
            if not inside.startswith("/") or inside.rstrip("/") in (
                "",
                "/workspace",
                "/opt/motor-cortex",
                "/proc",
                "/dev",
                "/tmp",
                "/run/motor-cortex",
            ):
                raise SandboxError(f"read-only mount target {inside!r} is not allowed")
            if not Path(host_path).exists():
                raise SandboxError(f"read-only mount source {host_path} does not exist")

        root = _private_dir(self._runtime_root)
        runtime_dir = Path(tempfile.mkdtemp(prefix=f"{session_id[:32]}-", dir=root))
        # the sandbox uid must traverse it to reach its staged mounts and egress socket
        os.chmod(runtime_dir, 0o711)  # noqa: S103 - traverse only, no listing
        lease: _UidLease | None = None
        proxy: Any = None
        fds: list[int] = []
        proc: subprocess.Popen[bytes] | None = None
        try:
            _write_owner(runtime_dir, None)
            if os.geteuid() == 0:
                lease = _UidLease.acquire(self._uids, _private_dir(root / "uids", 0o700))
                _write_owner(runtime_dir, lease.uid)
                host_uid = host_gid = lease.uid
                _chown_tree(workspace, host_uid, host_gid, self._uids)
            else:
                host_uid, host_gid = os.geteuid(), os.getegid()

            env = self._environment(spec)
            args = [self._bwrap, *self._namespace_args()]
            args += ["--setenv", "PATH", env.get("PATH", DEFAULT_PATH)]
            args += ["--setenv", "HOME", "/workspace", "--setenv", "LANG", "C.UTF-8"]
            args += ["--setenv", "TMPDIR", "/tmp"]
            args += self._filesystem_args()
            for name, text in (
                ("/etc/passwd", _PASSWD),
                ("/etc/group", _GROUP),
                ("/etc/hosts", _HOSTS),
                ("/etc/nsswitch.conf", _NSSWITCH),
            ):
                fd = _data_fd(text)
                fds.append(fd)
                args += ["--perms", "0444", "--ro-bind-data", str(fd), name]

            # Host paths reach bwrap through a staging directory it can traverse: as root, the
            # launcher bind-mounts them there inside its own private mount namespace (gone with
            # the sandbox, never visible on the host), then drops to the sandbox uid.
            staged: list[tuple[bytes, bytes]] = []
            staging = runtime_dir / "mnt"
            staging.mkdir(mode=0o711)

            def bind(host: Path, inside: str, *, writable: bool) -> None:
                source = host
                if lease is not None:
                    source = staging / f"m{len(staged)}"
                    if host.is_dir():
                        source.mkdir(mode=0o700)
                    else:
                        source.touch(mode=0o600)
                    staged.append((os.fsencode(host), os.fsencode(source)))
                args.extend(["--bind" if writable else "--ro-bind", str(source), inside])

            limits = spec.limits
            args += ["--size", str(limits.tmp_bytes), "--tmpfs", "/tmp"]
            bind(workspace, "/workspace", writable=True)
            bind(INSIDE_DIR, "/opt/motor-cortex", writable=False)
            for host_path, inside in spec.readonly_mounts:
                bind(Path(host_path), inside, writable=False)

            bridge: dict[str, Any] | None = None
            if spec.network.enabled:
                # The directory stays the worker's (the sandbox uid may only traverse it) and is
                # bound read-only: the sandbox can connect to the socket, which the proxy hands to
                # its uid, but can neither write files there nor remove the socket.
                net_dir = runtime_dir / "net"
                net_dir.mkdir(mode=0o711)
                os.chmod(net_dir, 0o711)  # noqa: S103 - traverse only, no listing
                proxy = self._start_proxy(spec, session_id, net_dir / "egress.sock", host_uid)
                args += ["--ro-bind", str(net_dir), "/run/motor-cortex"]
                bridge = {
                    "listen_host": "127.0.0.1",
                    "listen_port": BRIDGE_PORT,
                    "unix_path": "/run/motor-cortex/egress.sock",
                }
            args += ["--remount-ro", "/", "--chdir", "/workspace"]
            args += ["/usr/bin/python3", "-I", "-S", "-B", "-c", SUPERVISOR_BOOT, "serve"]
            check_bwrap_args(args)

            log_path = runtime_dir / "supervisor.log"
            log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                launcher = _Launcher(staged, host_uid, host_gid).run if lease is not None else None
                proc = _spawner.call(
                    lambda: subprocess.Popen(
                        args,
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=log_fd,
                        env={},
                        cwd="/",
                        close_fds=True,
                        pass_fds=fds,
                        start_new_session=True,
                        preexec_fn=launcher,  # noqa: PLW1509 - mount ns + uid drop before exec
                    )
                )
            except (OSError, subprocess.SubprocessError) as exc:
                raise SandboxError(f"cannot start bwrap: {exc}") from exc
            finally:
                os.close(log_fd)
            for fd in fds:
                os.close(fd)
            fds.clear()
            session = BwrapSession(
                spec=spec,
                session_id=session_id,
                proc=proc,
                runtime_dir=runtime_dir,
                lease=lease,
                proxy=proxy,
                log_path=log_path,
                sandbox_uids=self._uids,
            )
        except BaseException:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            if proc is not None:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            if proxy is not None:
                with contextlib.suppress(Exception):
                    proxy.close()
            shutil.rmtree(runtime_dir, ignore_errors=True)
            if lease is not None:
                lease.release()
            raise
        config = {
            "limits": {
                "memory_bytes": limits.memory_bytes,
                "max_processes": limits.max_processes,
                "file_size_bytes": limits.file_size_bytes,
                "open_files": limits.open_files,
                "cpu_seconds": limits.cpu_seconds,
                "output_bytes": limits.output_bytes,
                "workspace_bytes": limits.workspace_bytes,
                "default_timeout_s": limits.default_timeout_s,
            },
            "env": env,
            "workspace": "/workspace",
            "sweep": True,
            "bridge": bridge,
        }
        try:
            session.handshake(config)
        except BaseException:
            session.close()
            raise
        return session

    # ------------------------------------------------------------------ building blocks

    @staticmethod
    def _environment(spec: SessionSpec) -> dict[str, str]:
        env = {
            "PATH": DEFAULT_PATH,
            "HOME": "/workspace",
            "LANG": "C.UTF-8",
            "TMPDIR": "/tmp",
        }
        env.update(spec.environment)
        for name in ("NO_PROXY", "no_proxy", *PROXY_VARS):
            env.pop(name, None)
        if spec.network.enabled:
            env.update(dict.fromkeys(PROXY_VARS, PROXY_URL))
        return env

    @staticmethod
    def _namespace_args() -> list[str]:
        return [
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            # the supervisor itself is PID 1: non-dumpable (so no command can open its
            # /proc/1/mem or environ) and immune to signals sent from inside the namespace
            "--as-pid-1",
            "--new-session",
            "--clearenv",
            "--uid",
            str(SANDBOX_UID),
            "--gid",
            str(SANDBOX_GID),
            "--hostname",
            "sandbox",
            "--cap-drop",
            "ALL",
        ]

    @staticmethod
    def _filesystem_args() -> list[str]:
        args: list[str] = []
        for name in _MERGED_USR:
            host = Path("/") / name
            if host.is_symlink():
                args += ["--symlink", os.readlink(host), f"/{name}"]
            elif host.is_dir():
                args += ["--ro-bind", str(host), f"/{name}"]
        for path in _SYSTEM_RO_BINDS:
            args += ["--ro-bind-try", path, path]
        args += ["--proc", "/proc", "--dev", "/dev"]
        args += ["--size", str(SHM_BYTES), "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
        return args

    def _start_proxy(self, spec: SessionSpec, session_id: str, socket_path: Path, uid: int) -> Any:
        try:
            from sandbox.egress import EgressProxy
        except ImportError as exc:
            raise SandboxError(f"the egress proxy is not available: {exc}") from exc
        try:
            proxy: Any = EgressProxy(
                session_id=session_id,
                policy=spec.network,
                socket_path=socket_path,
                resolver=self._egress_resolver,
                on_connection=spec.on_connection,
                owner_uid=uid,
            )
            start = getattr(proxy, "start", None)
            if callable(start):
                start()
        except SandboxError:
            raise
        except Exception as exc:
            raise SandboxError(f"the egress proxy could not start: {exc}") from exc
        return proxy


__all__ = ["BwrapBackend", "BwrapSession", "ProtocolError"]
