"""The in-sandbox supervisor: runs tool commands with per-call limits and a seccomp filter.

Standard library + ctypes only: it runs inside the sandbox under ``/usr/bin/python3`` from the
read-only mount ``/opt/motor-cortex`` (``python3 -I -B /opt/motor-cortex/supervisor.py MODE``),
next to ``seccomp.py`` and ``bridge.py``. It is also importable on the host as
``sandbox.inside.supervisor`` (the host uses the framing helpers).

It refuses to run as uid 0. On start (serve and run-one) it makes itself non-dumpable and sets
no_new_privs; in serve mode it also installs its own seccomp filter (the command profile minus
the AF_UNIX refusal, which the bridge needs, and minus the rlimit refusal, with which it hands
commands their limits) before any thread exists, then starts a spawner thread that adds the
command profile for itself and everything it starts. Under bwrap it is the PID namespace's PID 1
(``--as-pid-1``): it reaps every orphan, and signals sent from inside cannot kill it; commands
can neither read its memory (non-dumpable) nor trace it or change its limits (seccomp).

Modes
=====

``serve`` — resident. Frames on stdin/stdout; each frame is a 4-byte big-endian unsigned length
followed by that many bytes of UTF-8 JSON (one object). The supervisor's own diagnostics go to
stderr. Conversation:

1. host → ``{"op": "configure", "config": CONFIG}``
   supervisor → ``{"op": "ready", "pid": int, "uid": int, "bridge": bool}``
   or ``{"op": "error", "code": "sandbox_error", "message": str}`` (then it exits 1).
2. host → ``{"op": "exec", ...EXEC}`` → supervisor → ``{"op": "result", ...RESULT}``; repeat.
   One call at a time: the host sends the next request only after the result arrived.
3. host → ``{"op": "ping"}`` → ``{"op": "pong"}``.
4. host → ``{"op": "shutdown"}`` → ``{"op": "bye"}``, then exit 0. EOF on stdin also ends it.
   A malformed frame gets ``{"op": "error", "code": "invalid_args", "message": str}``.

``run-one`` — one call, one process. The request is a JSON object ``{"config": CONFIG, "exec":
EXEC}`` read from stdin until EOF, or given base64-encoded as ``run-one --request-b64 B64``. The
RESULT object (with ``"op": "result"``) is written to stdout as one line of JSON; exit status 0
when a RESULT was produced (whatever the command's own status), 2 on a malformed request. The
egress bridge is never started in this mode (a resident ``serve`` owns it).

CONFIG (every key optional)::

    {"limits": {"memory_bytes": int, "max_processes": int, "file_size_bytes": int,
                "open_files": int, "cpu_seconds": int, "output_bytes": int,
                "workspace_bytes": int, "default_timeout_s": float},
     "env": {str: str},            # base environment of every command
     "workspace": "/workspace",    # the directory whose disk use `workspace_bytes` caps
     "sweep": true,                # after every call, SIGKILL every process this uid may signal
                                   # (kill(-1)): stragglers, setsid'd daemons, double forks
     "bridge": null | {"listen_host": "127.0.0.1", "listen_port": 3128,
                       "unix_path": "/run/motor-cortex/egress.sock"}}   # serve mode only

EXEC::

    {"argv": [str, ...], "stdin_b64": str, "timeout_s": float | null, "env": {str: str},
     "cwd": "/workspace", "output_limit": int | null}

RESULT::

    {"op": "result", "exit_code": int | null, "signal": int | null,
     "stdout_b64": str, "stderr_b64": str, "duration_ms": int, "timed_out": bool,
     "truncated": bool, "oom": bool, "workspace_exceeded": bool,
     "error": null | {"code": "not_found" | "denied" | "invalid_args" | "sandbox_error",
                      "message": str}}

What each command gets: its own session and process group; rlimits AS (memory_bytes), NPROC
(max_processes — counted per uid in the sandbox's user namespace, so the supervisor counts too),
FSIZE (file_size_bytes, lowered to what is left of workspace_bytes when the call starts), NOFILE,
CPU (SIGXCPU at cpu_seconds, SIGKILL one second later), CORE=0; no_new_privs and
the seccomp filter of ``seccomp.py`` (no AF_UNIX/AF_NETLINK/AF_PACKET/AF_VSOCK sockets, no
io_uring, ptrace, keyctl, mount, namespaces, bpf, no change of any rlimit, ...). In serve mode a
command normally starts by vfork + exec from the spawner thread and inherits its limits (see
``Runner``): a warm call costs about one plain fork/exec. The file operations of tools.py are
answered by a file server, a forked child of the supervisor under the same limits and filter
that never execs (see ``Runner``): a warm file call costs about a pipe round trip. The environment ``config.env`` +
``exec.env`` and nothing else. stdout and stderr are each kept up to the output limit
(``exec.output_limit`` or ``limits.output_bytes``, at most ``MAX_OUTPUT_BYTES``); the rest is read and discarded, and
``truncated`` is set. On the wall-clock deadline every process is SIGKILLed and ``timed_out`` is
set. While a command runs, the workspace's allocated size (and entry count, at most
``MAX_WORKSPACE_ENTRIES``) is measured every few tens of milliseconds and at the end; going over
``workspace_bytes`` kills the call and sets ``workspace_exceeded``. ``oom`` is set when the
command died of SIGKILL that nobody here sent (a kernel or cgroup OOM kill) or its stderr shows
an allocation failure under the RLIMIT_AS cap.
"""

from __future__ import annotations

import _thread
import binascii
import errno
import fcntl
import gc
import marshal
import os
import resource
import select
import struct
import sys
import termios
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: importing typing would add to every sandbox start
    import subprocess
    from collections.abc import Callable, Mapping
    from types import ModuleType
    from typing import Any, BinaryIO

# Every start of a sandbox pays for what this module imports, so it imports modules written in
# C and little else (8 ms of imports before, 2.3 ms now): `json`, `threading`, `signal`,
# `selectors` and `array` would bring `re`, `enum`, `functools` and `collections` along. JSON is
# read and written with `_json`, the C half of `json` (see `json_loads`), threads are started
# with `_thread`, and the call loops wait with `select.epoll` (`_Poller`). `subprocess`, which
# brings all of them, is imported when the first command starts (`Runner._start`): a session
# that only reads and writes files through the file server never needs it.

#: SIGKILL on Linux (signal.SIGKILL; importing signal would bring enum)
SIGKILL = 9

#: the biggest frame either side accepts (64 MiB)
MAX_FRAME_BYTES = 64 * 1024 * 1024
#: the most output kept per stream, whatever a request asks for (16 MiB)
MAX_OUTPUT_BYTES = 16 * 1024 * 1024
#: a workspace with more entries than this counts as over quota (inode exhaustion is disk abuse)
MAX_WORKSPACE_ENTRIES = 100_000
#: how long to wait for killed processes to disappear after a call (seconds)
SWEEP_GRACE_S = 2.0

_HEADER = struct.Struct(">I")
_READ_CHUNK = 1024 * 1024
_PR_SET_DUMPABLE = 4
_PR_SET_NO_NEW_PRIVS = 38
_OOM_MARKERS = (b"MemoryError", b"Cannot allocate memory", b"std::bad_alloc", b"out of memory")


class ProtocolError(Exception):
    """A frame or request that does not follow the protocol."""


# ---------------------------------------------------------------------------- JSON


class _DecodeContext:
    """What `_json.make_scanner` reads from a JSONDecoder: json.loads's defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {
        "-Infinity": float("-inf"),
        "Infinity": float("inf"),
        "NaN": float("nan"),
    }.__getitem__


def _not_serializable(obj: object) -> Any:
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


try:
    import _json

    # it reads the attributes of a JSONDecoder from whatever it is given
    _context: Any = _DecodeContext
    _scan_once: Callable[[str, int], tuple[Any, int]] | None = _json.make_scanner(_context)
except (ImportError, AttributeError):  # an interpreter without json's C half
    _scan_once = None
#: what JSON counts as white space around a value
_JSON_SPACE = " \t\n\r"


def json_loads(data: bytes | str) -> Any:
    """json.loads(data) for UTF-8 `data`: the same parser (json's C scanner), without
    importing json."""
    if _scan_once is None:
        import json

        return json.loads(data)
    text = data.decode("utf-8", "surrogatepass") if isinstance(data, bytes) else data
    start = len(text) - len(text.lstrip(_JSON_SPACE))
    try:
        value, end = _scan_once(text, start)
    except StopIteration as exc:
        from json.decoder import JSONDecodeError  # json.loads's errors, word for word

        raise JSONDecodeError("Expecting value", text, exc.value) from None
    rest = text[end:]
    if rest.strip(_JSON_SPACE):
        from json.decoder import JSONDecodeError

        raise JSONDecodeError("Extra data", text, end + len(rest) - len(rest.lstrip(_JSON_SPACE)))
    return value


def json_dumps(obj: object, *, compact: bool = True) -> str:
    """json.dumps(obj, separators=(",", ":")), or json.dumps(obj) when not `compact`: the same
    encoder (json's C encoder), without importing json."""
    item_separator, key_separator = (",", ":") if compact else (", ", ": ")
    if _scan_once is None:
        import json

        return json.dumps(obj, separators=(item_separator, key_separator))
    # (markers, default, encoder, indent, key and item separators, sort_keys, skipkeys, allow_nan)
    encode = _json.make_encoder(
        {},
        _not_serializable,
        _json.encode_basestring_ascii,
        None,
        key_separator,
        item_separator,
        False,
        False,
        True,
    )
    return "".join(encode(obj, 0))


def _json_dumps_spaced(obj: object) -> str:
    """json.dumps(obj) with its default separators (what tools.py prints when run alone)."""
    return json_dumps(obj, compact=False)


# ---------------------------------------------------------------------------- framing


def encode_frame(message: Mapping[str, Any]) -> bytes:
    body = json_dumps(message).encode()
    if len(body) > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {len(body)} bytes exceeds {MAX_FRAME_BYTES} bytes")
    return _HEADER.pack(len(body)) + body


def _read_exact(stream: BinaryIO, size: int) -> bytes | None:
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        chunk = stream.read(remaining)
        if not chunk:
            if chunks:
                raise ProtocolError("stream ended inside a frame")
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_frame(stream: BinaryIO) -> dict[str, Any] | None:
    """Read one frame; None on a clean EOF before a header."""
    header = _read_exact(stream, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {size} bytes exceeds {MAX_FRAME_BYTES} bytes")
    body = _read_exact(stream, size) if size else b""
    if body is None:
        raise ProtocolError("stream ended inside a frame")
    try:
        message = json_loads(body)
    except ValueError as exc:
        raise ProtocolError(f"frame is not JSON: {exc}") from exc
    if not isinstance(message, dict):
        raise ProtocolError("frame must hold a JSON object")
    return message


def write_frame(stream: BinaryIO, message: Mapping[str, Any]) -> None:
    stream.write(encode_frame(message))
    stream.flush()


# ---------------------------------------------------------------------------- config


class Config:
    """The session's settings (plain classes, not dataclasses: importing dataclasses would add
    milliseconds to every sandbox start)."""

    def __init__(self) -> None:
        self.memory_bytes = 512 * 1024 * 1024
        self.max_processes = 64
        self.file_size_bytes = 64 * 1024 * 1024
        self.open_files = 256
        self.cpu_seconds = 600
        self.output_bytes = 32 * 1024
        self.workspace_bytes = 256 * 1024 * 1024
        self.default_timeout_s = 60.0
        self.env: dict[str, str] = {}
        self.workspace = "/workspace"
        self.sweep = True
        self.bridge: dict[str, Any] | None = None


class ExecSpec:
    def __init__(
        self,
        *,
        argv: list[str],
        stdin: bytes,
        timeout_s: float,
        env: dict[str, str],
        cwd: str,
        output_limit: int,
    ) -> None:
        self.argv = argv
        self.stdin = stdin
        self.timeout_s = timeout_s
        self.env = env
        self.cwd = cwd
        self.output_limit = output_limit


def _str_map(value: object, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProtocolError(f"{what} must be an object of strings")
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise ProtocolError(f"{what} must map strings to strings")
        if not key or "=" in key or "\0" in key or "\0" in item:
            raise ProtocolError(f"{what} has an invalid variable name or a NUL byte: {key!r}")
        out[key] = item
    return out


def _int(value: object, what: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ProtocolError(f"{what} must be an integer >= {minimum}")
    return value


def parse_config(raw: object) -> Config:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ProtocolError("config must be an object")
    config = Config()
    limits = raw.get("limits") or {}
    if not isinstance(limits, dict):
        raise ProtocolError("config.limits must be an object")
    for name in (
        "memory_bytes",
        "max_processes",
        "file_size_bytes",
        "open_files",
        "cpu_seconds",
        "output_bytes",
        "workspace_bytes",
    ):
        if name in limits:
            setattr(config, name, _int(limits[name], f"limits.{name}"))
    if "default_timeout_s" in limits:
        timeout = limits["default_timeout_s"]
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ProtocolError("limits.default_timeout_s must be a positive number")
        config.default_timeout_s = float(timeout)
    config.env = _str_map(raw.get("env"), "config.env")
    workspace = raw.get("workspace", config.workspace)
    if not isinstance(workspace, str) or not workspace.startswith("/"):
        raise ProtocolError("config.workspace must be an absolute path")
    config.workspace = workspace
    config.sweep = bool(raw.get("sweep", True))
    bridge = raw.get("bridge")
    if bridge is not None:
        if not isinstance(bridge, dict) or not isinstance(bridge.get("unix_path"), str):
            raise ProtocolError("config.bridge must be an object with unix_path")
        config.bridge = dict(bridge)
    return config


def parse_exec(raw: Mapping[str, Any], config: Config) -> ExecSpec:
    argv = raw.get("argv")
    if (
        not isinstance(argv, list)
        or not argv
        or not all(isinstance(a, str) and "\0" not in a for a in argv)
        or not argv[0]
    ):
        raise ProtocolError("argv must be a non-empty list of strings without NUL bytes")
    try:
        # what base64.b64decode(..., validate=True) does, without importing base64
        stdin = binascii.a2b_base64(raw.get("stdin_b64") or "", strict_mode=True)
    except (ValueError, TypeError) as exc:
        raise ProtocolError(f"stdin_b64 is not base64: {exc}") from exc
    timeout = raw.get("timeout_s")
    if timeout is None:
        timeout = config.default_timeout_s
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise ProtocolError("timeout_s must be a positive number")
    cwd = raw.get("cwd") or config.workspace
    if not isinstance(cwd, str) or not cwd.startswith("/") or "\0" in cwd:
        raise ProtocolError("cwd must be an absolute path")
    limit = raw.get("output_limit")
    output_limit = config.output_bytes if limit is None else _int(limit, "output_limit")
    output_limit = min(output_limit, MAX_OUTPUT_BYTES)
    env = dict(config.env)
    env.update(_str_map(raw.get("env"), "env"))
    return ExecSpec(
        argv=list(argv),
        stdin=stdin,
        timeout_s=float(timeout),
        env=env,
        cwd=cwd,
        output_limit=output_limit,
    )


# ---------------------------------------------------------------------------- process control


def _load_sibling(name: str) -> ModuleType:
    """Import a module that sits next to this file, both on the host (as a package member)
    and inside the sandbox (where `BOOT` put this directory on sys.path, or where this file runs
    as a script under ``python3 -I``, so its directory is not on sys.path)."""
    if __package__:
        import importlib

        return importlib.import_module(f"{__package__}.{name}")
    directory = os.path.dirname(os.path.abspath(__file__))
    if sys.path and sys.path[0] == directory:
        # started by BOOT: a plain import finds it first there (importlib.util is not needed)
        module: ModuleType = __import__(name)
        return module
    import importlib.util

    path = os.path.join(directory, f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"motor_cortex_inside_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _prctl(option: int, value: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def harden_self() -> None:
    """Make the supervisor unreadable and untraceable by the commands it runs (same uid)."""
    _prctl(_PR_SET_DUMPABLE, 0)
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)


#: what a command gets, in the order applied: (resource, soft, hard) for each limit that is on
LimitTargets = list[tuple[int, int, int]]

_INF = resource.RLIM_INFINITY


def _at_most(value: int, ceiling: int) -> bool:
    """value <= ceiling for rlimit values, where RLIM_INFINITY is the largest."""
    if ceiling == _INF:
        return True
    return value != _INF and value <= ceiling


def _lower(a: int, b: int) -> int:
    return a if _at_most(a, b) else b


def limit_targets(config: Config, file_size: int | None) -> LimitTargets:
    """The rlimits of the next command (`file_size`: its RLIMIT_FSIZE, None for none)."""
    targets: LimitTargets = []
    if config.memory_bytes:
        targets.append((resource.RLIMIT_AS, config.memory_bytes, config.memory_bytes))
    if config.max_processes:
        targets.append((resource.RLIMIT_NPROC, config.max_processes, config.max_processes))
    if file_size is not None:
        targets.append((resource.RLIMIT_FSIZE, file_size, file_size))
    if config.open_files:
        targets.append((resource.RLIMIT_NOFILE, config.open_files, config.open_files))
    if config.cpu_seconds:
        # SIGXCPU at the soft limit, SIGKILL one second later
        targets.append((resource.RLIMIT_CPU, config.cpu_seconds, config.cpu_seconds + 1))
    targets.append((resource.RLIMIT_CORE, 0, 0))
    return targets


def _rlimit_changes_refused() -> bool:
    """True when this thread may not change rlimits at all (it runs under the command filter,
    e.g. run-one started as a command): a no-op setrlimit, which the kernel always allows, fails."""
    try:
        resource.setrlimit(resource.RLIMIT_CORE, resource.getrlimit(resource.RLIMIT_CORE))
    except (ValueError, PermissionError):
        # CPython reports EPERM from setrlimit as ValueError("not allowed to raise ...")
        return True
    return False


class _ChildSetup:
    """What runs between fork and exec on the slow path (a full fork): rlimits, then no_new_privs
    and the seccomp filter. Only rlimits and prctl there — everything that allocates is prepared
    up front."""

    def __init__(self) -> None:
        seccomp = _load_sibling("seccomp")
        self._filter = seccomp.prepare()
        #: the limits to set in the child; chosen per call by `prepare`
        self.targets: LimitTargets = []

    def prepare(self, targets: LimitTargets) -> None:
        """Choose what the child must set. A limit this process already holds at least as tight
        is skipped (it is inherited); so is a soft limit at least as tight when this process may
        not change rlimits at all (then nothing under it can raise one either). Anything else is
        set in the child, and a refusal there fails the call."""
        refused = _rlimit_changes_refused()
        needed: LimitTargets = []
        for res, soft, hard in targets:
            cur_soft, cur_hard = resource.getrlimit(res)
            if _at_most(cur_soft, soft) and (refused or _at_most(cur_hard, hard)):
                continue
            needed.append((res, soft, hard))
        self.targets = needed

    def __call__(self) -> None:
        for res, soft, hard in self.targets:
            resource.setrlimit(res, (soft, hard))
        self._filter.install()


class _Spawner:
    """A thread under the command filter that starts the commands (the fast path).

    seccomp filters belong to threads, and a child inherits the filters of the thread that forks
    it. This thread adds the command profile (no AF_UNIX, no rlimit changes, ...) on top of the
    supervisor's own, so what it starts is filtered from its first instruction without any code
    between fork and exec — CPython then uses vfork() instead of a full fork(). The main thread
    keeps the supervisor profile: it may set the limits the commands inherit, and the egress
    bridge's threads may reach the host's unix socket."""

    def __init__(self) -> None:
        command_filter = _load_sibling("seccomp").prepare()
        self._go = _thread.allocate_lock()
        self._go.acquire()
        self._done = _thread.allocate_lock()
        self._done.acquire()
        self._job: Any = None
        self._value: Any = None
        self._error: BaseException | None = None
        # a bare thread (threading.Thread less its bookkeeping): it lives as long as the process
        _thread.start_new_thread(self._loop, (command_filter,))
        self._done.acquire()
        if self._error is not None:
            raise RuntimeError(f"the command filter could not be installed: {self._error}")

    def _loop(self, command_filter: Any) -> None:
        try:
            command_filter.install()
        except BaseException as exc:  # noqa: BLE001 - reported by __init__
            self._error = exc
            self._done.release()
            return
        self._done.release()
        while True:
            self._go.acquire()
            try:
                self._value, self._error = self._job(), None
            except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
                self._value, self._error = None, exc
            self._done.release()

    def call(self, job: Any) -> Any:
        """Run `job` on the spawner thread and return its value (or raise its exception)."""
        self._job = job
        self._go.release()
        self._done.acquire()
        value, error = self._value, self._error
        self._job = self._value = self._error = None
        if error is not None:
            raise error
        return value


class _SlowPath(Exception):
    """The fast path cannot start this command; nothing was started."""


class _StartFailed(Exception):
    """The command's limits or seccomp filter could not be applied (subprocess's
    SubprocessError, raised as this so that catching it needs no import of subprocess)."""


#: errno values of a fork()/pipe() that failed under the inherited limits (nothing ran)
_RETRY_ERRNOS = frozenset({errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE})
#: address space the supervisor keeps free when it holds a command's RLIMIT_AS (bytes)
_AS_HEADROOM = 32 * 1024 * 1024


def _own_address_space() -> int:
    with open("/proc/self/statm", "rb") as fh:
        return int(fh.read().split()[0]) * resource.getpagesize()


_READ = select.EPOLLIN
_WRITE = select.EPOLLOUT


class _Key:
    __slots__ = ("fd", "data")

    def __init__(self, fd: int, data: str) -> None:
        self.fd = fd
        self.data = data


class _Poller:
    """What the call loops use of selectors.EpollSelector (the default selector on Linux), on
    select.epoll directly: importing selectors would bring collections along."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._keys: dict[int, _Key] = {}

    def register(self, fd: int, events: int, data: str) -> None:
        self._epoll.register(fd, events)
        self._keys[fd] = _Key(fd, data)

    def unregister(self, fd: int) -> None:
        del self._keys[fd]
        self._epoll.unregister(fd)

    def select(self, timeout: float) -> list[tuple[_Key, int]]:
        """The registered descriptors with an event (hang-ups and errors included), waiting at
        most `timeout` seconds, rounded up to a millisecond as selectors does (a shorter wait
        would return at once and make the caller poll)."""
        timeout = 0.0 if timeout <= 0 else -(-timeout * 1e3 // 1) * 1e-3
        try:
            events = self._epoll.poll(timeout, max(len(self._keys), 1))
        except InterruptedError:
            return []
        return [(self._keys[fd], event) for fd, event in events if fd in self._keys]

    def close(self) -> None:
        self._epoll.close()


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


def _protected_pids() -> set[int]:
    """This process, init, and this process's ancestors inside the namespace."""
    protected = {1, os.getpid()}
    pid = os.getppid()
    while pid > 1 and pid not in protected:
        protected.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                stat = fh.read()
            pid = int(stat.rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return protected


def _live_foreign_pids(protected: set[int], uid: int) -> list[int]:
    found: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid in protected:
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            with open(f"/proc/{pid}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X"):
            found.append(pid)
    return found


def _own_children() -> list[int]:
    children: list[int] = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return children
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children") as fh:
                children.extend(int(p) for p in fh.read().split())
        except (OSError, ValueError):
            continue
    return children


def reap_orphans(keep: int | None = None) -> None:
    """Reap exited children other than `keep`. As the namespace's PID 1 the supervisor inherits
    every orphan, and a zombie nobody reaps would hold a process slot (RLIMIT_NPROC) forever."""
    for pid in _own_children():
        if pid == keep:
            continue
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue


def sweep_processes(keep: int | None = None) -> bool:
    """SIGKILL every process this uid may signal except this one, init and our ancestors, reap
    them (all but `keep`, whose status the caller collects) and wait, bounded, until none is left.
    True when the namespace is clean."""
    return _sweep(keep)[0]


def _sweep(keep: int | None) -> tuple[bool, bool]:
    """sweep_processes(); also says whether there was nothing at all to kill or reap."""
    uid = os.getuid()
    if uid == 0 or os.geteuid() == 0:
        # as root (this code used outside a sandbox) "every process this uid may signal" is
        # every process of the machine
        raise PermissionError("refusing to sweep processes as root")
    protected = _protected_pids()
    deadline = time.monotonic() + SWEEP_GRACE_S
    while True:
        ancestors_only = protected == {1, os.getpid()}
        if ancestors_only:
            # kill(-1) reaches every process we may signal but ourselves and init; it is the only
            # way to catch a fork bomb that keeps spawning while we walk /proc.
            try:
                os.kill(-1, SIGKILL)
            except ProcessLookupError:
                # nothing at all was left to signal (the common case; an unreaped zombie would
                # count): neither a /proc walk nor reaping is needed
                return True, True
            except OSError:
                pass
        reap_orphans(keep)
        leftovers = _live_foreign_pids(protected, uid)
        if not leftovers:
            return True, False
        for pid in leftovers:
            try:
                os.kill(pid, SIGKILL)
            except OSError:
                pass
        if time.monotonic() > deadline:
            return False, False
        time.sleep(0.005)


def _result(
    *,
    exit_code: int | None = None,
    sig: int | None = None,
    stdout: bytes = b"",
    stderr: bytes = b"",
    duration_ms: int = 0,
    timed_out: bool = False,
    truncated: bool = False,
    oom: bool = False,
    workspace_exceeded: bool = False,
    error: tuple[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "op": "result",
        "exit_code": exit_code,
        "signal": sig,
        "stdout_b64": binascii.b2a_base64(stdout, newline=False).decode(),
        "stderr_b64": binascii.b2a_base64(stderr, newline=False).decode(),
        "duration_ms": duration_ms,
        "timed_out": timed_out,
        "truncated": truncated,
        "oom": oom,
        "workspace_exceeded": workspace_exceeded,
        "error": None if error is None else {"code": error[0], "message": error[1]},
    }


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
            with open(f"/proc/{self.pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
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
        for fd in (self.requests, self.answers, self.errors):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.requests = self.answers = self.errors = -1
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
        os.environ.clear()
        os.environ.update(env)
        vars(tools)["WORKSPACE"] = env.get("MOTOR_WORKSPACE", "/workspace")
        answer = tools.respond(op, request, loads=json_loads, dumps=_json_dumps_spaced).encode()
        _write_all(1, _HEADER.pack(len(answer)) + answer)


class Runner:
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
        self, config: Config, *, inherit: bool = False, host_fd: int | None = None
    ) -> None:
        self.config = config
        #: the host's request stream (serve mode). The host sends nothing while a call runs, so
        #: the stream turning readable mid-call means it ended: the owner is gone, and the call
        #: and everything it started are killed instead of running on unobserved.
        self._host_fd = host_fd
        self._child_setup = _ChildSetup()
        self._spawner = _Spawner() if inherit else None
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
                # their patterns need `re`: imported here once, every later file server (a new
                # one follows each command) inherits it instead of importing it again
                import re  # noqa: F401
            try:
                server = self._file_server = self._start_file_server(targets)
            except OSError:
                return None
        # this call's soft limits, set from outside (the server may not change any limit)
        try:
            for res, soft, _hard in targets:
                if res == resource.RLIMIT_FSIZE:
                    hard = self._server_hard(res, _hard)
                    resource.prlimit(server.pid, res, (_lower(soft, hard), hard))
                elif res == resource.RLIMIT_CPU:
                    used = int(server.cpu_seconds()) + 1
                    hard = self._own[res][1]
                    resource.prlimit(server.pid, res, (_lower(used + soft, hard), hard))
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
        sel = _Poller()
        sel.register(server.answers, _READ, "answer")
        if self._host_fd is not None:
            sel.register(self._host_fd, _READ, "host")
        timed_out = quota_hit = truncated = False
        answer: bytes | None = None
        try:
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
                        sel.unregister(key.fd)
                        continue
                    chunk = os.read(server.answers, _READ_CHUNK)
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
                if gone:
                    break
        finally:
            sel.close()
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
        scan_interval = 0.05
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
                scan_interval = max(0.05, 4 * (time.monotonic() - scan_started))
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


# ---------------------------------------------------------------------------- modes


def _start_bridge(bridge: Mapping[str, Any]) -> None:
    """Start the egress bridge in a daemon thread and wait until it listens. (No probe
    connection: it would reach the host proxy and show up as a bogus connection report.)"""
    import threading  # the bridge imports it too

    module = _load_sibling("bridge")
    host = str(bridge.get("listen_host", "127.0.0.1"))
    port = int(bridge.get("listen_port", 3128))
    unix_path = str(bridge["unix_path"])
    listening = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            module.serve_bridge(host, port, unix_path, listening)
        except BaseException as exc:  # noqa: BLE001 - reported to the host below
            failure.append(exc)
            print(f"supervisor: egress bridge stopped: {exc!r}", file=sys.stderr, flush=True)
        finally:
            listening.set()

    thread = threading.Thread(target=run, name="egress-bridge", daemon=True)
    thread.start()
    if not listening.wait(5.0):
        raise RuntimeError(f"egress bridge is not listening on {host}:{port}")
    if failure:
        raise RuntimeError(f"egress bridge failed to start: {failure[0]!r}")


def _host_still_there(fd: int) -> bool:
    """Whether the host's stream, found readable mid-call, is still open (no EOF).

    Peeks without consuming, so a frame the host did send stays for the next read."""
    try:
        ready, _w, _x = select.select([fd], [], [], 0)
        if not ready:
            return True
        # a pipe cannot be peeked; FIONREAD says how many bytes wait (0 with readable = EOF)
        waiting = bytearray(4)  # a C int
        fcntl.ioctl(fd, termios.FIONREAD, waiting, True)
        return int.from_bytes(waiting, sys.byteorder, signed=True) > 0
    except OSError:
        return False


def _install_own_filter() -> None:
    seccomp = _load_sibling("seccomp")
    seccomp.prepare(allow_unix_sockets=True, allow_rlimit_changes=True).install()


def serve(stdin: BinaryIO, stdout: BinaryIO) -> int:
    try:
        first = read_frame(stdin)
    except ProtocolError as exc:
        write_frame(stdout, {"op": "error", "code": "sandbox_error", "message": str(exc)})
        return 1
    if first is None:
        return 0
    try:
        if first.get("op") != "configure":
            raise ProtocolError("the first frame must be a configure frame")
        config = parse_config(first.get("config"))
        harden_self()
        # The supervisor's own filter goes on before any thread exists, so every thread
        # inherits it; it allows AF_UNIX, which the bridge needs to reach the host, and rlimit
        # changes, with which the main thread hands the commands their limits. The spawner
        # thread adds the command filter on top for itself and what it starts.
        _install_own_filter()
        runner = Runner(config, inherit=True, host_fd=stdin.fileno())
        if config.bridge is not None:
            _start_bridge(config.bridge)
    except Exception as exc:  # noqa: BLE001 - every set-up failure is reported, then we exit
        write_frame(stdout, {"op": "error", "code": "sandbox_error", "message": str(exc)})
        return 1
    write_frame(
        stdout,
        {"op": "ready", "pid": os.getpid(), "uid": os.getuid(), "bridge": bool(config.bridge)},
    )
    while True:
        try:
            message = read_frame(stdin)
        except ProtocolError as exc:
            write_frame(stdout, {"op": "error", "code": "invalid_args", "message": str(exc)})
            return 1
        if message is None:
            return 0
        op = message.get("op")
        if op == "exec":
            try:
                spec = parse_exec(message, config)
            except ProtocolError as exc:
                write_frame(stdout, {"op": "error", "code": "invalid_args", "message": str(exc)})
                continue
            write_frame(stdout, runner.run(spec))
        elif op == "ping":
            write_frame(stdout, {"op": "pong"})
        elif op == "shutdown":
            write_frame(stdout, {"op": "bye"})
            return 0
        else:
            write_frame(
                stdout, {"op": "error", "code": "invalid_args", "message": f"unknown op {op!r}"}
            )


def run_one(raw: bytes, stdout: BinaryIO) -> int:
    try:
        request = json_loads(raw)
        if not isinstance(request, dict) or not isinstance(request.get("exec"), dict):
            raise ProtocolError('the request must be {"config": {...}, "exec": {...}}')
        config = parse_config(request.get("config"))
        config.bridge = None
        spec = parse_exec(request["exec"], config)
    except (ValueError, ProtocolError) as exc:
        stdout.write(
            json_dumps({"op": "error", "code": "invalid_args", "message": str(exc)}).encode()
            + b"\n"
        )
        stdout.flush()
        return 2
    try:
        harden_self()
        runner = Runner(config)
        result = runner.run(spec)
    except Exception as exc:  # noqa: BLE001 - reported as a result, never run unconfined
        result = _result(error=("sandbox_error", f"supervisor failed: {exc}"))
    stdout.write(json_dumps(result).encode() + b"\n")
    stdout.flush()
    return 0


def main(argv: list[str]) -> int:
    if os.getuid() == 0:
        print("supervisor: refusing to run as uid 0", file=sys.stderr)
        return 3
    if len(argv) >= 1 and argv[0] == "serve":
        return serve(sys.stdin.buffer, sys.stdout.buffer)
    if len(argv) >= 1 and argv[0] == "run-one":
        if len(argv) == 3 and argv[1] == "--request-b64":
            try:
                raw = binascii.a2b_base64(argv[2], strict_mode=True)
            except ValueError as exc:
                print(f"supervisor: --request-b64 is not base64: {exc}", file=sys.stderr)
                return 2
        elif len(argv) == 1:
            raw = sys.stdin.buffer.read(MAX_FRAME_BYTES + 1)
        else:
            print("usage: supervisor.py run-one [--request-b64 B64]", file=sys.stderr)
            return 2
        return run_one(raw, sys.stdout.buffer)
    print("usage: supervisor.py serve | run-one [--request-b64 B64]", file=sys.stderr)
    return 2


def entry() -> int:
    """Run `main` on the command line's arguments (the script's entry point, also reached as
    ``python3 -I -S -B -c BOOT serve``, see `BOOT`)."""
    try:
        return main(sys.argv[1:])
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            return 0
        raise


#: ``python3 -I -S -B -c BOOT MODE`` starts the supervisor from /opt/motor-cortex as an imported
#: module, so its bytecode comes from __pycache__ (see `precompile`) instead of being compiled
#: anew at every sandbox start, as a script always is (-S: nothing of `site` is needed)
BOOT = (
    "import sys; sys.path.insert(0, '/opt/motor-cortex'); import supervisor; "
    "sys.exit(supervisor.entry())"
)
#: the modules of this directory that run inside a sandbox
INSIDE_MODULES = ("supervisor", "seccomp", "bridge", "tools")


def precompile(directory: str) -> None:
    """Write checked-hash bytecode of `INSIDE_MODULES` to `directory`/__pycache__ for this
    interpreter's cache tag, where an interpreter of the same version inside the sandbox finds
    it (the mount is read-only; -B keeps it from writing any). A checked-hash file is used only
    while the source's hash matches, so a stale one is never run. A file already up to date is
    left alone; anything that cannot be written is left to be compiled at start, as before."""
    import importlib.util
    import py_compile

    tag = sys.implementation.cache_tag
    if tag is None:
        return
    cache = os.path.join(directory, "__pycache__")
    for name in INSIDE_MODULES:
        source = os.path.join(directory, f"{name}.py")
        target = os.path.join(cache, f"{name}.{tag}.pyc")
        try:
            with open(source, "rb") as fh:
                digest = importlib.util.source_hash(fh.read())
            try:
                with open(target, "rb") as fh:
                    header = fh.read(16)
                if (
                    header[:4] == importlib.util.MAGIC_NUMBER
                    and header[4:8] == (3).to_bytes(4, "little")  # hash-based, checked
                    and header[8:16] == digest
                ):
                    continue
            except OSError:
                pass
            os.makedirs(cache, mode=0o755, exist_ok=True)
            py_compile.compile(
                source,
                cfile=target,
                doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
            )
            os.chmod(target, 0o644)
        except (OSError, py_compile.PyCompileError):
            continue


if __name__ == "__main__":
    sys.exit(entry())
