"""The sandbox session of each run, kept warm across its slices within one worker process.

A run's first sandboxed call opens a session (workspace, egress allowlist) registered under the
run id in this process's registry (`sandbox.session.SessionRegistry`), adopting one of the
process's spare sandboxes (`session_pool`, sandbox.pool) when it can. Later slices of the same run
that land in this process reuse it; a slice in another process opens its own, and the one left
behind is closed by the registry's reaper after MOTOR_SANDBOX_IDLE_TIMEOUT_SECONDS without a
call. The runtime closes it itself when the run ends, is cancelled or its slice loses the lease.

While a call runs, `CallWatch` checks the run's fencing token in the database every
MOTOR_CALL_WATCH_INTERVAL_SECONDS; once the token moved (cancel, time-out, take-over) it closes
the session, which kills the call and everything it started.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connections

from runs.metrics import EGRESS_DECISIONS, SANDBOX_SESSIONS_OPEN, SANDBOX_STARTS
from runs.models import MotorRun

logger = logging.getLogger(__name__)

_registry_lock = threading.Lock()
_registry: Any = None
_registry_pid = 0


def _sessions() -> Any:
    """This process's registry of run sessions (created on first use, and anew after a fork:
    a pool process never touches sessions its parent opened)."""
    global _registry, _registry_pid
    with _registry_lock:
        if _registry is None or _registry_pid != os.getpid():
            from sandbox.session import SessionRegistry

            _registry = SessionRegistry(on_count=SANDBOX_SESSIONS_OPEN.set)
            _registry_pid = os.getpid()
            # bwrap dies with us anyway (--die-with-parent); this also stops proxies and
            # removes runtime directories on a normal exit (pool recycling, shutdown).
            atexit.register(_registry.close_all)
        return _registry


def idle_timeout_s() -> float:
    return float(getattr(settings, "MOTOR_SANDBOX_IDLE_TIMEOUT_SECONDS", 300))


def _run_limits() -> Any:  # sandbox.types.Limits
    """The limits of every run's session (the pool's spares are started with the same)."""
    from dataclasses import replace

    from sandbox.types import Limits

    return replace(Limits(), idle_timeout_s=idle_timeout_s())


def _workspace_identity(workspace: str) -> tuple[int, int] | None:
    try:
        st = os.lstat(workspace)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def run_session_get(
    *,
    run_id: str,
    workspace: str,
    allowed_domains: tuple[str, ...],
    layer: Path | None = None,
    tools: tuple[str, ...] | list[str] = (),
) -> Any:  # sandbox.session.ManagedSession
    """The open session of `run_id` in this process, opened now when there is none. A new
    session mounts the dependency `layer` (a directory, runs.layers) read-only, with the
    variables that put it on python3's and node's import paths (sandbox.layers), and what the
    browser needs inside only when the run's granted `tools` include "browser".

    A session without such mounts is taken from this process's pool of spare sandboxes when it
    has one (`session_pool`), else started now. An open session whose workspace directory is no
    longer the one it has at /workspace (a session in another process took a spare for the run,
    which moves the workspace into the spare's directory) is closed and replaced.

    Raises sandbox.types.SandboxError when the sandbox cannot start; nothing runs unsandboxed.
    """
    registry = _sessions()
    session = registry.get(run_id)
    if session is not None and not session.closed:
        bound = getattr(session, "workspace_identity", None)
        if bound is None or bound == _workspace_identity(workspace):
            SANDBOX_STARTS.labels(kind="warm").inc()
            return session
        logger.info("run %s: the workspace was moved to another sandbox; reopening", run_id)
        run_session_close(run_id)
        session = registry.get(run_id)
    if session is not None:
        registry.forget(session)

    from runs.workspaces import NotAProjectWorkspace, check_run_workspace
    from sandbox.session import open_session
    from sandbox.types import NetworkPolicy, SandboxError, SessionSpec

    try:
        # checked again where it is bound: the sandbox takes the directory over
        check_run_workspace(workspace)
    except NotAProjectWorkspace as exc:
        raise SandboxError(str(exc)) from None

    mounts: list[tuple[Path, str]] = []
    environment: dict[str, str] = {}
    if "browser" in tools:
        from sandbox.browser import browser_mounts

        # what the browser tool needs inside (Playwright, Chromium's policy), read-only
        mounts += browser_mounts()
    if layer is not None:
        from sandbox.layers import LAYER_MOUNT, layer_environment

        # the skill's dependency layer, read-only
        mounts.append((layer, LAYER_MOUNT))
        environment = layer_environment()
    spec = SessionSpec(
        workspace=Path(workspace),
        readonly_mounts=tuple(mounts),
        network=NetworkPolicy(allowed_domains=allowed_domains),
        environment=environment,
        limits=_run_limits(),
        session_id=run_id,
        on_connection=_count_egress,
    )
    try:
        pool = session_pool()
    except Exception:  # noqa: BLE001 - without spares the session opens cold, as before
        logger.exception("the sandbox pool is not available")
        pool = None
    adopted = pool.take(spec) if pool is not None else None
    if adopted is not None:
        opened = registry.add(adopted, spec.limits.idle_timeout_s)
        SANDBOX_STARTS.labels(kind="pooled").inc()
    else:
        opened = open_session(
            spec,
            settings.SANDBOX_BACKEND,
            allow_local=bool(getattr(settings, "SANDBOX_ALLOW_LOCAL", False)),
            session_registry=registry,
        )
        SANDBOX_STARTS.labels(kind="cold").inc()
    opened.workspace_identity = _workspace_identity(workspace)
    return opened


_pool_lock = threading.Lock()
_pool: Any = None
_pool_key: tuple[object, ...] = ()

#: the backends that can keep spare sandboxes
POOL_BACKENDS = ("bwrap", "docker")


def pool_size() -> int:
    """MOTOR_SANDBOX_POOL_SIZE: spare sandboxes each worker process keeps (0: none)."""
    return max(0, int(getattr(settings, "MOTOR_SANDBOX_POOL_SIZE", 2)))


def session_pool() -> Any:  # sandbox.pool.SessionPool | None
    """This process's pool of spare sandboxes (sandbox.pool), started on first use and anew
    after a fork or when the settings it was made for changed; None when MOTOR_SANDBOX_POOL_SIZE
    is 0 or the backend keeps none (local). A backend that cannot start raises SandboxError,
    as opening a session would."""
    global _pool, _pool_key
    from runs.workspaces import POOL_DIR, workspaces_root

    size = pool_size()
    backend_name = str(settings.SANDBOX_BACKEND)
    key = (os.getpid(), backend_name, size, str(workspaces_root()))
    with _pool_lock:
        if _pool is not None and _pool_key == key and not _pool.closed:
            return _pool
        stale, stale_key = _pool, _pool_key
        _pool, _pool_key = None, ()
        if stale is not None and stale_key[:1] == (os.getpid(),):
            # a pool of this process made for other settings; a parent's (before a fork) is
            # left alone: its sandboxes are the parent's
            stale.close()
        if size == 0 or backend_name not in POOL_BACKENDS:
            return None
        from sandbox.backends import get_backend
        from sandbox.pool import SessionPool, sweep_slots

        backend = get_backend(
            backend_name, allow_local=bool(getattr(settings, "SANDBOX_ALLOW_LOCAL", False))
        )
        # the spares' slots live beside the workspaces, on their file system: adopting one
        # renames the run's workspace into it
        slot_root = workspaces_root() / POOL_DIR
        sweep_slots(slot_root)
        _pool = SessionPool(backend, size=size, slot_root=slot_root, limits=_run_limits())
        _pool_key = key
        _pool.start()
        atexit.register(_pool.close)
        return _pool


def session_pool_start() -> None:
    """Fill this process's pool now (a worker process calls it when it starts), so its first
    run finds a spare. Never raises: a sandbox that cannot start fails the run's call instead."""
    try:
        session_pool()
    except Exception:  # noqa: BLE001 - the first call reports it
        logger.exception("the sandbox pool could not start")


def session_pool_stop() -> None:
    """Close this process's pool: every spare closed, its uid lease returned, its slot removed."""
    global _pool, _pool_key
    with _pool_lock:
        pool, key = _pool, _pool_key
        _pool, _pool_key = None, ()
    if pool is not None and key[:1] == (os.getpid(),):
        pool.close()


def _count_egress(report: Any) -> None:  # sandbox.types.ConnectionReport
    """Each connection the run's egress proxy decided on, by verdict and reason."""
    EGRESS_DECISIONS.labels(decision=report.verdict, reason=report.reason).inc()


def run_session_peek(run_id: str) -> Any:
    """The open session of `run_id` in this process, or None (never opens one)."""
    session = _sessions().get(run_id)
    return session if session is not None and not session.closed else None


def run_session_close(run_id: str) -> bool:
    """Close the session of `run_id` in this process, if any; True when one was closed."""
    session = _sessions().get(run_id)
    if session is None:
        return False
    try:
        session.close()
    except Exception:  # noqa: BLE001 - closing is best effort; the sandbox dies with us anyway
        logger.exception("closing the sandbox session of run %s failed", run_id)
    return True


def orphan_sandboxes_kill() -> list[str]:
    """Kill every sandbox on this host (bwrap sandboxes, and with the docker backend its
    containers; whichever worker process owns them) whose run has ended — completed, failed or cancelled — with the browser and every other process in it;
    return those run ids. A worker normally closes a run's session itself when the run ends; this
    is the watchdog for the session it could not close (a hung close, a lost slice)."""
    from runs.models import TERMINAL_STATUSES
    from sandbox.reaper import bwrap_sandboxes, docker_sandboxes, kill_containers, kill_sandbox

    found = bwrap_sandboxes()
    # the docker backend's containers, when it is the one configured (its engine is then there)
    containers = docker_sandboxes() if settings.SANDBOX_BACKEND == "docker" else {}
    if not found and not containers:
        return []
    ended = sorted(
        MotorRun.objects.filter(
            pk__in=[*found, *containers], status__in=TERMINAL_STATUSES
        ).values_list("id", flat=True)
    )
    for run_id in ended:
        logger.warning("run %s has ended but its sandbox is alive; killing it", run_id)
        if run_id in found:
            kill_sandbox(found[run_id])
        if run_id in containers:
            kill_containers(containers[run_id])
        run_session_close(run_id)
    return ended


def open_run_sessions() -> list[str]:
    """Run ids with an open session in this process."""
    return [session.id for session in _sessions() if not session.closed]


def watch_interval_s() -> float:
    return float(getattr(settings, "MOTOR_CALL_WATCH_INTERVAL_SECONDS", 1.0))


class CallWatch:
    """Kills a running call's session once the run's fencing token is no longer `token`.

    Use as a context manager around the call. The first check comes one interval after the call
    started, so short calls cost no query at all. One watcher thread per process checks every
    call in progress (one query for all that are due), so a call costs no thread of its own.
    """

    def __init__(self, *, run_id: str, token: int) -> None:
        self.run_id = run_id
        self.token = token
        self.fired = False
        self.due = 0.0
        self._killed: threading.Event | None = None  # set once the watcher has killed the call

    def __enter__(self) -> CallWatch:
        _watcher().add(self)
        return self

    def __exit__(self, *exc: object) -> None:
        killing = _watcher().remove(self)
        if killing is not None:
            # The call ended because the watcher is killing it: let the kill (the session's
            # close) finish before the slice goes on, as if it had happened in this thread.
            killing.wait()


class _Watcher:
    """The process's watcher of calls in progress: sleeps until the earliest check is due."""

    def __init__(self) -> None:
        self._calls: set[CallWatch] = set()
        self._wake = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name="motor-call-watch", daemon=True)
        self._thread.start()

    def add(self, watch: CallWatch) -> None:
        with self._wake:
            watch.due = time.monotonic() + watch_interval_s()
            self._calls.add(watch)
            self._wake.notify()

    def remove(self, watch: CallWatch) -> threading.Event | None:
        """Stop watching; the event of a kill in progress, if the watcher started one."""
        with self._wake:
            self._calls.discard(watch)
            return watch._killed

    def _loop(self) -> None:
        while True:
            with self._wake:
                now = time.monotonic()
                due = [watch for watch in self._calls if watch.due <= now]
                if not due:
                    nearest = min((watch.due for watch in self._calls), default=None)
                    self._wake.wait(None if nearest is None else nearest - now)
                    continue
                interval = watch_interval_s()
                for watch in due:
                    watch.due = now + interval
            self._check(due)

    def _check(self, due: list[CallWatch]) -> None:
        try:
            current = dict(
                MotorRun.objects.filter(pk__in={watch.run_id for watch in due}).values_list(
                    "id", "lease_token"
                )
            )
            for watch in due:
                token = current.get(watch.run_id)
                # None: the row is gone or not visible to this connection; nothing to judge.
                if token is None or token == watch.token:
                    continue
                with self._wake:
                    if watch not in self._calls:
                        continue  # the call ended meanwhile
                    self._calls.discard(watch)
                    killed = watch._killed = threading.Event()
                logger.info(
                    "run %s: fencing token moved from %s to %s during a call; killing it",
                    watch.run_id,
                    watch.token,
                    token,
                )
                watch.fired = True
                try:
                    run_session_close(watch.run_id)
                finally:
                    killed.set()
        except Exception:  # noqa: BLE001 - a failed check must not stop the watcher
            logger.exception("call watch failed")
        finally:
            # This thread's own database connection; never keep it between checks.
            close_old_connections()
            connections.close_all()


_watcher_lock = threading.Lock()
_watcher_instance: _Watcher | None = None
_watcher_pid = 0


def _watcher() -> _Watcher:
    """This process's watcher (started on first use, and anew in a forked child)."""
    global _watcher_instance, _watcher_pid
    with _watcher_lock:
        if _watcher_instance is None or _watcher_pid != os.getpid():
            _watcher_instance = _Watcher()
            _watcher_pid = os.getpid()
        return _watcher_instance
