"""Killing and reaping what a command leaves behind in the sandbox's PID namespace."""

from __future__ import annotations

import os
import time

#: SIGKILL on Linux (signal.SIGKILL; importing signal would bring enum)
SIGKILL = 9

#: how long to wait for killed processes to disappear after a call (seconds)
SWEEP_GRACE_S = 2.0


#: the root of a resident's process tree (resident.py), spared by the sweep with its descendants
_spared_root: int | None = None


def spare(pid: int | None) -> None:
    """Spare process `pid` and its descendants from every sweep (None: spare nothing)."""
    global _spared_root
    _spared_root = pid


def descendants(root: int) -> list[int]:
    """Every live process below `root` (children, their children, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    found: list[int] = []
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _protected_pids() -> set[int]:
    """This process, init, this process's ancestors inside the namespace, and the spared
    resident's tree."""
    protected = {1, os.getpid()}
    if _spared_root is not None:
        protected.add(_spared_root)
        protected.update(descendants(_spared_root))
    pid = os.getppid()
    while pid > 1 and pid not in protected:
        protected.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                stat = fh.read()
            pid = int(stat.rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return protected


def _live_foreign_pids(protected: set[int], uid: int) -> list[int]:
    found: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid in protected:
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            with open(f"/proc/{pid}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X"):
            found.append(pid)
    return found


def _own_children() -> list[int]:
    children: list[int] = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return children
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children") as fh:
                children.extend(int(p) for p in fh.read().split())
        except (OSError, ValueError):
            continue
    return children


def reap_orphans(keep: int | None = None) -> None:
    """Reap exited children other than `keep`. As the namespace's PID 1 the supervisor inherits
    every orphan, and a zombie nobody reaps would hold a process slot (RLIMIT_NPROC) forever."""
    for pid in _own_children():
        if pid == keep:
            continue
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue


def sweep_processes(keep: int | None = None) -> bool:
    """SIGKILL every process this uid may signal except this one, init and our ancestors, reap
    them (all but `keep`, whose status the caller collects) and wait, bounded, until none is left.
    True when the namespace is clean."""
    return _sweep(keep)[0]


def _sweep(keep: int | None) -> tuple[bool, bool]:
    """sweep_processes(); also says whether there was nothing at all to kill or reap."""
    uid = os.getuid()
    if uid == 0 or os.geteuid() == 0:
        # as root (this code used outside a sandbox) "every process this uid may signal" is
        # every process of the machine
        raise PermissionError("refusing to sweep processes as root")
    protected = _protected_pids()
    deadline = time.monotonic() + SWEEP_GRACE_S
    while True:
        ancestors_only = protected == {1, os.getpid()}
        if ancestors_only:
            # kill(-1) reaches every process we may signal but ourselves and init; it is the only
            # way to catch a fork bomb that keeps spawning while we walk /proc.
            try:
                os.kill(-1, SIGKILL)
            except ProcessLookupError:
                # nothing at all was left to signal (the common case; an unreaped zombie would
                # count): neither a /proc walk nor reaping is needed
                return True, True
            except OSError:
                pass
        reap_orphans(keep)
        leftovers = _live_foreign_pids(protected, uid)
        if not leftovers:
            return True, False
        for pid in leftovers:
            try:
                os.kill(pid, SIGKILL)
            except OSError:
                pass
        if time.monotonic() > deadline:
            return False, False
        time.sleep(0.005)
