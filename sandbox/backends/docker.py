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

import contextlib
import logging
import os
import re
import shutil
import stat
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sandbox.backends.docker_orphans import (
    _RUNTIME_PREFIX,
    LABEL_OWNER_HOST,
    LABEL_OWNER_PID,
    LABEL_OWNER_START,
    LABEL_RUNTIME_DIR,
    LABEL_SESSION,
    _connect,
    _current_owner,
    sweep_orphans,
)
from sandbox.backends.docker_session import DockerSession, _AttachedStream
from sandbox.backends.mounts import check_docker_mounts
from sandbox.egress import EgressProxy, PolicyError, Resolver
from sandbox.inside.protocol import ProtocolError, encode_frame
from sandbox.inside.supervisor import BOOT as SUPERVISOR_BOOT
from sandbox.inside.supervisor import precompile
from sandbox.types import Limits, NetworkPolicy, SandboxError, SessionSpec

log = logging.getLogger(__name__)

DEFAULT_IMAGE = "motor-cortex-sandbox:local"
SANDBOX_UID = 10001
INSIDE_DIR = Path(__file__).resolve().parent.parent / "inside"
INSIDE_MOUNT = "/opt/motor-cortex"
RUNTIME_MOUNT = "/run/motor-cortex"
BRIDGE_PORT = 3128

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

_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


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
            "quota_interval_s": limits.quota_interval_s,
        },
        "env": dict(environment),
        "workspace": "/workspace",
        "sweep": True,
        "unix_pairs": spec.allow_unix_pairs,
        "bridge": None,
    }
    if spec.network.enabled:
        config["bridge"] = {
            "listen_host": "127.0.0.1",
            "listen_port": BRIDGE_PORT,
            "unix_path": f"{RUNTIME_MOUNT}/egress.sock",
        }
    return config


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
        return self._launch(spec, pooled=False)

    def open_pooled(self, *, workspace: Path, limits: Limits, pool_id: str) -> DockerSession:
        """Start a container no run owns yet (see sandbox/pool.py): `workspace` (an empty slot
        directory) bound at /workspace, a runtime dir bound at /run/motor-cortex with no proxy
        in it, and the supervisor hardened and waiting for its configuration. `adopt` hands it
        to a run."""
        return self._launch(
            SessionSpec(workspace=workspace, limits=limits, session_id=pool_id), pooled=True
        )

    def adopt(self, session: DockerSession, spec: SessionSpec) -> None:
        """Make the pooled `session` the session of `spec` (whose workspace the caller has
        already made the very directory the container has at /workspace): the files handed to
        the sandbox uid, the run's own egress proxy when its policy allows any domain, and the
        supervisor's configuration (the run's environment and limits), which goes with the first
        call. On failure the session is closed and SandboxError raised; a configuration the
        supervisor refuses fails that first call with SandboxError instead."""
        try:
            _prepare_workspace(Path(spec.workspace))
            proxy: EgressProxy | None = None
            if spec.network.enabled:
                assert session.runtime_dir is not None
                proxy = self._proxy_at(session.runtime_dir, spec.session_id or session.id, spec)
            environment = self._environment(spec.environment, spec.network)
            session.adopted(spec, proxy, _supervisor_config(spec, environment))
        except BaseException:
            session.close()
            raise

    def _launch(self, spec: SessionSpec, *, pooled: bool) -> DockerSession:
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
            if spec.network.enabled or pooled:
                runtime_dir = self._runtime_dir_make(session_id)
                if not pooled:
                    proxy = self._proxy_at(runtime_dir, session_id, spec)
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
            self._start_supervisor(stream, _supervisor_config(spec, environment), pooled=pooled)
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

    def _runtime_dir_make(self, session_id: str) -> Path:
        """The session's runtime dir, for the egress socket (traversable by the sandbox uid)."""
        runtime_dir = Path(
            tempfile.mkdtemp(prefix=f"{_RUNTIME_PREFIX}{session_id}-", dir=self.runtime_root)
        )
        try:
            # the sandbox uid must traverse the directory to reach the socket; nobody else needs it
            os.chmod(runtime_dir, 0o750)  # noqa: S103 - group = the sandbox uid only
            if os.geteuid() == 0:
                os.chown(runtime_dir, 0, SANDBOX_UID)
        except BaseException:
            shutil.rmtree(runtime_dir, ignore_errors=True)
            raise
        return runtime_dir

    def _proxy_at(self, runtime_dir: Path, session_id: str, spec: SessionSpec) -> EgressProxy:
        """Start the session's egress proxy on `runtime_dir`/egress.sock."""
        try:
            return EgressProxy(
                session_id=session_id,
                policy=spec.network,
                socket_path=runtime_dir / "egress.sock",
                resolver=self._egress_resolver,
                on_connection=spec.on_connection,
                owner_uid=SANDBOX_UID,
            )
        except PolicyError as exc:
            raise SandboxError(f"docker backend: unusable network policy: {exc}") from exc
        except OSError as exc:
            raise SandboxError(f"docker backend: the egress proxy could not start: {exc}") from exc

    @staticmethod
    def _start_supervisor(stream: _AttachedStream, config: dict[str, Any], *, pooled: bool) -> None:
        """Send the supervisor its first message and wait for the answer that says it started.

        A pooled container's supervisor is sent `prepare` (it hardens itself with `config`: the
        limits its run will have, nothing of the run) and answers `prepared`; a cold one is sent
        `configure` and answers `ready` (bridge listening, when asked). Either way it must run
        as the sandbox uid; anything else is a SandboxError carrying the supervisor's stderr.
        """
        op, expected = ("prepare", "prepared") if pooled else ("configure", "ready")
        try:
            stream.send(encode_frame({"op": op, "config": config}))
        except (OSError, ProtocolError) as exc:
            raise SandboxError(f"docker backend: cannot {op} the supervisor: {exc}") from exc
        reply = stream.read_message(time.monotonic() + _START_TIMEOUT_S)
        if reply is None or reply.get("op") != expected:
            said = bytes(stream.stderr_tail).decode(errors="replace").strip()
            detail = reply.get("message") if reply else f"no answer in {_START_TIMEOUT_S:.0f} s"
            raise SandboxError(
                f"docker backend: the sandbox supervisor did not start: {detail}"
                + (f" ({said[-500:]})" if said else "")
            )
        if reply.get("uid") != SANDBOX_UID:
            raise SandboxError(f"docker backend: supervisor runs as uid {reply.get('uid')}")
