"""Starting bwrap: finding the binary, the launcher that runs between fork and exec for root
workers (private mount namespace, staged binds, uid drop) and the long-lived spawner thread.

A root worker prefers the exec'd launcher program (sandbox/launcher/motor-launch.c, installed by
bin/setup-host): Popen then has no preexec_fn and no uid/gid arguments, so CPython starts it
with vfork instead of copying the worker's whole address space. Without it, `_Launcher` does the
same steps in the forked child (a full fork: slower with a big worker, equally safe)."""

from __future__ import annotations

import functools
import logging
import os
import queue
import shutil
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandbox.types import SandboxError

logger = logging.getLogger(__name__)

#: where bin/setup-host installs the launcher (MOTOR_SANDBOX_LAUNCHER overrides, empty: none)
DEFAULT_LAUNCHER = "/usr/local/libexec/motor-cortex/motor-launch"


def _find_bwrap() -> str:
    path = shutil.which("bwrap", path="/usr/local/bin:/usr/bin:/bin")
    if path is None:
        raise SandboxError(
            "bubblewrap (bwrap) is not installed; install the 'bubblewrap' package "
            "(bin/setup-host does) — commands are never run unsandboxed"
        )
    return path


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


def _unsafe(path: Path) -> str | None:
    """Why `path` (run as root) could be replaced by someone other than root, or None: it and
    every directory above it must be root's and writable by no one else (a sticky directory
    such as /tmp is fine above it: its other users cannot rename or remove root's entries)."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode) or not st.st_mode & stat.S_IXUSR:
        return "not an executable file"
    if st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "not root's, or writable by others"
    for parent in path.parents:
        st = os.stat(parent)
        writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if st.st_uid != 0 or (writable and not st.st_mode & stat.S_ISVTX):
            return f"{parent} is not root's, or writable by others"
    return None


@functools.lru_cache(maxsize=8)
def usable_launcher(configured: str) -> str | None:
    """The launcher program at `configured` (resolved) when a root worker may run it, else None
    (the preexec_fn path). Checked once per path and process; says which path is taken, once."""
    if not configured:
        logger.info(
            "sandbox launcher disabled (MOTOR_SANDBOX_LAUNCHER is empty): bwrap is "
            "started through a full fork of the worker"
        )
        return None
    try:
        path = Path(configured).resolve(strict=True)
        reason = _unsafe(path)
    except OSError as exc:
        reason = exc.strerror or str(exc)
    if reason is not None:
        logger.warning(
            "sandbox launcher %s is not usable (%s): bwrap is started through a full fork of "
            "the worker (bin/setup-host installs the launcher)",
            configured,
            reason,
        )
        return None
    logger.info("sandbox launcher %s in use: bwrap is started with vfork", path)
    return str(path)


def launcher_argv(
    launcher: str, staged: list[tuple[bytes, bytes]], uid: int, gid: int, args: list[str]
) -> list[str | bytes]:
    """The command line that has `launcher` do `_Launcher`'s steps, then exec `args`."""
    argv: list[str | bytes] = [launcher, str(uid), str(gid), str(len(staged))]
    for source, target in staged:
        argv += [source, target]
    return [*argv, "--", *args]


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
