"""A classic-BPF seccomp filter for commands run inside a sandbox (stdlib + ctypes only).

This module runs inside the sandbox under the system ``/usr/bin/python3`` and is also importable
on the host. It builds the filter with ``struct`` and installs it with ``prctl`` (`prctl`, on
``_ctypes``, the C half of ctypes), so it needs neither libseccomp nor any third-party package.

The filter's default is to allow; the listed system calls fail with ``EPERM`` (``clone3`` fails
with ``ENOSYS`` so that libc falls back to ``clone``, whose flags *can* be inspected). A system
call made under a foreign ABI (x32 on x86_64, or an architecture the filter was not built for)
kills the process, because the syscall numbers would not mean what the filter assumes.

Two profiles:

* ``build_filter()`` — for tool commands: also refuses ``socket`` and ``socketpair`` with the
  AF_UNIX, AF_NETLINK, AF_PACKET and AF_VSOCK domains, and every change of a resource limit:
  ``setrlimit`` fails, and ``prlimit64`` only reads the caller's own limits (pid 0, no new
  value). A command therefore keeps exactly the limits it was started with (the supervisor may
  hand them over as soft limits, see supervisor.py) and cannot touch another process's limits.
* ``build_filter(allow_unix_pairs=True)`` — for the commands of a session that runs a long-lived
  server (an MCP skill): the same, except that ``socketpair(AF_UNIX)`` is allowed. A pair of
  connected, unnamed sockets reaches nothing outside the process that made it, and asyncio
  cannot start an event loop without one (its self-pipe); ``socket(AF_UNIX)``, which could
  connect to a named socket, stays refused.
* ``build_filter(allow_unix_sockets=True, allow_rlimit_changes=True)`` — for the supervisor
  itself, whose egress bridge must connect to the host's unix socket and which sets the limits
  its commands inherit; everything else is refused the same way.

A filter is installed on the calling thread only (no TSYNC), so one process can hold threads
under different profiles; a child inherits the filters of the thread that forked it.
"""

from __future__ import annotations

import _ctypes
import errno
import os
import struct

# --- constants from <linux/seccomp.h>, <linux/filter.h>, <linux/audit.h>, <linux/prctl.h> ---
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2

_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000

_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K

# offsets in struct seccomp_data (little-endian: the low 32 bits of an argument come first)
_OFF_NR = 0
_OFF_ARCH = 4
_OFF_ARG0 = 16
_OFF_ARG2 = 32

_X32_SYSCALL_BIT = 0x40000000

AF_UNIX = 1
AF_NETLINK = 16
AF_PACKET = 17
AF_VSOCK = 40
DENIED_SOCKET_DOMAINS = (AF_UNIX, AF_NETLINK, AF_PACKET, AF_VSOCK)

# clone(2) flags that create namespaces
_CLONE_NS_FLAGS = (
    0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
)

_ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (
        0xC000003E,  # AUDIT_ARCH_X86_64
        {
            "socket": 41,
            "socketpair": 53,
            "setrlimit": 160,
            "prlimit64": 302,
            "clone": 56,
            "clone3": 435,
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "pidfd_getfd": 438,
            "kcmp": 312,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "keyctl": 250,
            "add_key": 248,
            "request_key": 249,
            "mount": 165,
            "umount2": 166,
            "pivot_root": 155,
            "chroot": 161,
            "move_mount": 429,
            "open_tree": 428,
            "fsopen": 430,
            "fsconfig": 431,
            "fsmount": 432,
            "fspick": 433,
            "mount_setattr": 442,
            "unshare": 272,
            "setns": 308,
            "bpf": 321,
            "perf_event_open": 298,
            "kexec_load": 246,
            "kexec_file_load": 320,
            "init_module": 175,
            "finit_module": 313,
            "delete_module": 176,
            "userfaultfd": 323,
            "open_by_handle_at": 304,
            "acct": 163,
            "swapon": 167,
            "swapoff": 168,
            "reboot": 169,
            "syslog": 103,
            "iopl": 172,
            "ioperm": 173,
        },
    ),
    "aarch64": (
        0xC00000B7,  # AUDIT_ARCH_AARCH64
        {
            "socket": 198,
            "socketpair": 199,
            "setrlimit": 164,
            "prlimit64": 261,
            "clone": 220,
            "clone3": 435,
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "pidfd_getfd": 438,
            "kcmp": 272,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "keyctl": 219,
            "add_key": 217,
            "request_key": 218,
            "mount": 40,
            "umount2": 39,
            "pivot_root": 41,
            "chroot": 51,
            "move_mount": 429,
            "open_tree": 428,
            "fsopen": 430,
            "fsconfig": 431,
            "fsmount": 432,
            "fspick": 433,
            "mount_setattr": 442,
            "unshare": 97,
            "setns": 268,
            "bpf": 280,
            "perf_event_open": 241,
            "kexec_load": 104,
            "kexec_file_load": 294,
            "init_module": 105,
            "finit_module": 273,
            "delete_module": 106,
            "userfaultfd": 282,
            "open_by_handle_at": 265,
            "acct": 89,
            "swapon": 224,
            "swapoff": 225,
            "reboot": 142,
            "syslog": 116,
        },
    ),
}

#: system calls refused outright with EPERM (those missing on an architecture are skipped)
DENIED_SYSCALLS = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "kcmp",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "keyctl",
    "add_key",
    "request_key",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "unshare",
    "setns",
    "bpf",
    "perf_event_open",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "userfaultfd",
    "open_by_handle_at",
    "acct",
    "swapon",
    "swapoff",
    "reboot",
    "syslog",
    "iopl",
    "ioperm",
)


class SeccompUnavailable(RuntimeError):
    """The filter cannot be built or installed here; callers must refuse to run the command."""


def machine() -> str:
    return os.uname().machine.lower()


def syscall_numbers(arch: str | None = None) -> dict[str, int]:
    """The syscall table the filter uses for `arch` (default: this machine)."""
    name = arch or machine()
    if name not in _ARCHES:
        raise SeccompUnavailable(f"no seccomp syscall table for architecture {name!r}")
    return dict(_ARCHES[name][1])


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def build_filter(
    *,
    allow_unix_sockets: bool = False,
    allow_rlimit_changes: bool = False,
    allow_unix_pairs: bool = False,
    arch: str | None = None,
) -> bytes:
    """Return the BPF program (an array of struct sock_filter) as bytes."""
    name = arch or machine()
    if name not in _ARCHES:
        raise SeccompUnavailable(f"no seccomp syscall table for architecture {name!r}")
    audit_arch, table = _ARCHES[name]
    denied = [table[s] for s in DENIED_SYSCALLS if s in table]
    domains = [d for d in DENIED_SOCKET_DOMAINS if not (allow_unix_sockets and d == AF_UNIX)]

    # Layout (indices are instruction numbers; jumps are relative to the next instruction):
    #   0 ld arch; 1 jeq arch ? 2 : KILL; 2 ld nr; [3 jge x32 ? KILL : next  (x86_64 only)]
    #   one `jeq nr ? DENY` per denied syscall
    #   [jeq setrlimit ? DENY; jeq prlimit64 ? PRLIMIT_CHECK  (unless rlimit changes are allowed)]
    #   jeq clone3 ? ENOSYS; jeq clone ? CLONE_CHECK; jeq socket ? SOCK_CHECK;
    #   jeq socketpair ? SOCK_CHECK; ret ALLOW
    #   CLONE_CHECK: ld arg0; jset NS_FLAGS ? DENY : ALLOW
    #   [PRLIMIT_CHECK: ld arg0 (pid, an int); jeq 0 ? next : DENY; ld arg2 low; jeq 0 ? next : DENY;
    #    ld arg2 high; jeq 0 ? ALLOW : DENY  — only a read of the caller's own limits passes]
    #   SOCK_CHECK: ld arg0; one `jeq domain ? DENY` per domain; ret ALLOW
    #   DENY: ret ERRNO|EPERM; ENOSYS: ret ERRNO|ENOSYS; KILL: ret KILL_PROCESS
    head: list[tuple[int, int, int, int, str | None, str | None]] = []
    # entries: (code, jt, jf, k, jt_label, jf_label); labels resolved after layout
    head.append((_LD_W_ABS, 0, 0, _OFF_ARCH, None, None))
    head.append((_JEQ_K, 0, 0, audit_arch, None, "KILL"))
    head.append((_LD_W_ABS, 0, 0, _OFF_NR, None, None))
    if name == "x86_64":
        head.append((_JGE_K, 0, 0, _X32_SYSCALL_BIT, "KILL", None))
    for nr in denied:
        head.append((_JEQ_K, 0, 0, nr, "DENY", None))
    if not allow_rlimit_changes:
        head.append((_JEQ_K, 0, 0, table["setrlimit"], "DENY", None))
        head.append((_JEQ_K, 0, 0, table["prlimit64"], "PRLIMIT_CHECK", None))
    head.append((_JEQ_K, 0, 0, table["clone3"], "ENOSYS", None))
    head.append((_JEQ_K, 0, 0, table["clone"], "CLONE_CHECK", None))
    head.append((_JEQ_K, 0, 0, table["socket"], "SOCK_CHECK", None))
    pair_check = "PAIR_CHECK" if allow_unix_pairs and AF_UNIX in domains else "SOCK_CHECK"
    head.append((_JEQ_K, 0, 0, table["socketpair"], pair_check, None))
    head.append((_RET_K, 0, 0, _RET_ALLOW, None, None))
    labels: dict[str, int] = {}
    labels["CLONE_CHECK"] = len(head)
    head.append((_LD_W_ABS, 0, 0, _OFF_ARG0, None, None))
    head.append((_JSET_K, 0, 0, _CLONE_NS_FLAGS, "DENY", "ALLOW"))
    if not allow_rlimit_changes:
        labels["PRLIMIT_CHECK"] = len(head)
        head.append((_LD_W_ABS, 0, 0, _OFF_ARG0, None, None))
        head.append((_JEQ_K, 0, 0, 0, None, "DENY"))
        head.append((_LD_W_ABS, 0, 0, _OFF_ARG2, None, None))
        head.append((_JEQ_K, 0, 0, 0, None, "DENY"))
        head.append((_LD_W_ABS, 0, 0, _OFF_ARG2 + 4, None, None))
        head.append((_JEQ_K, 0, 0, 0, "ALLOW", "DENY"))
    labels["SOCK_CHECK"] = len(head)
    head.append((_LD_W_ABS, 0, 0, _OFF_ARG0, None, None))
    for domain in domains:
        head.append((_JEQ_K, 0, 0, domain, "DENY", None))
    if pair_check == "PAIR_CHECK":
        labels["PAIR_CHECK"] = len(head)
        head.append((_LD_W_ABS, 0, 0, _OFF_ARG0, None, None))
        for domain in domains:
            if domain != AF_UNIX:
                head.append((_JEQ_K, 0, 0, domain, "DENY", None))
        head.append((_RET_K, 0, 0, _RET_ALLOW, None, None))
    labels["ALLOW"] = len(head)
    head.append((_RET_K, 0, 0, _RET_ALLOW, None, None))
    labels["DENY"] = len(head)
    head.append((_RET_K, 0, 0, _RET_ERRNO | errno.EPERM, None, None))
    labels["ENOSYS"] = len(head)
    head.append((_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS, None, None))
    labels["KILL"] = len(head)
    head.append((_RET_K, 0, 0, _RET_KILL_PROCESS, None, None))

    out = bytearray()
    for index, (code, jt, jf, k, jt_label, jf_label) in enumerate(head):
        if jt_label is not None:
            jt = labels[jt_label] - index - 1
        if jf_label is not None:
            jf = labels[jf_label] - index - 1
        if not (0 <= jt <= 255 and 0 <= jf <= 255):
            raise SeccompUnavailable("seccomp program too long for 8-bit jump offsets")
        out += _insn(code, jt, jf, k)
    return bytes(out)


# ctypes's own types, on `_ctypes` directly: importing the ctypes package would cost every sandbox
# start about 5 million instructions (a quarter of the interpreter's own start: its hundreds of
# lines of type set-up), _ctypes about 0.9 million
class _CInt(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "i"


class _CULong(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "L"


class _CUShort(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "H"


class _CVoidP(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "P"


class _CChar(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "c"


class _CFunction(_ctypes.CFuncPtr):
    """A C function of the C library (ctypes.CDLL(None, use_errno=True)'s functions)."""

    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _CInt


class _Process:
    """What `_CFunction` looks its function up in: the handle of dlopen(NULL) (this process,
    its C library included)."""

    def __init__(self) -> None:
        self._handle = _ctypes.dlopen(None, 0)  # type: ignore[arg-type] # dlopen(NULL)


_libc_prctl: _CFunction | None = None


def _prctl_function() -> _CFunction:
    global _libc_prctl
    if _libc_prctl is None:
        try:
            function = _CFunction(("prctl", _Process()))  # type: ignore[arg-type]
        except (OSError, AttributeError) as exc:  # pragma: no cover - every glibc/musl has it
            raise SeccompUnavailable(f"prctl() is not reachable: {exc}") from exc
        function.argtypes = (_CInt, _CULong, _CULong, _CULong, _CULong)
        _libc_prctl = function
    return _libc_prctl


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> None:
    """prctl(2) with the C library's function; raises OSError when it fails."""
    if _prctl_function()(option, arg2, arg3, arg4, arg5) != 0:
        err = _ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


class _SockFprog(_ctypes.Structure):
    _fields_ = [("len", _CUShort), ("filter", _CVoidP)]


class PreparedFilter:
    """A filter whose memory is allocated up front, so installing it after fork() allocates
    nothing and touches no Python-level lock."""

    def __init__(self, program: bytes) -> None:
        if len(program) % 8 != 0 or not program:
            raise SeccompUnavailable("malformed seccomp program")
        self._buffer = (_CChar * len(program)).from_buffer_copy(program)
        self._fprog = _SockFprog(len(program) // 8, _ctypes.addressof(self._buffer))
        self._prctl = _prctl_function()
        self._fprog_address = _ctypes.addressof(self._fprog)

    def install(self) -> None:
        """Set no_new_privs and install the filter on the calling thread only (inherited by the
        children it forks and kept across execve). Raises OSError when the kernel refuses."""
        if self._prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            err = _ctypes.get_errno()
            raise OSError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")
        if self._prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, self._fprog_address, 0, 0) != 0:
            err = _ctypes.get_errno()
            raise OSError(err, f"prctl(PR_SET_SECCOMP): {os.strerror(err)}")


def prepare(
    *,
    allow_unix_sockets: bool = False,
    allow_rlimit_changes: bool = False,
    allow_unix_pairs: bool = False,
) -> PreparedFilter:
    """Build the filter for this machine, ready to install (possibly in a forked child). Built
    once per set of options in a process: a prepared filter is never changed, only installed."""
    key = (allow_unix_sockets, allow_rlimit_changes, allow_unix_pairs)
    prepared = _PREPARED.get(key)
    if prepared is None:
        prepared = _PREPARED[key] = PreparedFilter(
            build_filter(
                allow_unix_sockets=allow_unix_sockets,
                allow_rlimit_changes=allow_rlimit_changes,
                allow_unix_pairs=allow_unix_pairs,
            )
        )
    return prepared


_PREPARED: dict[tuple[bool, bool, bool], PreparedFilter] = {}
