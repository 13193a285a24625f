"""Sandboxes started before any run needs them, so a run's first call does not wait for one.

A `SessionPool` keeps up to `size` spare sessions of one backend, each started for no run: its
uid leased (bwrap) or its container created (docker), the supervisor hardened and waiting for
its configuration, an empty *slot* directory bound at /workspace, the egress socket's directory
bound with no proxy behind it. Nothing of a run is in it: no workspace, no environment, no
allowlist, no credentials, no read-only mounts.

A run adopts a spare (`take`): the run's workspace directory and the slot directory swap names
on the host (one atomic rename that exchanges them, then the run's entries move into the slot,
which is the directory the sandbox sees); then the backend hands the files to the sandbox's uid,
starts the run's own egress proxy when its policy allows any domain, and has the supervisor's
configuration (the run's environment and limits) go with the first call (`adopt`). An adopted session belongs to that
run until it is closed, like one opened for it; it never returns to the pool, so no session
ever carries one run's files, allowlist or credentials into another's.

Mounts cannot be added to a running sandbox, so a session whose spec asks for read-only mounts
(the browser, a dependency layer) or for other limits than the pool's is opened cold as before.

A daemon thread refills the pool in the background, starting a replacement shortly after a
spare was taken (`REFILL_DELAY_S`, so not beside the run's first calls); it sleeps on a
condition while the pool is full, so an idle pool costs no CPU. A start that fails is retried after a back-off. `close()`
closes every spare (uid leases returned, containers removed) and removes their slots. Slot
directories are named after their owner process (pid and start time): `sweep_slots()` removes
those of owners that died (the sandboxes themselves die with their owner and are swept by their
backend).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import secrets
import shutil
import stat
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from sandbox.types import Limits, SandboxError, Session, SessionSpec

logger = logging.getLogger(__name__)

#: the longest a failing refill waits before it tries again (seconds)
MAX_BACKOFF_S = 60.0
#: how long a refill waits after a spare was taken before it starts the replacement (seconds):
#: the run that took it makes its first calls meanwhile, without a sandbox start beside them
REFILL_DELAY_S = 0.5
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_libc: Any = None


class PoolableBackend(Protocol):
    name: str

    def open_pooled(self, *, workspace: Path, limits: Limits, pool_id: str) -> Any:
        """A started, unconfigured session (with `closed`, `alive()` and `close()`)."""
        ...

    def adopt(self, session: Any, spec: SessionSpec) -> None: ...


def _process_start(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return ""
    return fields[19].decode() if len(fields) > 19 else ""


def _slot_owner(name: str) -> tuple[int, str] | None:
    """(pid, start time) of the process a slot directory's name says owns it."""
    parts = name.split(".")
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return int(parts[0]), parts[1]


def sweep_slots(slot_root: Path) -> list[Path]:
    """Remove the slot directories under `slot_root` whose owner process is gone; return them.
    A live owner's slots are never touched."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(slot_root))
    except OSError:
        return removed
    for entry in entries:
        owner = _slot_owner(entry.name)
        if owner is None or not entry.is_dir(follow_symlinks=False):
            continue
        if _process_start(owner[0]) == owner[1]:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        if not os.path.lexists(entry.path):
            removed.append(Path(entry.path))
            logger.warning("removed the sandbox pool slot of a dead owner: %s", entry.path)
    return removed


def _exchange(a: Path, b: Path) -> None:
    """Swap the names of directories `a` and `b` atomically (renameat2 RENAME_EXCHANGE)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    rc = _libc.renameat2(
        _AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), ctypes.c_uint(_RENAME_EXCHANGE)
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"exchanging {a} and {b}: {os.strerror(err)}")


def workspace_move_into(slot: Path, workspace: Path, *, remove_old: bool = True) -> None:
    """Make the directory `slot` the directory named `workspace`, holding what `workspace`
    held: the two swap names atomically (so `workspace` always names a directory), then each
    entry moves over, and the emptied old directory, now named `slot`, is removed (unless
    `remove_old` is false: the caller removes it later). The slot takes the old directory's
    mode. Both must be directories of one file system. On failure everything is put back as far
    as possible and OSError raised."""
    st = os.lstat(workspace)
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(f"{workspace} is not a directory")
    os.chmod(slot, stat.S_IMODE(st.st_mode))
    _exchange(slot, workspace)
    moved: list[str] = []
    try:
        # `slot` now names the run's old directory, `workspace` the (empty) slot
        for name in os.listdir(slot):
            os.rename(slot / name, workspace / name)
            moved.append(name)
        if remove_old:
            os.rmdir(slot)
    except OSError:
        with contextlib.suppress(OSError):
            for name in moved:
                os.rename(workspace / name, slot / name)
            _exchange(slot, workspace)
        raise


@dataclass
class _Spare:
    session: Any
    slot: Path


class SessionPool:
    """Up to `size` spare sessions of `backend` (see the module's docstring)."""

    def __init__(
        self,
        backend: PoolableBackend,
        *,
        size: int,
        slot_root: Path,
        limits: Limits | None = None,
        refill_delay_s: float = REFILL_DELAY_S,
    ) -> None:
        self.backend = backend
        self.refill_delay_s = refill_delay_s
        self.size = max(0, int(size))
        self.slot_root = Path(slot_root)
        self.limits = limits or Limits()
        self._spares: list[_Spare] = []
        self._starting = 0
        self._closed = False
        self._last_take = 0.0
        #: old workspace directories a take emptied, for the refill thread to remove
        self._emptied: list[Path] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._owner = f"{os.getpid()}.{_process_start(os.getpid())}"
        #: how many spares were adopted, and how many adoptions failed (the run then started cold)
        self.adopted = 0
        self.failed = 0

    # ------------------------------------------------------------------ lifetime

    def start(self) -> SessionPool:
        """Start filling the pool in the background (idempotent)."""
        with self._cond:
            if self._closed or self.size == 0:
                return self
            if self._thread is None or not self._thread.is_alive():
                self.slot_root.mkdir(mode=0o711, parents=True, exist_ok=True)
                self._thread = threading.Thread(
                    target=self._refill_loop, name="sandbox-pool-refill", daemon=True
                )
                self._thread.start()
        return self

    def close(self) -> None:
        """Stop refilling, close every spare and remove its slot. Idempotent."""
        with self._cond:
            self._closed = True
            spares, self._spares = self._spares, []
            self._cond.notify_all()
        for spare in spares:
            self._discard(spare)
        with self._cond:
            emptied, self._emptied = self._emptied, []
        self._remove_emptied(emptied)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=30)
        # a start that was in flight when we closed discards its own spare (see _refill_loop)

    @property
    def closed(self) -> bool:
        return self._closed

    def spares(self) -> list[Any]:
        """The spare sessions now waiting (for inspection)."""
        with self._cond:
            return [spare.session for spare in self._spares]

    def __len__(self) -> int:
        with self._cond:
            return len(self._spares)

    def wait_full(self, timeout: float) -> bool:
        """Wait until the pool holds `size` spares; False when `timeout` passed first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._spares) < self.size:
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    return False
                self._cond.wait(left)
            return True

    # ------------------------------------------------------------------ adoption

    def fits(self, spec: SessionSpec) -> bool:
        """Whether a spare can become the session of `spec`: no read-only mounts (they are
        fixed when a sandbox starts) and the pool's limits (the idle timeout aside)."""
        if spec.readonly_mounts:
            return False
        return replace(spec.limits, idle_timeout_s=0) == replace(self.limits, idle_timeout_s=0)

    def take(self, spec: SessionSpec) -> Session | None:
        """A spare made the session of `spec` (see the module's docstring), or None when the
        pool has none or `spec` does not fit; the caller then opens one cold. A spare that
        fails to be adopted is closed (its run's workspace is left as it was) and None
        returned."""
        if not self.fits(spec):
            return None
        while True:
            with self._cond:
                if self._closed or not self._spares:
                    return None
                spare = self._spares.pop(0)
                self._last_take = time.monotonic()
                self._cond.notify_all()  # the refill thread starts a replacement
            if spare.session.alive():
                break
            # stopped while it waited (killed or removed from outside): the next one
            logger.warning("a pooled sandbox had stopped before it was adopted")
            self.failed += 1
            self._discard(spare)
        try:
            # the emptied old directory is removed by the refill thread, off the hot path
            workspace_move_into(spare.slot, Path(spec.workspace), remove_old=False)
            with self._cond:
                self._emptied.append(spare.slot)
        except (OSError, SandboxError) as exc:
            self.failed += 1
            logger.warning("a pooled sandbox could not take workspace %s: %s", spec.workspace, exc)
            self._discard(spare)
            return None
        try:
            self.backend.adopt(spare.session, spec)
        except Exception as exc:  # noqa: BLE001 - the run then opens its session cold
            self.failed += 1
            logger.warning("a pooled sandbox could not be adopted by %s: %s", spec.session_id, exc)
            with contextlib.suppress(Exception):
                spare.session.close()
            return None
        self.adopted += 1
        session: Session = spare.session
        return session

    # ------------------------------------------------------------------ refilling

    def _new_slot(self) -> Path:
        slot = self.slot_root / f"{self._owner}.{secrets.token_hex(6)}"
        slot.mkdir(mode=0o700)
        return slot

    def _start_one(self) -> _Spare:
        slot = self._new_slot()
        try:
            session = self.backend.open_pooled(
                workspace=slot, limits=self.limits, pool_id=f"pool-{secrets.token_hex(6)}"
            )
        except BaseException:
            shutil.rmtree(slot, ignore_errors=True)
            raise
        return _Spare(session=session, slot=slot)

    def _refill_loop(self) -> None:
        backoff = 0.0
        while True:
            with self._cond:
                while not self._closed and len(self._spares) + self._starting >= self.size:
                    self._cond.wait()
                # off the hot path: not while the run that took a spare makes its first calls
                pause = self._last_take + self.refill_delay_s - time.monotonic()
                if pause > 0 and not self._closed:
                    self._cond.wait(min(pause, self.refill_delay_s))
                emptied, self._emptied = self._emptied, []
                if self._closed:
                    self._remove_emptied(emptied)
                    return
                self._starting += 1
            self._remove_emptied(emptied)
            spare: _Spare | None = None
            try:
                spare = self._start_one()
                backoff = 0.0
            except Exception:  # noqa: BLE001 - the pool must survive a sandbox that cannot start
                backoff = min(MAX_BACKOFF_S, max(1.0, backoff * 2))
                logger.exception("a pooled sandbox could not start; retrying in %.0f s", backoff)
            with self._cond:
                self._starting -= 1
                if spare is not None and not self._closed:
                    self._spares.append(spare)
                    spare = None
                self._cond.notify_all()
                if backoff and not self._closed:
                    self._cond.wait(backoff)
            if spare is not None:  # closed while it started
                self._discard(spare)

    @staticmethod
    def _remove_emptied(emptied: list[Path]) -> None:
        for path in emptied:
            try:
                os.rmdir(path)
            except OSError as exc:
                logger.warning("could not remove the emptied directory %s: %s", path, exc)

    @staticmethod
    def _discard(spare: _Spare) -> None:
        try:
            spare.session.close()
        except Exception:  # noqa: BLE001 - keep going: the slot is removed either way
            logger.exception("closing a pooled sandbox failed")
        shutil.rmtree(spare.slot, ignore_errors=True)


__all__ = ["PoolableBackend", "SessionPool", "sweep_slots", "workspace_move_into"]
