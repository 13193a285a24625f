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
table), before the launcher drops to the sandbox uid and execs bwrap. The launcher is a small
program of its own (sandbox/launcher/motor-launch.c, ``MOTOR_SANDBOX_LAUNCHER``) so the worker
can start it with vfork; without it the same steps run in a full fork of the worker. A launch
step that fails (a bind, the uid drop) ends the launcher before bwrap runs, and the session's
start fails with SandboxError quoting it (from the supervisor log).

Each runtime dir records its owner (pid + the pid's start time) and sandbox uid in
``owner.json``. bwrap dies with its owner (--die-with-parent), but files stay; a backend sweeps
the dirs of dead owners when it is created (``BwrapBackend.sweep_orphans``).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from sandbox.backends.bwrap_args import (
    _GROUP,
    _HOSTS,
    _NSSWITCH,
    _PASSWD,
    BRIDGE_PORT,
    DEFAULT_PATH,
    _data_fd,
    environment,
    filesystem_args,
    namespace_args,
)
from sandbox.backends.bwrap_launch import (
    DEFAULT_LAUNCHER,
    _find_bwrap,
    _Launcher,
    _spawner,
    launcher_argv,
    usable_launcher,
)
from sandbox.backends.bwrap_runtime import (
    SESSION_FILE,
    _default_runtime_root,
    _open_files_under,
    _private_dir,
    _process_start,
    _read_owner,
    _write_owner,
)
from sandbox.backends.bwrap_session import BwrapSession
from sandbox.backends.bwrap_uids import _chown_tree, _parse_uid_range, _processes_of_uid, _UidLease
from sandbox.backends.mounts import check_bwrap_args
from sandbox.inside.protocol import ProtocolError
from sandbox.inside.supervisor import BOOT as SUPERVISOR_BOOT
from sandbox.inside.supervisor import precompile
from sandbox.types import Limits, SandboxError, SessionSpec

logger = logging.getLogger(__name__)

INSIDE_DIR = Path(__file__).resolve().parent.parent / "inside"
#: a runtime dir without an owner record younger than this may still be being set up (seconds)
UNOWNED_GRACE_S = 60.0


#: the supervisor's egress bridge: 127.0.0.1:3128 inside, to the proxy's socket
_BRIDGE: dict[str, Any] = {
    "listen_host": "127.0.0.1",
    "listen_port": BRIDGE_PORT,
    "unix_path": "/run/motor-cortex/egress.sock",
}


def supervisor_config(
    spec: SessionSpec, env: dict[str, str], bridge: dict[str, Any] | None
) -> dict[str, Any]:
    """The supervisor's CONFIG for a session of `spec` (sandbox/inside/supervisor.py)."""
    limits = spec.limits
    return {
        "limits": {
            "memory_bytes": limits.memory_bytes,
            "max_processes": limits.max_processes,
            "file_size_bytes": limits.file_size_bytes,
            "open_files": limits.open_files,
            "cpu_seconds": limits.cpu_seconds,
            "output_bytes": limits.output_bytes,
            "workspace_bytes": limits.workspace_bytes,
            "default_timeout_s": limits.default_timeout_s,
            "quota_interval_s": limits.quota_interval_s,
        },
        "env": env,
        "workspace": "/workspace",
        "sweep": True,
        "unix_pairs": spec.allow_unix_pairs,
        "bridge": bridge,
    }


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
        launcher: str | None = None,
    ) -> None:
        self._bwrap = _find_bwrap()
        #: the exec'd launcher of a root worker (None: the preexec_fn path)
        self.launcher: str | None = None
        if os.geteuid() == 0:
            self.launcher = usable_launcher(
                launcher
                if launcher is not None
                else os.environ.get("MOTOR_SANDBOX_LAUNCHER", DEFAULT_LAUNCHER).strip()
            )
        self._uids = _parse_uid_range(
            uid_range or os.environ.get("MOTOR_SANDBOX_UID_RANGE", "600000-609999")
        )
        self._runtime_root = runtime_root or _default_runtime_root()
        self._egress_resolver = egress_resolver
        #: the host's system directories and files do not change under a running worker
        self._filesystem_args = filesystem_args()
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
        session, bridge = self._launch(spec, session_id, pooled=False)
        try:
            session.handshake(supervisor_config(spec, environment(spec), bridge))
        except BaseException:
            session.close()
            raise
        return session

    def open_pooled(self, *, workspace: Path, limits: Limits, pool_id: str) -> BwrapSession:
        """Start a sandbox no run owns yet (see sandbox/pool.py): its uid leased, `workspace`
        (an empty slot directory) bound at /workspace, the egress socket's directory bound but
        no proxy behind it, and the supervisor hardened and waiting for its configuration.
        `adopt` hands it to a run."""
        spec = SessionSpec(workspace=workspace, limits=limits, session_id=pool_id)
        session, _bridge = self._launch(spec, pool_id, pooled=True)
        try:
            session.prepare(supervisor_config(spec, environment(spec), None))
        except BaseException:
            session.close()
            raise
        return session

    def adopt(self, session: BwrapSession, spec: SessionSpec) -> None:
        """Make the pooled `session` the session of `spec` (whose workspace the caller has
        already made the very directory the sandbox has at /workspace): the workspace handed to
        its uid, the run's own egress proxy when its policy allows any domain, and the
        supervisor's configuration (the run's environment and limits), which goes with the first
        call. On failure the session is closed and SandboxError raised; a configuration the
        supervisor refuses fails that first call with SandboxError instead."""
        try:
            session.id = spec.session_id or session.id
            session.spec = spec
            if session.lease is not None:
                _chown_tree(Path(spec.workspace), session.lease.uid, session.lease.uid, self._uids)
            bridge: dict[str, Any] | None = None
            if spec.network.enabled:
                session.set_proxy(
                    self._start_proxy(
                        spec,
                        session.id,
                        session.runtime_dir / "net" / "egress.sock",
                        session.host_uid,
                    )
                )
                bridge = _BRIDGE
            # sent with the first call: no round trip of its own on the run's way
            session.configure_with_first_call(supervisor_config(spec, environment(spec), bridge))
            # the run this sandbox now serves, for bwrap_sandboxes() (its command line still
            # names the pool's runtime dir); the sandbox cannot write to its runtime dir
            (session.runtime_dir / SESSION_FILE).write_text(session.id)
        except BaseException:
            session.close()
            raise

    def _launch(
        self, spec: SessionSpec, session_id: str, *, pooled: bool
    ) -> tuple[BwrapSession, dict[str, Any] | None]:
        """Start bwrap and its supervisor for `spec` (unconfigured); with `pooled`, the egress
        socket's directory is bound whatever the policy, and no proxy is started."""
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
            # one owner record, written once the uid is known: until then the sweep leaves a
            # dir without a record alone (UNOWNED_GRACE_S)
            if os.geteuid() == 0:
                lease = _UidLease.acquire(self._uids, _private_dir(root / "uids", 0o700))
                _write_owner(runtime_dir, lease.uid)
                host_uid = host_gid = lease.uid
                _chown_tree(workspace, host_uid, host_gid, self._uids)
            else:
                _write_owner(runtime_dir, None)
                host_uid, host_gid = os.geteuid(), os.getegid()

            env = environment(spec)
            args = [self._bwrap, *namespace_args()]
            args += ["--setenv", "PATH", env.get("PATH", DEFAULT_PATH)]
            args += ["--setenv", "HOME", "/workspace", "--setenv", "LANG", "C.UTF-8"]
            args += ["--setenv", "TMPDIR", "/tmp"]
            args += self._filesystem_args
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
            if spec.network.enabled or pooled:
                # The directory stays the worker's (the sandbox uid may only traverse it) and is
                # bound read-only: the sandbox can connect to the socket, which the proxy hands to
                # its uid, but can neither write files there nor remove the socket.
                net_dir = runtime_dir / "net"
                net_dir.mkdir(mode=0o711)
                os.chmod(net_dir, 0o711)  # noqa: S103 - traverse only, no listing
                if not pooled:
                    proxy = self._start_proxy(spec, session_id, net_dir / "egress.sock", host_uid)
                    bridge = _BRIDGE
                args += ["--ro-bind", str(net_dir), "/run/motor-cortex"]
            args += ["--remount-ro", "/", "--chdir", "/workspace"]
            args += ["/usr/bin/python3", "-I", "-S", "-B", "-c", SUPERVISOR_BOOT, "serve"]
            check_bwrap_args(args)

            log_path = runtime_dir / "supervisor.log"
            log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            # as root: the mount namespace, the staged binds and the uid drop, done by the
            # exec'd launcher (Popen can then vfork) or else between fork and exec
            argv: list[str | bytes] = list(args)
            preexec: Any = None
            if lease is not None and self.launcher is not None:
                argv = launcher_argv(self.launcher, staged, host_uid, host_gid, args)
            elif lease is not None:
                preexec = _Launcher(staged, host_uid, host_gid).run
            try:
                proc = _spawner.call(
                    lambda: subprocess.Popen(
                        argv,
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=log_fd,
                        env={},
                        cwd="/",
                        close_fds=True,
                        pass_fds=fds,
                        start_new_session=True,
                        preexec_fn=preexec,  # noqa: PLW1509 - mount ns + uid drop before exec
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
        return session, bridge

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
