"""What confines a command: the supervisor's own hardening, the rlimits a command gets, the
set-up between fork and exec on the slow path and the spawner thread of the fast path."""

from __future__ import annotations

import _thread
import resource

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any

    from .protocol import Config

if TYPE_CHECKING or __package__:
    from .siblings import _load_sibling
else:  # inside the sandbox, where this directory is first on sys.path (see supervisor.py)
    from siblings import _load_sibling


_PR_SET_DUMPABLE = 4
_PR_SET_NO_NEW_PRIVS = 38


def harden_self() -> None:
    """Make the supervisor unreadable and untraceable by the commands it runs (same uid)."""
    prctl = _load_sibling("seccomp").prctl
    prctl(_PR_SET_DUMPABLE, 0)
    prctl(_PR_SET_NO_NEW_PRIVS, 1)


#: what a command gets, in the order applied: (resource, soft, hard) for each limit that is on
LimitTargets = list[tuple[int, int, int]]

_INF = resource.RLIM_INFINITY


def _at_most(value: int, ceiling: int) -> bool:
    """value <= ceiling for rlimit values, where RLIM_INFINITY is the largest."""
    if ceiling == _INF:
        return True
    return value != _INF and value <= ceiling


def _lower(a: int, b: int) -> int:
    return a if _at_most(a, b) else b


#: address space a command may hold beyond `memory_bytes` without writing to it (bytes). A JIT
#: reserves room it never fills: V8 (node) maps a 512 MiB code range inaccessible at start and
#: makes pages writable as it compiles, so node cannot start under a 512 MiB address-space cap.
ADDRESS_RESERVE_BYTES = 1024 * 1024 * 1024


def limit_targets(config: Config, file_size: int | None) -> LimitTargets:
    """The rlimits of the next command (`file_size`: its RLIMIT_FSIZE, None for none).

    Memory: RLIMIT_DATA at `memory_bytes` bounds what a process can write to (every private
    writable mapping and the heap; since Linux 4.7 mmap and mprotect are counted too, so a
    reservation counts once it is made writable). RLIMIT_AS at `memory_bytes` +
    ADDRESS_RESERVE_BYTES stays as a backstop for shared mappings, which RLIMIT_DATA does not
    count."""
    targets: LimitTargets = []
    if config.memory_bytes:
        address_space = config.memory_bytes + ADDRESS_RESERVE_BYTES
        targets.append((resource.RLIMIT_AS, address_space, address_space))
        targets.append((resource.RLIMIT_DATA, config.memory_bytes, config.memory_bytes))
    if config.max_processes:
        targets.append((resource.RLIMIT_NPROC, config.max_processes, config.max_processes))
    if file_size is not None:
        targets.append((resource.RLIMIT_FSIZE, file_size, file_size))
    if config.open_files:
        targets.append((resource.RLIMIT_NOFILE, config.open_files, config.open_files))
    if config.cpu_seconds:
        # SIGXCPU at the soft limit, SIGKILL one second later
        targets.append((resource.RLIMIT_CPU, config.cpu_seconds, config.cpu_seconds + 1))
    targets.append((resource.RLIMIT_CORE, 0, 0))
    return targets


def _rlimit_changes_refused() -> bool:
    """True when this thread may not change rlimits at all (it runs under the command filter,
    e.g. run-one started as a command): a no-op setrlimit, which the kernel always allows, fails."""
    try:
        resource.setrlimit(resource.RLIMIT_CORE, resource.getrlimit(resource.RLIMIT_CORE))
    except (ValueError, PermissionError):
        # CPython reports EPERM from setrlimit as ValueError("not allowed to raise ...")
        return True
    return False


class _ChildSetup:
    """What runs between fork and exec on the slow path (a full fork): rlimits, then no_new_privs
    and the seccomp filter. Only rlimits and prctl there — everything that allocates is prepared
    up front."""

    def __init__(self, *, unix_pairs: bool = False) -> None:
        seccomp = _load_sibling("seccomp")
        self._filter = seccomp.prepare(allow_unix_pairs=unix_pairs)
        #: the limits to set in the child; chosen per call by `prepare`
        self.targets: LimitTargets = []

    def prepare(self, targets: LimitTargets) -> None:
        """Choose what the child must set. A limit this process already holds at least as tight
        is skipped (it is inherited); so is a soft limit at least as tight when this process may
        not change rlimits at all (then nothing under it can raise one either). Anything else is
        set in the child, and a refusal there fails the call."""
        refused = _rlimit_changes_refused()
        needed: LimitTargets = []
        for res, soft, hard in targets:
            cur_soft, cur_hard = resource.getrlimit(res)
            if _at_most(cur_soft, soft) and (refused or _at_most(cur_hard, hard)):
                continue
            needed.append((res, soft, hard))
        self.targets = needed

    def __call__(self) -> None:
        for res, soft, hard in self.targets:
            resource.setrlimit(res, (soft, hard))
        self._filter.install()


class _Spawner:
    """A thread under the command filter that starts the commands (the fast path).

    seccomp filters belong to threads, and a child inherits the filters of the thread that forks
    it. This thread adds the command profile (no AF_UNIX, no rlimit changes, ...) on top of the
    supervisor's own, so what it starts is filtered from its first instruction without any code
    between fork and exec — CPython then uses vfork() instead of a full fork(). The main thread
    keeps the supervisor profile: it may set the limits the commands inherit, and the egress
    bridge's threads may reach the host's unix socket."""

    def __init__(self, *, unix_pairs: bool = False) -> None:
        command_filter = _load_sibling("seccomp").prepare(allow_unix_pairs=unix_pairs)
        self._go = _thread.allocate_lock()
        self._go.acquire()
        self._done = _thread.allocate_lock()
        self._done.acquire()
        self._job: Any = None
        self._value: Any = None
        self._error: BaseException | None = None
        # a bare thread (threading.Thread less its bookkeeping): it lives as long as the process
        _thread.start_new_thread(self._loop, (command_filter,))
        self._done.acquire()
        if self._error is not None:
            raise RuntimeError(f"the command filter could not be installed: {self._error}")

    def _loop(self, command_filter: Any) -> None:
        try:
            command_filter.install()
        except BaseException as exc:  # noqa: BLE001 - reported by __init__
            self._error = exc
            self._done.release()
            return
        self._done.release()
        while True:
            self._go.acquire()
            try:
                self._value, self._error = self._job(), None
            except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
                self._value, self._error = None, exc
            self._done.release()

    def call(self, job: Any) -> Any:
        """Run `job` on the spawner thread and return its value (or raise its exception)."""
        self._job = job
        self._go.release()
        self._done.acquire()
        value, error = self._value, self._error
        self._job = self._value = self._error = None
        if error is not None:
            raise error
        return value
