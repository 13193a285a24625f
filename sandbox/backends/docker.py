"""The `docker` sandbox backend: one hardened container per session, a resident supervisor in it.

The container runs as uid 10001 with every capability dropped, no-new-privileges, Docker's default
seccomp profile, a read-only root, a size-capped noexec /tmp, pids/memory/CPU limits and
`network_mode=none`. The workspace is bind-mounted read-write at /workspace, the in-sandbox
scripts (`sandbox/inside/`, the one source of truth: nothing of them is baked into the image)
read-only at /opt/motor-cortex. The Docker socket is never mounted.

Calls: the container's main process is the supervisor's resident `serve` mode (under a small
non-dumpable PID 1 that reaps orphans). The backend keeps the container's attach socket and
speaks the supervisor's frame protocol over it, so every call gets the same per-call rlimits,
seccomp filter, timeout, process-tree kill, output cap and workspace quota as under bwrap, at a
warm cost of a few milliseconds; a `docker exec` per call costs ~50 ms of engine round trips.
When this process dies the attach socket closes, the supervisor reads EOF and the container
stops.

Network: when the session's policy allows any domain, a host-side `EgressProxy` listens on a unix
socket in a per-session runtime directory bind-mounted (read-only) at /run/motor-cortex, and the
supervisor runs the bridge that exposes it as 127.0.0.1:3128 for HTTP(S)_PROXY/ALL_PROXY.

Every container carries labels naming its session and its owner (host name, pid and the pid's
start time), so `sweep_orphans()` (run when a backend is created) removes the containers and
runtime dirs of owners that died without closing.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import select
import shutil
import socket
import stat
import struct
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.backends._protocol import exec_message
from sandbox.backends.mounts import check_docker_mounts
from sandbox.egress import EgressProxy, PolicyError, Resolver
from sandbox.inside.protocol import MAX_FRAME_BYTES, ProtocolError, encode_frame
from sandbox.inside.supervisor import BOOT as SUPERVISOR_BOOT
from sandbox.inside.supervisor import precompile
from sandbox.types import ExecRequest, ExecResult, NetworkPolicy, SandboxError, SessionSpec

log = logging.getLogger(__name__)

DEFAULT_IMAGE = "motor-cortex-sandbox:local"
SANDBOX_UID = 10001
INSIDE_DIR = Path(__file__).resolve().parent.parent / "inside"
INSIDE_MOUNT = "/opt/motor-cortex"
RUNTIME_MOUNT = "/run/motor-cortex"
BRIDGE_PORT = 3128
LABEL_SESSION = "motor-cortex.session"
LABEL_OWNER_HOST = "motor-cortex.owner-host"
LABEL_OWNER_PID = "motor-cortex.owner-pid"
LABEL_OWNER_START = "motor-cortex.owner-start"
LABEL_RUNTIME_DIR = "motor-cortex.runtime-dir"

_BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SUPERVISOR_ARGV = ["python3", "-I", "-S", "-B", "-c", SUPERVISOR_BOOT, "serve"]
# PID 1 of the container. Docker's own init (tini) would keep the container's environment in a
# dumpable PID 1 whose /proc/1/environ every sandboxed process (same uid) could read. This one
# makes itself non-dumpable first, starts the supervisor with an empty environment (the
# supervisor gets the sandbox's environment over its protocol), reaps the orphans the
# supervisor's process sweeps leave behind (zombies would count against the pids limit), and
# exits with the supervisor. Signals from inside the namespace cannot reach it: PID 1 ignores
# every signal it has no handler for.
_INIT_CODE = f"""
import ctypes, os, sys
if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:
    sys.exit("sandbox init: cannot make itself non-dumpable")
child = os.fork()
if child == 0:
    os.execve("/usr/bin/python3", {SUPERVISOR_ARGV!r}, {{"PATH": "/usr/bin:/bin"}})
while True:
    try:
        pid, status = os.wait()
    except ChildProcessError:
        os._exit(1)
    if pid == child:
        code = os.waitstatus_to_exitcode(status)
        os._exit(code if code >= 0 else 128 - code)
"""
INIT_COMMAND = ["python3", "-I", "-B", "-c", _INIT_CODE]
# PID 1 and the supervisor are not counted against the caller's process budget
_RESIDENT_PROCESSES = 2
_NPROC_CEILING = 1 << 16
_START_TIMEOUT_S = 15.0
_SUPERVISOR_GRACE_S = 10.0  # beyond a call's own timeout, before the supervisor counts as hung
#: how long close() waits for a running call to notice its container is gone (seconds)
_CLOSE_WAIT_S = 10.0
_READ_CHUNK = 64 * 1024
_RUNTIME_PREFIX = "mc-docker-"
_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True, slots=True)
class _Owner:
    host: str
    pid: int
    start: str


def _process_start(pid: int) -> str:
    """The kernel's start time of `pid` (clock ticks since boot), "" when it does not exist.

    A pid alone can be reused after its process dies; pid + start time cannot."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # the command name may contain spaces and parentheses; fields resume after the last ')'
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[19]


def _current_owner() -> _Owner:
    pid = os.getpid()
    return _Owner(host=socket.gethostname(), pid=pid, start=_process_start(pid))


def _owner_alive(owner: _Owner) -> bool:
    return _process_start(owner.pid) == owner.start and owner.start != ""


def _connect(client: Any | None) -> Any:
    import docker
    from docker.errors import DockerException

    try:
        engine = client if client is not None else docker.from_env(timeout=60)
        engine.ping()
    except DockerException as exc:
        raise SandboxError(
            f"docker backend: no Docker engine answers ({exc}); start dockerd or set DOCKER_HOST"
        ) from exc
    return engine


def sweep_orphans(client: Any | None = None) -> list[str]:
    """Remove sandbox containers (and their runtime dirs) whose owner process on this host is
    gone. Returns the removed session ids. Containers of live owners or other hosts are kept."""
    from docker.errors import DockerException, NotFound

    engine = _connect(client)
    removed: list[str] = []
    here = socket.gethostname()
    try:
        # sparse: no per-container inspect, so a container removed meanwhile (by its owner or
        # another sweeper) cannot fail the listing
        containers = engine.containers.list(all=True, sparse=True, filters={"label": LABEL_SESSION})
    except DockerException as exc:
        raise SandboxError(f"docker backend: cannot list sandbox containers: {exc}") from exc
    for container in containers:
        labels: Mapping[str, str] = container.attrs.get("Labels") or {}
        try:
            owner = _Owner(
                host=labels.get(LABEL_OWNER_HOST, ""),
                pid=int(labels.get(LABEL_OWNER_PID, "0")),
                start=labels.get(LABEL_OWNER_START, ""),
            )
        except ValueError:
            continue
        if owner.host != here or _owner_alive(owner):
            continue
        try:
            container.remove(force=True)
        except NotFound:
            pass
        except DockerException as exc:
            log.error("docker backend: cannot remove orphaned sandbox %s: %s", container.id, exc)
            continue
        runtime_dir = Path(labels.get(LABEL_RUNTIME_DIR) or "/nonexistent")
        # only ever delete a directory this backend created (the label is data, not authority)
        if runtime_dir.name.startswith(_RUNTIME_PREFIX) and runtime_dir.is_dir():
            shutil.rmtree(runtime_dir, ignore_errors=True)
        removed.append(labels.get(LABEL_SESSION, container.id))
        log.warning("docker backend: removed orphaned sandbox %s", labels.get(LABEL_SESSION))
    return removed


def _prepare_workspace(workspace: Path) -> Path:
    """Make the workspace writable by the sandbox uid and return its resolved path."""
    if not workspace.is_dir():
        raise SandboxError(f"docker backend: workspace {workspace} is not an existing directory")
    resolved = workspace.resolve()
    if os.geteuid() == 0:
        # the sandbox runs as uid 10001 without any capability, so it can only write what that
        # uid owns. The walk is relative to directory fds and never follows a symlink, so an
        # entry swapped for a link mid-walk cannot redirect a chown outside the workspace.
        # A regular file with several hard links that the sandbox does not own yet is left
        # alone: another of its names may lie outside the workspace, and handing it over would
        # give the sandbox a host file.
        for _root, dirs, files, dirfd in os.fwalk(resolved, follow_symlinks=False):
            for name in (*dirs, *files):
                try:
                    st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if st.st_uid == SANDBOX_UID:
                    continue
                if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                    log.warning("docker backend: not chowning multiply-linked file %s", name)
                    continue
                os.chown(name, SANDBOX_UID, SANDBOX_UID, dir_fd=dirfd, follow_symlinks=False)
        if resolved.stat().st_uid != SANDBOX_UID:
            os.chown(resolved, SANDBOX_UID, SANDBOX_UID)
    elif resolved.stat().st_uid != SANDBOX_UID and (resolved.stat().st_mode & 0o002) == 0:
        raise SandboxError(
            f"docker backend: workspace {resolved} is not writable by the sandbox uid "
            f"{SANDBOX_UID}; run the worker as root or chown the workspace to {SANDBOX_UID}"
        )
    return resolved


def _cgroup_file(container_id: str, controller: str, name: str) -> Path | None:
    """The host path of one cgroup file of a container (cgroup v1 or v2, cgroupfs or systemd)."""
    candidates = (
        Path("/sys/fs/cgroup") / controller / "docker" / container_id / name,
        Path("/sys/fs/cgroup")
        / controller
        / "system.slice"
        / f"docker-{container_id}.scope"
        / name,
        Path("/sys/fs/cgroup/docker") / container_id / name,
        Path("/sys/fs/cgroup/system.slice") / f"docker-{container_id}.scope" / name,
    )
    for candidate in candidates:
        if candidate.exists():
            return candidate
    return None


def _read_oom_kills(path: Path | None) -> int:
    if path is None:
        return 0
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


class _AttachedStream:
    """The supervisor's stdin/stdout over the container's attach socket.

    Writes go straight to the process's stdin. Reads demultiplex Docker's stream frames (8-byte
    header: stream id, 3 zero bytes, big-endian length): stdout bytes feed the supervisor's frame
    protocol, stderr bytes (its diagnostics) are kept in a short tail for error messages."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self.sock: socket.socket = getattr(raw, "_sock", raw)
        self._pending = b""
        self._stdout = bytearray()
        self.stderr_tail = bytearray()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self, deadline: float) -> bool:
        """Read more from the socket; False on EOF or deadline."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        ready, _, _ = select.select([self.sock], [], [], remaining)
        if not ready:
            return False
        chunk = self.sock.recv(_READ_CHUNK)
        if not chunk:
            return False
        self._pending += chunk
        while len(self._pending) >= 8:
            stream, size = struct.unpack(">BxxxL", self._pending[:8])
            if len(self._pending) < 8 + size:
                break
            payload = self._pending[8 : 8 + size]
            self._pending = self._pending[8 + size :]
            if stream == 2:
                self.stderr_tail += payload
                del self.stderr_tail[:-4096]
            else:
                self._stdout += payload
        return True

    def read_exact(self, size: int, deadline: float) -> bytes | None:
        while len(self._stdout) < size:
            if not self._fill(deadline):
                return None
        data = bytes(self._stdout[:size])
        del self._stdout[:size]
        return data

    def read_message(self, deadline: float) -> dict[str, Any] | None:
        """One supervisor frame, or None when the stream ended or the deadline passed."""
        header = self.read_exact(4, deadline)
        if header is None:
            return None
        (size,) = struct.unpack(">I", header)
        if size > MAX_FRAME_BYTES:
            raise SandboxError(f"docker backend: supervisor frame of {size} bytes is too large")
        body = self.read_exact(size, deadline)
        if body is None:
            return None
        message = json.loads(body)
        if not isinstance(message, dict):
            raise SandboxError("docker backend: supervisor sent a frame that is not an object")
        return message

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(Exception):
            self._raw.close()


def _supervisor_config(spec: SessionSpec, environment: Mapping[str, str]) -> dict[str, Any]:
    limits = spec.limits
    config: dict[str, Any] = {
        "limits": {
            "memory_bytes": limits.memory_bytes,
            # RLIMIT_NPROC counts every process of the real uid on the host, and uid 10001 is
            # shared by all docker sandboxes; the per-container pids cgroup is the real cap
            "max_processes": _NPROC_CEILING,
            "file_size_bytes": limits.file_size_bytes,
            "open_files": limits.open_files,
            "cpu_seconds": limits.cpu_seconds,
            "output_bytes": limits.output_bytes,
            "workspace_bytes": limits.workspace_bytes,
            "default_timeout_s": limits.default_timeout_s,
        },
        "env": dict(environment),
        "workspace": "/workspace",
        "sweep": True,
        "bridge": None,
    }
    if spec.network.enabled:
        config["bridge"] = {
            "listen_host": "127.0.0.1",
            "listen_port": BRIDGE_PORT,
            "unix_path": f"{RUNTIME_MOUNT}/egress.sock",
        }
    return config


class DockerSession:
    """One running sandbox container with a resident supervisor. One call at a time."""

    backend = "docker"

    def __init__(
        self,
        *,
        client: Any,
        container: Any,
        stream: _AttachedStream,
        session_id: str,
        spec: SessionSpec,
        proxy: EgressProxy | None,
        runtime_dir: Path | None,
    ) -> None:
        self.id = session_id
        self._client = client
        self._container = container
        self._stream = stream
        self._spec = spec
        self._proxy = proxy
        self._runtime_dir = runtime_dir
        self._closed = False
        # `_lock` serialises calls and guards the attach stream; `_state_lock` only the closed
        # flag, so close() never waits for a running call
        self._lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._stream_closed = False
        self._caller: int | None = None
        self._oom_file = _cgroup_file(container.id, "memory", "memory.oom_control") or (
            _cgroup_file(container.id, "", "memory.events")
        )

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def container_id(self) -> str:
        return str(self._container.id)

    def exec(self, request: ExecRequest) -> ExecResult:
        """Run `request.argv` inside the container (as uid 10001, under the supervisor's per-call
        rlimits, seccomp filter, timeout, output cap and process sweep) and wait for it.

        Raises ValueError for a malformed request, SandboxError when the session is closed or its
        supervisor stopped answering (the session is then closed, never reused)."""
        message = exec_message(request, self._spec.limits)
        with self._lock:
            if self._closed:
                raise SandboxError(f"docker backend: session {self.id} is closed")
            self._caller = threading.get_ident()
            try:
                oom_before = _read_oom_kills(self._oom_file)
                try:
                    self._stream.send(encode_frame(message))
                except (OSError, ProtocolError) as exc:
                    self._break(f"cannot send the call to the supervisor: {exc}")
                # the supervisor enforces the timeout itself; the margin only catches a hung one
                deadline = time.monotonic() + message["timeout_s"] + _SUPERVISOR_GRACE_S
                try:
                    reply = self._stream.read_message(deadline)
                except (OSError, ValueError) as exc:
                    self._break(f"reading the supervisor's answer failed: {exc}")
                if reply is None:
                    self._break("the supervisor stopped answering")
                assert reply is not None
                oom_kills = _read_oom_kills(self._oom_file) - oom_before
            finally:
                self._caller = None
                if self._closed:
                    self._close_stream()
        op = reply.get("op")
        if op == "error":
            if reply.get("code") == "invalid_args":
                raise ValueError(f"invalid exec request: {reply.get('message')}")
            raise SandboxError(f"docker backend: sandbox error: {reply.get('message')}")
        if op != "result":
            self.close()
            raise SandboxError(f"docker backend: the supervisor answered {op!r} to an exec request")
        error = reply.get("error")
        if isinstance(error, dict) and error.get("code") == "sandbox_error":
            raise SandboxError(f"docker backend: {error.get('message')}")
        sig = reply.get("signal")
        exit_code = reply.get("exit_code")
        return ExecResult(
            exit_code=exit_code if isinstance(exit_code, int) else None,
            stdout=base64.b64decode(reply.get("stdout_b64") or ""),
            stderr=base64.b64decode(reply.get("stderr_b64") or ""),
            duration_ms=int(reply.get("duration_ms") or 0),
            timed_out=bool(reply.get("timed_out")),
            truncated=bool(reply.get("truncated")),
            # the container's memory cgroup also counts kills the supervisor cannot attribute
            oom=bool(reply.get("oom")) or oom_kills > 0,
            signal=sig if isinstance(sig, int) else None,
            workspace_exceeded=bool(reply.get("workspace_exceeded")),
        )

    def _break(self, why: str) -> None:
        was_closed = self._closed
        tail = bytes(self._stream.stderr_tail).decode(errors="replace").strip()
        self.close()
        if was_closed:
            raise SandboxError(f"docker backend: session {self.id} was closed during the call")
        raise SandboxError(
            f"docker backend: session {self.id} broke down: {why}"
            + (f" (supervisor said: {tail[-500:]})" if tail else "")
        )

    # -- lifetime -----------------------------------------------------------------------------

    def close(self) -> None:
        """Remove the container, stop the egress proxy and delete the runtime dir. Idempotent;
        safe from any thread, also while a call runs: the container is killed at once, the
        running call sees its stream end and fails with SandboxError."""
        from docker.errors import DockerException, NotFound

        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._container.remove(force=True)
        except NotFound:
            pass
        except DockerException as exc:
            log.error("docker backend: could not remove container of %s: %s", self.id, exc)
        if self._proxy is not None:
            with contextlib.suppress(Exception):
                self._proxy.close()
        if self._runtime_dir is not None:
            shutil.rmtree(self._runtime_dir, ignore_errors=True)
        # The attach socket is closed only while no call reads it: closing it under a reader
        # would fail that read with EBADF, or worse let the fd number be reused by another file
        # the reader then reads. The container is gone, so a running call sees EOF promptly and
        # closes the stream itself on its way out (exec's finally) if we cannot take the lock.
        if self._caller == threading.get_ident():
            return
        if self._lock.acquire(timeout=_CLOSE_WAIT_S):
            try:
                self._close_stream()
            finally:
                self._lock.release()
        else:
            log.error(
                "docker backend: a call of %s did not end after its container was removed", self.id
            )

    def _close_stream(self) -> None:
        """Close the attach stream; the caller holds `_lock`."""
        if not self._stream_closed:
            self._stream_closed = True
            self._stream.close()

    def __enter__(self) -> DockerSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DockerBackend:
    """Opens `DockerSession`s from the sandbox image. Fails with SandboxError when the engine or
    the image is missing; it never runs anything outside a container."""

    name = "docker"

    def __init__(
        self,
        image: str | None = None,
        client: Any | None = None,
        *,
        inside_dir: Path | None = None,
        runtime_root: Path | None = None,
        egress_resolver: Resolver | None = None,
        sweep: bool = True,
    ) -> None:
        from docker.errors import DockerException, ImageNotFound

        self.image = image or os.environ.get("SANDBOX_DOCKER_IMAGE") or DEFAULT_IMAGE
        self.inside_dir = (inside_dir or INSIDE_DIR).resolve()
        self.runtime_root = runtime_root
        self._egress_resolver = egress_resolver
        self._client = _connect(client)
        try:
            self._client.images.get(self.image)
        except ImageNotFound as exc:
            raise SandboxError(
                f"docker backend: sandbox image {self.image!r} is not present; build it with "
                "sandbox/image/build.sh (or docker compose --profile build build sandbox-image)"
            ) from exc
        except DockerException as exc:
            raise SandboxError(
                f"docker backend: cannot inspect image {self.image!r}: {exc}"
            ) from exc
        precompile(str(self.inside_dir))
        if sweep:
            sweep_orphans(self._client)

    def open(self, spec: SessionSpec) -> DockerSession:
        """Start the session's container (and its egress proxy when the policy allows network)."""
        from docker.errors import DockerException, ImageNotFound

        session_id = spec.session_id or uuid.uuid4().hex[:16]
        if not _SESSION_ID.fullmatch(session_id):
            # it becomes part of a container name and of a host directory name
            raise ValueError(
                f"session_id {session_id!r} must be 1-64 characters of letters, digits, '_', "
                "'.' or '-', starting with a letter or digit"
            )
        workspace = _prepare_workspace(spec.workspace)
        if not self.inside_dir.is_dir():
            raise SandboxError(f"docker backend: in-sandbox scripts missing at {self.inside_dir}")
        owner = _current_owner()
        runtime_dir: Path | None = None
        proxy: EgressProxy | None = None
        container: Any = None
        stream: _AttachedStream | None = None
        try:
            mounts = self._mounts(workspace, spec.readonly_mounts)
            environment = self._environment(spec.environment, spec.network)
            if spec.network.enabled:
                runtime_dir, proxy = self._start_proxy(session_id, spec)
                mounts.append(self._bind(runtime_dir, RUNTIME_MOUNT, read_only=True))
            labels = {
                LABEL_SESSION: session_id,
                LABEL_OWNER_HOST: owner.host,
                LABEL_OWNER_PID: str(owner.pid),
                LABEL_OWNER_START: owner.start,
                LABEL_RUNTIME_DIR: str(runtime_dir or ""),
            }
            tmpfs = {"/tmp": f"rw,nosuid,nodev,noexec,size={spec.limits.tmp_bytes},mode=1777"}
            check_docker_mounts(mounts=mounts, tmpfs=tmpfs, read_only_root=True)
            container = self._client.containers.create(
                self.image,
                # the resident supervisor is the main process: it serves calls over its stdin,
                # runs the egress bridge, and exits (stopping the container) when the stdin
                # closes because this process went away
                command=INIT_COMMAND,
                stdin_open=True,
                name=f"motor-cortex-{session_id}",
                hostname="sandbox",
                user=f"{SANDBOX_UID}:{SANDBOX_UID}",
                working_dir="/workspace",
                # the container itself gets no environment: the supervisor hands `environment`
                # to each command, and PID 1 keeps nothing worth reading
                environment={"PATH": _BASE_PATH},
                labels=labels,
                # detach=False makes docker-py set AttachStdin and StdinOnce: when the attach
                # connection goes away (this process died), the engine closes the supervisor's
                # stdin, the supervisor exits and the container stops
                detach=False,
                init=False,  # INIT_COMMAND is PID 1 (see there)
                network_mode="none",
                cap_drop=["ALL"],
                security_opt=["no-new-privileges:true"],
                read_only=True,
                tmpfs=tmpfs,
                shm_size=min(spec.limits.tmp_bytes, 64 * 1024 * 1024),
                ipc_mode="private",
                pids_limit=spec.limits.max_processes + _RESIDENT_PROCESSES,
                mem_limit=spec.limits.memory_bytes,
                memswap_limit=spec.limits.memory_bytes,
                nano_cpus=1_000_000_000,
                ulimits=self._ulimits(spec),
                mounts=mounts,
                stop_signal="SIGKILL",
            )
            stream = _AttachedStream(
                self._client.api.attach_socket(
                    container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
                )
            )
            container.start()
            self._handshake(stream, _supervisor_config(spec, environment))
            return DockerSession(
                client=self._client,
                container=container,
                stream=stream,
                session_id=session_id,
                spec=spec,
                proxy=proxy,
                runtime_dir=runtime_dir,
            )
        except BaseException as exc:
            if stream is not None:
                stream.close()
            if container is not None:
                with contextlib.suppress(DockerException):
                    container.remove(force=True)
            if proxy is not None:
                with contextlib.suppress(Exception):
                    proxy.close()
            if runtime_dir is not None:
                shutil.rmtree(runtime_dir, ignore_errors=True)
            if isinstance(exc, ImageNotFound):
                raise SandboxError(
                    f"docker backend: sandbox image {self.image!r} disappeared; rebuild it with "
                    "sandbox/image/build.sh"
                ) from exc
            if isinstance(exc, DockerException):
                raise SandboxError(f"docker backend: cannot start the sandbox: {exc}") from exc
            raise

    # -- helpers ------------------------------------------------------------------------------

    @staticmethod
    def _bind(source: Path, target: str, *, read_only: bool) -> Any:
        from docker.types import Mount

        return Mount(target, str(source), type="bind", read_only=read_only, propagation="rprivate")

    def _mounts(self, workspace: Path, extra: Sequence[tuple[Path, str]]) -> list[Any]:
        mounts = [
            self._bind(workspace, "/workspace", read_only=False),
            self._bind(self.inside_dir, INSIDE_MOUNT, read_only=True),
        ]
        for host_path, inside in extra:
            if not Path(host_path).exists():
                raise SandboxError(f"docker backend: read-only mount source {host_path} is missing")
            if not inside.startswith("/") or inside in ("/", "/workspace", RUNTIME_MOUNT):
                raise SandboxError(f"docker backend: invalid mount target {inside!r}")
            mounts.append(self._bind(Path(host_path).resolve(), inside, read_only=True))
        return mounts

    @staticmethod
    def _environment(base: Mapping[str, str], network: NetworkPolicy) -> dict[str, str]:
        # built from scratch: nothing of the worker's own environment reaches the sandbox. Proxy
        # variables are the backend's alone (the same set as bwrap's), and NO_PROXY is never set.
        env = {"PATH": _BASE_PATH, "HOME": "/workspace", "LANG": "C.UTF-8", "TMPDIR": "/tmp"}
        env.update(base)
        for name in ("NO_PROXY", "no_proxy", *_PROXY_VARS):
            env.pop(name, None)
        if network.enabled:
            env.update(dict.fromkeys(_PROXY_VARS, f"http://127.0.0.1:{BRIDGE_PORT}"))
        return env

    @staticmethod
    def _ulimits(spec: SessionSpec) -> list[Any]:
        from docker.types import Ulimit

        limits = spec.limits
        return [
            Ulimit(name="nofile", soft=limits.open_files, hard=limits.open_files),
            Ulimit(name="fsize", soft=limits.file_size_bytes, hard=limits.file_size_bytes),
            Ulimit(name="core", soft=0, hard=0),
            # the supervisor sets per-call CPU and process rlimits below these ceilings; a
            # container-wide CPU limit would also count the resident supervisor's own time
            Ulimit(name="nproc", soft=_NPROC_CEILING, hard=_NPROC_CEILING),
        ]

    def _start_proxy(self, session_id: str, spec: SessionSpec) -> tuple[Path, EgressProxy]:
        runtime_dir = Path(
            tempfile.mkdtemp(prefix=f"{_RUNTIME_PREFIX}{session_id}-", dir=self.runtime_root)
        )
        try:
            # the sandbox uid must traverse the directory to reach the socket; nobody else needs it
            os.chmod(runtime_dir, 0o750)  # noqa: S103 - group = the sandbox uid only
            if os.geteuid() == 0:
                os.chown(runtime_dir, 0, SANDBOX_UID)
            proxy = EgressProxy(
                session_id=session_id,
                policy=spec.network,
                socket_path=runtime_dir / "egress.sock",
                resolver=self._egress_resolver,
                on_connection=spec.on_connection,
                owner_uid=SANDBOX_UID,
            )
        except PolicyError as exc:
            shutil.rmtree(runtime_dir, ignore_errors=True)
            raise SandboxError(f"docker backend: unusable network policy: {exc}") from exc
        except OSError as exc:
            shutil.rmtree(runtime_dir, ignore_errors=True)
            raise SandboxError(f"docker backend: the egress proxy could not start: {exc}") from exc
        except BaseException:
            shutil.rmtree(runtime_dir, ignore_errors=True)
            raise
        return runtime_dir, proxy

    @staticmethod
    def _handshake(stream: _AttachedStream, config: dict[str, Any]) -> None:
        """Configure the supervisor and wait for its `ready` (bridge listening, when asked)."""
        try:
            stream.send(encode_frame({"op": "configure", "config": config}))
        except (OSError, ProtocolError) as exc:
            raise SandboxError(f"docker backend: cannot configure the supervisor: {exc}") from exc
        reply = stream.read_message(time.monotonic() + _START_TIMEOUT_S)
        if reply is None or reply.get("op") != "ready":
            said = bytes(stream.stderr_tail).decode(errors="replace").strip()
            detail = reply.get("message") if reply else f"no answer in {_START_TIMEOUT_S:.0f} s"
            raise SandboxError(
                f"docker backend: the sandbox supervisor did not start: {detail}"
                + (f" ({said[-500:]})" if said else "")
            )
        if reply.get("uid") != SANDBOX_UID:
            raise SandboxError(f"docker backend: supervisor runs as uid {reply.get('uid')}")
