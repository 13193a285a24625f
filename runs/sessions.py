"""The sandbox session of each run, kept warm across its slices within one worker process.

A run's first sandboxed call opens a session (workspace, egress allowlist) registered under the
run id in this process's registry (`sandbox.session.SessionRegistry`). Later slices of the same run
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
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connections

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

            _registry = SessionRegistry()
            _registry_pid = os.getpid()
            # bwrap dies with us anyway (--die-with-parent); this also stops proxies and
            # removes runtime directories on a normal exit (pool recycling, shutdown).
            atexit.register(_registry.close_all)
        return _registry


def idle_timeout_s() -> float:
    return float(getattr(settings, "MOTOR_SANDBOX_IDLE_TIMEOUT_SECONDS", 300))


def run_session_get(
    *, run_id: str, workspace: str, allowed_domains: tuple[str, ...]
) -> Any:  # sandbox.session.ManagedSession
    """The open session of `run_id` in this process, opened now when there is none.

    Raises sandbox.types.SandboxError when the sandbox cannot start; nothing runs unsandboxed.
    """
    registry = _sessions()
    session = registry.get(run_id)
    if session is not None and not session.closed:
        return session
    if session is not None:
        registry.forget(session)
    from dataclasses import replace

    from sandbox.session import open_session
    from sandbox.types import Limits, NetworkPolicy, SessionSpec

    spec = SessionSpec(
        workspace=Path(workspace),
        network=NetworkPolicy(allowed_domains=allowed_domains),
        limits=replace(Limits(), idle_timeout_s=idle_timeout_s()),
        session_id=run_id,
    )
    return open_session(
        spec,
        settings.SANDBOX_BACKEND,
        allow_local=bool(getattr(settings, "SANDBOX_ALLOW_LOCAL", False)),
        session_registry=registry,
    )


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


def open_run_sessions() -> list[str]:
    """Run ids with an open session in this process."""
    return [session.id for session in _sessions() if not session.closed]


def watch_interval_s() -> float:
    return float(getattr(settings, "MOTOR_CALL_WATCH_INTERVAL_SECONDS", 1.0))


class CallWatch:
    """Kills a running call's session once the run's fencing token is no longer `token`.

    Use as a context manager around the call. The first check comes one interval after the call
    started, so short calls cost no query at all.
    """

    def __init__(self, *, run_id: str, token: int) -> None:
        self.run_id = run_id
        self.token = token
        self.fired = False
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, name=f"motor-call-watch-{run_id}", daemon=True
        )

    def __enter__(self) -> CallWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        interval = watch_interval_s()
        try:
            while not self._stop.wait(interval):
                current = (
                    MotorRun.objects.filter(pk=self.run_id)
                    .values_list("lease_token", flat=True)
                    .first()
                )
                # None: the row is gone or not visible to this connection; nothing to judge.
                if current is not None and current != self.token:
                    logger.info(
                        "run %s: fencing token moved from %s to %s during a call; killing it",
                        self.run_id,
                        self.token,
                        current,
                    )
                    self.fired = True
                    run_session_close(self.run_id)
                    return
        except Exception:  # noqa: BLE001 - a failed check must not kill the worker
            logger.exception("run %s: call watch failed", self.run_id)
        finally:
            # This thread's own database connection; never leave it open.
            close_old_connections()
            connections.close_all()
