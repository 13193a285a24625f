"""Host uids of bwrap sessions: the configured range, an exclusive lease of one uid per live
session, the processes a uid still runs and handing a workspace to a uid."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
import stat
from pathlib import Path
from typing import ClassVar

from sandbox.types import SandboxError

logger = logging.getLogger(__name__)


def _parse_uid_range(text: str) -> range:
    try:
        low_s, high_s = text.split("-", 1)
        low, high = int(low_s), int(high_s)
    except ValueError as exc:
        raise SandboxError(
            f"MOTOR_SANDBOX_UID_RANGE must look like 600000-609999, got {text!r}"
        ) from exc
    if not (1000 <= low <= high < 2**32 - 2):
        raise SandboxError(f"MOTOR_SANDBOX_UID_RANGE {text!r} is out of bounds (1000..2^32-3)")
    return range(low, high + 1)


#: what a uid's lock file holds while it is not leased after a holder that saw its sandbox end
#: with nothing left running (any other content: a holder leased it and did not say so)
_CLEAN = b"clean"


class _UidLease:
    """Exclusive use of one host uid for one session, across processes (flock on a file).

    A uid is leased only when no process of it runs. The holder of a lease says, when it
    releases it, whether it knows that nothing of its sandbox is left (`release(clean=True)`,
    written to the lock file); the next holder looks through /proc for processes of the uid
    only when the last one did not say so (it died, or its sandbox ended in a way that leaves
    doubt). A process tries the uids it released clean itself first, so one that opens sandbox
    after sandbox mostly leases a uid without that look (a walk over every process of the
    host, twice per sandbox before)."""

    #: uids this process released clean, the most recent last (at most _MAX_REMEMBERED)
    _released_clean: ClassVar[list[int]] = []
    _MAX_REMEMBERED = 64

    def __init__(self, uid: int, fd: int) -> None:
        self.uid = uid
        self._fd = fd

    @classmethod
    def acquire(cls, uids: range, lock_dir: Path) -> _UidLease:
        remembered = cls._released_clean
        while remembered:
            try:
                uid = remembered.pop()
            except IndexError:  # taken by another thread meanwhile
                break
            if uid in uids and (lease := cls._try(uid, lock_dir)) is not None:
                return lease
        start = secrets.randbelow(len(uids))
        for i in range(len(uids)):
            lease = cls._try(uids[(start + i) % len(uids)], lock_dir)
            if lease is not None:
                return lease
        raise SandboxError(f"no free sandbox uid in {uids.start}-{uids.stop - 1}")

    @classmethod
    def _try(cls, uid: int, lock_dir: Path) -> _UidLease | None:
        """A lease of `uid` when nobody holds it and no process of it runs, else None."""
        fd = os.open(lock_dir / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            clean = os.pread(fd, len(_CLEAN) + 1, 0) == _CLEAN
            # leased now: whoever finds the file so after us (we died holding it) must look
            os.ftruncate(fd, 0)
        except OSError:
            clean = False
        if not clean and _processes_of_uid(uid):
            # a process of a previous holder is still alive; never share a uid with it
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            return None
        return cls(uid, fd)

    def release(self, *, clean: bool = False) -> None:
        """Give the uid up; `clean`: the holder knows that no process of it is left."""
        if self._fd >= 0:
            if clean:
                try:
                    os.pwrite(self._fd, _CLEAN, 0)
                except OSError:
                    clean = False
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1
            if clean:
                remembered = self._released_clean
                remembered.append(self.uid)
                del remembered[: -self._MAX_REMEMBERED]


def _processes_of_uid(uid: int) -> list[int]:
    """Live (non-zombie) processes owned by `uid`."""
    pids: list[int] = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid != uid:
                    continue
                with open(f"/proc/{name}/stat", "rb") as fh:
                    state = fh.read().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state not in (b"Z", b"X"):
                pids.append(int(name))
    return pids


def _chown_tree(root: Path, uid: int, gid: int, sandbox_uids: range) -> None:
    """Give the whole workspace to the sandbox uid without ever following a symlink (fd-relative
    walk, so a swapped path cannot redirect the chown outside the tree). A regular file with
    several hard links that no sandbox uid owns is left alone: one of its other names may lie
    outside the workspace."""
    os.chown(root, uid, gid, follow_symlinks=False)
    for _dirpath, dirnames, filenames, dirfd in os.fwalk(root, follow_symlinks=False):
        for name in dirnames + filenames:
            try:
                st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and st.st_uid not in sandbox_uids:
                    logger.warning("not chowning multiply-linked workspace file %s", name)
                    continue
                os.chown(name, uid, gid, dir_fd=dirfd, follow_symlinks=False)
            except FileNotFoundError:
                continue
