"""Opening sessions and making sure none outlives its use.

``open_session(spec, backend="bwrap")`` opens a session on a named backend (or a Backend object)
and registers it. The registry closes a session once it has been idle longer than
``spec.limits.idle_timeout_s`` (a daemon reaper thread checks every ``REAP_INTERVAL_S``), and closes
every session still open when the interpreter exits. A session is never closed while one of its
calls is running. If the owning process dies outright, bwrap's --die-with-parent (and the
container's removal for docker) take the sandbox down.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator

from sandbox.backends import get_backend
from sandbox.types import Backend, ExecRequest, ExecResult, SandboxError, Session, SessionSpec

logger = logging.getLogger(__name__)

#: how often the reaper looks for idle sessions (seconds)
REAP_INTERVAL_S = 5.0


class ManagedSession:
    """A Session that records its last use for the registry; otherwise it is the backend's
    session (`.inner`)."""

    def __init__(self, inner: Session, idle_timeout_s: float, registry: SessionRegistry) -> None:
        self.inner = inner
        self.id = inner.id
        self.backend = inner.backend
        self.idle_timeout_s = idle_timeout_s
        self.last_used = time.monotonic()
        #: (st_dev, st_ino) of the workspace directory the session has at /workspace, when its
        #: opener recorded it
        self.workspace_identity: tuple[int, int] | None = None
        self._busy = 0
        self._lock = threading.Lock()
        self._registry = weakref.ref(registry)

    @property
    def closed(self) -> bool:
        return self.inner.closed

    @property
    def busy(self) -> bool:
        return self._busy > 0

    def idle_for(self, now: float | None = None) -> float:
        return (time.monotonic() if now is None else now) - self.last_used

    def exec(self, request: ExecRequest) -> ExecResult:
        with self._lock:
            self._busy += 1
            self.last_used = time.monotonic()
        try:
            return self.inner.exec(request)
        finally:
            with self._lock:
                self._busy -= 1
                self.last_used = time.monotonic()

    def close(self) -> None:
        try:
            self.inner.close()
        finally:
            registry = self._registry()
            if registry is not None:
                registry.forget(self)

    def __enter__(self) -> ManagedSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SessionRegistry:
    """Open sessions of this process; closes idle ones from a daemon thread."""

    def __init__(
        self,
        reap_interval_s: float = REAP_INTERVAL_S,
        on_count: Callable[[int], None] | None = None,
    ) -> None:
        """`on_count` hears the number of open sessions after every open and every close,
        whoever closed it (a caller, the idle reaper, close_all), so a gauge fed by it is
        never stale."""
        self.reap_interval_s = reap_interval_s
        self._on_count = on_count
        self._sessions: dict[str, ManagedSession] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._reaper: threading.Thread | None = None

    def __iter__(self) -> Iterator[ManagedSession]:
        with self._lock:
            return iter(list(self._sessions.values()))

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def get(self, session_id: str) -> ManagedSession | None:
        with self._lock:
            return self._sessions.get(session_id)

    def add(self, session: Session, idle_timeout_s: float) -> ManagedSession:
        managed = ManagedSession(session, idle_timeout_s, self)
        with self._lock:
            if managed.id in self._sessions:
                raise SandboxError(f"a session with id {managed.id!r} is already open")
            self._sessions[managed.id] = managed
            if self._reaper is None or not self._reaper.is_alive():
                self._reaper = threading.Thread(
                    target=self._reap_loop, name="sandbox-session-reaper", daemon=True
                )
                self._reaper.start()
            count = len(self._sessions)
        self._counted(count)
        return managed

    def forget(self, session: ManagedSession) -> None:
        with self._lock:
            if self._sessions.get(session.id) is not session:
                return
            del self._sessions[session.id]
            count = len(self._sessions)
        self._counted(count)

    def _counted(self, count: int) -> None:
        if self._on_count is not None:
            try:
                self._on_count(count)
            except Exception:  # noqa: BLE001 - a listener must never break a session's life
                logger.exception("the session count listener failed")

    def close_idle(self, now: float | None = None) -> list[str]:
        """Close every session idle longer than its idle timeout; return their ids."""
        now = time.monotonic() if now is None else now
        with self._lock:
            candidates = list(self._sessions.values())
        closed: list[str] = []
        for session in candidates:
            if session.closed:
                self.forget(session)
                continue
            if not session.busy and session.idle_for(now) > session.idle_timeout_s:
                logger.info(
                    "closing sandbox session %s after %.0f s idle",
                    session.id,
                    session.idle_for(now),
                )
                try:
                    session.close()
                except Exception:  # noqa: BLE001 - one bad session must not stop the reaper
                    logger.exception("closing idle sandbox session %s failed", session.id)
                closed.append(session.id)
        return closed

    def close_all(self) -> None:
        with self._lock:
            sessions = list(self._sessions.values())
        for session in sessions:
            try:
                session.close()
            except Exception:  # noqa: BLE001 - keep closing the others
                logger.exception("closing sandbox session %s failed", session.id)

    def _reap_loop(self) -> None:
        while True:
            self._wake.wait(self.reap_interval_s)
            self._wake.clear()
            try:
                self.close_idle()
            except Exception:  # noqa: BLE001 - the reaper must survive anything
                logger.exception("sandbox session reaper failed")
            with self._lock:
                if not self._sessions:
                    self._reaper = None
                    return


#: the process-wide registry used by open_session()
registry = SessionRegistry()
atexit.register(registry.close_all)


def open_session(
    spec: SessionSpec,
    backend: str | Backend = "bwrap",
    *,
    allow_local: bool = False,
    session_registry: SessionRegistry | None = None,
) -> ManagedSession:
    """Open a session on `backend` (a name for get_backend, or a Backend) and register it for
    idle and exit clean-up. Raises SandboxError when the sandbox cannot start."""
    chosen = get_backend(backend, allow_local=allow_local) if isinstance(backend, str) else backend
    session = chosen.open(spec)
    target = registry if session_registry is None else session_registry
    try:
        return target.add(session, spec.limits.idle_timeout_s)
    except BaseException:
        session.close()
        raise


__all__ = ["ManagedSession", "SessionRegistry", "open_session", "registry"]
