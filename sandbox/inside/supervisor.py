"""The in-sandbox supervisor: runs tool commands with per-call limits and a seccomp filter.

Standard library + ctypes only: it runs inside the sandbox under ``/usr/bin/python3`` from the
read-only mount ``/opt/motor-cortex`` (``python3 -I -S -B -c BOOT MODE``, or as a script:
``python3 -I -B /opt/motor-cortex/supervisor.py MODE``). This file holds the modes and the start;
the rest sits next to it, one job a module: ``protocol.py`` (the frames and the CONFIG, EXEC and
RESULT objects below), ``confine.py`` (its own hardening, a command's rlimits and filter, the
spawner thread), ``runner.py`` (running a command), ``fileserver.py`` (the file server),
``sweep.py`` (killing and reaping what a command leaves), ``poller.py`` (waiting on
descriptors), ``siblings.py`` (lazy imports), with ``seccomp.py``, ``bridge.py`` and
``tools.py``. The host imports them as ``sandbox.inside.*`` (`BOOT` and `precompile` from here,
the framing from ``protocol.py``).

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

0. optional, for a pooled sandbox that no run has adopted yet: host → ``{"op": "prepare",
   "config": CONFIG}`` (the limits the run will have; nothing of a run),
   supervisor → ``{"op": "prepared", "pid": int, "uid": int}`` once it has hardened itself and
   loaded what configuring and the first command need; it then waits for step 1.
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
                "workspace_bytes": int, "default_timeout_s": float,
                "quota_interval_s": float},   # seconds between workspace measurements
     "env": {str: str},            # base environment of every command
     "workspace": "/workspace",    # the directory whose disk use `workspace_bytes` caps
     "unix_pairs": false,          # commands may create socketpair(AF_UNIX) (seccomp.py)
     "sweep": true,                # after every call, SIGKILL every process this uid may signal
                                   # (kill(-1)): stragglers, setsid'd daemons, double forks
     "bridge": null | {"listen_host": "127.0.0.1", "listen_port": 3128,
                       "unix_path": "/run/motor-cortex/egress.sock"}}   # serve mode only

EXEC::

    {"argv": [str, ...], "stdin_b64": str, "timeout_s": float | null, "env": {str: str},
     "cwd": "/workspace", "output_limit": int | null,
     "resident": null | "browser", "resident_stop": bool}   # serve mode only, see resident.py

With ``resident`` the call goes to a helper that lives across calls (started from ``argv`` the
first time): ``stdin`` is handed to it as one frame and its one-frame answer is the RESULT's
stdout; past ``timeout_s`` the helper and its process tree are killed (``timed_out``).

RESULT::

    {"op": "result", "exit_code": int | null, "signal": int | null,
     "stdout_b64": str, "stderr_b64": str, "duration_ms": int, "timed_out": bool,
     "truncated": bool, "oom": bool, "workspace_exceeded": bool,
     "error": null | {"code": "not_found" | "denied" | "invalid_args" | "sandbox_error",
                      "message": str}}

What each command gets: its own session and process group; rlimits DATA (memory_bytes: what it
may write to), AS (memory_bytes plus room for reservations never written, see confine.py), NPROC
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
an allocation failure under the RLIMIT_DATA or RLIMIT_AS cap.
"""

from __future__ import annotations

import binascii
import errno
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: importing typing would add to every sandbox start
    from collections.abc import Mapping
    from typing import Any, BinaryIO


# Every start of a sandbox pays for what these modules import, so they import modules written in C
# and little else (8 ms of imports before, 2.3 ms after; each module of the supervisor's own adds
# about 0.1 ms more to load): `json`, `threading`, `signal`, `selectors` and `array` would bring
# `re`, `enum`, `functools` and `collections` along. JSON is read and written with `_json`, the C
# half of `json` (see `json_loads`), threads are started with `_thread`, and the call loops wait
# with `select.epoll` (`_Poller`). `subprocess`, which brings all of them, is imported when the
# first command starts (`Runner._start`): a session that only reads and writes files through the
# file server never needs it.

if not __package__ and sys.path[:1] != [os.path.dirname(os.path.abspath(__file__))]:
    # run as a script (``python3 -I -B supervisor.py MODE``): isolated mode leaves this
    # directory off sys.path. It goes first, as BOOT puts it, so that no module of the same
    # name elsewhere on the path (the system's dist-packages) stands in for one of ours.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

if TYPE_CHECKING or __package__:
    from .confine import harden_self
    from .protocol import (
        MAX_FRAME_BYTES,
        Config,
        ProtocolError,
        _result,
        json_dumps,
        json_loads,
        parse_config,
        parse_exec,
        read_frame,
        write_frame,
    )
    from .runner import Runner
    from .siblings import _load_sibling
else:  # inside the sandbox, where this directory is on sys.path (see above)
    from confine import harden_self
    from protocol import (
        MAX_FRAME_BYTES,
        ProtocolError,
        _result,
        json_dumps,
        json_loads,
        parse_config,
        parse_exec,
        read_frame,
        write_frame,
    )
    from runner import Runner
    from siblings import _load_sibling


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


def _install_own_filter() -> None:
    seccomp = _load_sibling("seccomp")
    seccomp.prepare(allow_unix_sockets=True, allow_rlimit_changes=True).install()


def _harden() -> None:
    harden_self()
    # The supervisor's own filter goes on before any thread exists, so every thread inherits
    # it; it allows AF_UNIX, which the bridge needs to reach the host, and rlimit changes, with
    # which the main thread hands the commands their limits. The spawner thread adds the
    # command filter on top for itself and what it starts.
    _install_own_filter()


def _prepare(host_fd: int, config: Config) -> Runner:
    """What a pooled sandbox does before any run adopts it: harden itself, load what the
    configure frame and the first call would otherwise load while a run waits (tools.py among
    it, for the file server), and, under the limits of `config` (those its run will have), run
    one command (`true`) in the still empty slot directory. Returns that Runner, whose spawner
    thread the run takes over (`_runner_for`). No file server is left running: it would cost a
    process per spare and be stopped again by a run whose first call is a command."""
    _harden()
    import threading  # noqa: F401 - the bridge's

    for name in ("resident", "bridge", "seccomp", "tools", "tool_search"):
        _load_sibling(name)
    _load_sibling("seccomp").prepare(allow_unix_pairs=True)
    warm = Runner(config, inherit=True, host_fd=host_fd)
    warm.run(parse_exec({"argv": ["/usr/bin/true"], "timeout_s": 10.0}, config))
    return warm


def _limits(config: Config) -> tuple[object, ...]:
    return (
        config.memory_bytes,
        config.max_processes,
        config.file_size_bytes,
        config.open_files,
        config.cpu_seconds,
        config.output_bytes,
        config.workspace_bytes,
        config.default_timeout_s,
        config.quota_interval_s,
        config.workspace,
        config.sweep,
        config.unix_pairs,
    )


def _runner_for(config: Config, warm: Runner | None, host_fd: int) -> Runner:
    """The Runner of a configured sandbox: a pooled one's warm Runner (its spawner thread
    already running) when `config` has the limits it was prepared with, now
    running with the run's environment; else a new one (on the warm spawner thread when it has
    the filter `config` asks for)."""
    if warm is not None and _limits(warm.config) == _limits(config):
        warm.config = config
        return warm
    spawner = None
    if warm is not None:
        warm.stop_file_server()
        if not config.unix_pairs and not warm.config.unix_pairs:
            spawner = warm._spawner
    return Runner(config, inherit=True, host_fd=host_fd, spawner=spawner)


def _configure(frame: Mapping[str, Any], prepared: Runner | None, host_fd: int) -> Runner:
    """The Runner of the session a configure `frame` sets up, cold or pooled alike: the
    supervisor hardened (a pooled one, `prepared`, already is) and its Runner (`_runner_for`:
    the prepared one taken over when the limits match), the egress bridge started when the
    configuration has one. Raises on anything it cannot set up."""
    if frame.get("op") != "configure":
        raise ProtocolError("the first frame must be a configure frame")
    config = parse_config(frame.get("config"))
    if prepared is None:
        _harden()
    runner = _runner_for(config, prepared, host_fd)
    if config.bridge is not None:
        _start_bridge(config.bridge)
    return runner


def _setup_failed(stdout: BinaryIO, exc: Exception) -> int:
    write_frame(stdout, {"op": "error", "code": "sandbox_error", "message": str(exc)})
    return 1


def serve(stdin: BinaryIO, stdout: BinaryIO) -> int:
    host_fd = stdin.fileno()
    prepared: Runner | None = None
    while True:
        try:
            first = read_frame(stdin)
        except ProtocolError as exc:
            return _setup_failed(stdout, exc)
        if first is None:
            return 0
        if prepared is not None or first.get("op") != "prepare":
            break
        # a pooled sandbox: everything that does not depend on the run, now; the configure
        # frame comes when a run adopts it (which may be much later, or never)
        try:
            prepared = _prepare(host_fd, parse_config(first.get("config")))
        except Exception as exc:  # noqa: BLE001 - reported, then we exit
            return _setup_failed(stdout, exc)
        write_frame(stdout, {"op": "prepared", "pid": os.getpid(), "uid": os.getuid()})
    try:
        runner = _configure(first, prepared, host_fd)
    except Exception as exc:  # noqa: BLE001 - every set-up failure is reported, then we exit
        return _setup_failed(stdout, exc)
    config = runner.config
    config_processes = config.max_processes
    # loaded with the first resident call: most sessions never make one
    residents: Any = None
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
            if spec.resident is not None:
                # a resident never meets the file server (see runner.py)
                runner.stop_file_server()
                if residents is None:
                    residents = _load_sibling("resident").Residents(host_fd=host_fd)
                write_frame(stdout, residents.call(spec, spec.resident))
            else:
                allowance = residents.process_allowance() if residents is not None else 0
                runner.config.max_processes = (
                    config_processes + allowance if config_processes else 0
                )
                write_frame(stdout, runner.run(spec))
        elif op == "ping":
            write_frame(stdout, {"op": "pong"})
        elif op == "shutdown":
            if residents is not None:
                residents.stop_all()
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
INSIDE_MODULES = (
    "supervisor",
    "protocol",
    "confine",
    "siblings",
    "sweep",
    "poller",
    "runner",
    "fileserver",
    "seccomp",
    "bridge",
    "tools",
    "tool_paths",
    "tool_files",
    "tool_search",
    "tool_fetch",
    "tool_bash",
    "resident",
    "browser_host",
)


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
