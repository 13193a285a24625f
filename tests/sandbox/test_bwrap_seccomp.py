"""The seccomp program builder (unit level; the filter's effect is tested from inside sandboxes)."""

from __future__ import annotations

import struct

import pytest

from sandbox.inside import seccomp
from tests.sandbox.conftest import py_json


def decode(program: bytes) -> list[tuple[int, int, int, int]]:
    return [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_filter_checks_the_architecture_first(arch: str) -> None:
    insns = decode(seccomp.build_filter(arch=arch))
    audit_arch = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}[arch]
    # ld [arch]; jeq AUDIT_ARCH -> continue, else jump to the final KILL_PROCESS
    assert insns[0] == (0x20, 0, 0, 4)
    assert insns[1][0] == 0x15 and insns[1][3] == audit_arch and insns[1][1] == 0
    kill_index = 1 + 1 + insns[1][2]
    assert insns[kill_index] == (0x06, 0, 0, 0x80000000)
    assert kill_index == len(insns) - 1


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_every_denied_syscall_jumps_to_eperm(arch: str) -> None:
    insns = decode(seccomp.build_filter(arch=arch))
    table = seccomp.syscall_numbers(arch)
    eperm = (0x06, 0, 0, 0x00050000 | 1)
    denied = {table[name] for name in seccomp.DENIED_SYSCALLS if name in table}
    targets = {}
    for index, (code, jt, _jf, k) in enumerate(insns[3:], start=3):
        if code == 0x15 and k in denied and index + 1 + jt < len(insns):
            targets[k] = insns[index + 1 + jt]
    assert set(targets) == denied
    assert set(targets.values()) == {eperm}


def test_unix_sockets_are_refused_only_in_the_command_profile() -> None:
    strict = decode(seccomp.build_filter(arch="x86_64"))
    relaxed = decode(seccomp.build_filter(arch="x86_64", allow_unix_sockets=True))

    def domains(insns: list[tuple[int, int, int, int]]) -> set[int]:
        # the socket-domain checks follow the last load of argument 0
        start = max(i for i, insn in enumerate(insns) if insn == (0x20, 0, 0, 16))
        return {k for code, _jt, _jf, k in insns[start + 1 :] if code == 0x15}

    domain_checks = domains(strict)
    relaxed_checks = domains(relaxed)
    assert domain_checks == {1, 16, 17, 40}
    assert relaxed_checks == {16, 17, 40}


def test_unknown_architecture_is_refused() -> None:
    with pytest.raises(seccomp.SeccompUnavailable, match="riscv64"):
        seccomp.build_filter(arch="riscv64")


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_rlimit_changes_are_refused_only_in_the_command_profile(arch: str) -> None:
    table = seccomp.syscall_numbers(arch)
    strict = decode(seccomp.build_filter(arch=arch))
    relaxed = decode(
        seccomp.build_filter(arch=arch, allow_unix_sockets=True, allow_rlimit_changes=True)
    )
    eperm = (0x06, 0, 0, 0x00050000 | 1)

    def target(insns: list[tuple[int, int, int, int]], nr: int) -> int | None:
        for index, (code, jt, _jf, k) in enumerate(insns):
            if code == 0x15 and k == nr and jt:
                return index + 1 + jt
        return None

    # setrlimit goes straight to EPERM
    setrlimit_at = target(strict, table["setrlimit"])
    assert setrlimit_at is not None and strict[setrlimit_at] == eperm
    # prlimit64 passes only with pid (arg0) == 0 and a NULL new limit (arg2, both halves)
    check = target(strict, table["prlimit64"])
    assert check is not None
    assert [(code, k) for code, _jt, _jf, k in strict[check : check + 6]] == [
        (0x20, 16),
        (0x15, 0),
        (0x20, 32),
        (0x15, 0),
        (0x20, 36),
        (0x15, 0),
    ]
    for offset in (1, 3, 5):
        _code, jt, jf, _k = strict[check + offset]
        assert strict[check + offset + 1 + jf] == eperm
        assert jt == 0 or strict[check + offset + 1 + jt] == (0x06, 0, 0, 0x7FFF0000)
    # the supervisor's own profile touches neither
    assert target(relaxed, table["setrlimit"]) is None
    assert target(relaxed, table["prlimit64"]) is None


def test_a_session_for_servers_allows_unix_socket_pairs_but_never_unix_sockets(
    open_sandbox, backend_name: str
) -> None:
    # given a session opened for a long-lived server (asyncio needs a socket pair) and a plain one
    probe = (
        "import asyncio, errno, json, socket\n"
        "def attempt(f):\n"
        "    try:\n"
        "        f()\n"
        "        return 'ok'\n"
        "    except OSError as exc:\n"
        "        return exc.errno\n"
        "print(json.dumps({'pair': attempt(lambda: socket.socketpair(socket.AF_UNIX)),\n"
        "    'unix': attempt(lambda: socket.socket(socket.AF_UNIX)),\n"
        "    'netlink': attempt(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)),\n"
        "    'loop': attempt(lambda: asyncio.run(asyncio.sleep(0)))}))\n"
    )
    server = open_sandbox(backend_name, allow_unix_pairs=True)
    plain = open_sandbox(backend_name)
    # when each tries both kinds of unix socket and an event loop
    # then only the server's session may make a pair (and so run asyncio); neither may make a
    # unix socket that could connect anywhere
    assert py_json(server, probe) == {"pair": "ok", "unix": 1, "netlink": 1, "loop": "ok"}
    assert py_json(plain, probe) == {"pair": 1, "unix": 1, "netlink": 1, "loop": 1}


def test_the_pair_exception_keeps_every_other_domain_refused() -> None:
    insns = decode(seccomp.build_filter(arch="x86_64", allow_unix_pairs=True))
    table = seccomp.syscall_numbers("x86_64")
    # socketpair jumps to a block of its own
    [at] = [i for i, insn in enumerate(insns) if insn[0] == 0x15 and insn[3] == table["socketpair"]]
    start = at + 1 + insns[at][1]
    # which loads the domain and refuses netlink, packet and vsock — but not AF_UNIX (1)
    allow, eperm = 0x7FFF0000, 0x00050000 | 1
    block = insns[start : start + 5]
    assert block == [
        (0x20, 0, 0, 16),
        (0x15, 4, 0, 16),
        (0x15, 3, 0, 17),
        (0x15, 2, 0, 40),
        (0x06, 0, 0, allow),
    ]
    assert insns[start + 1 + 1 + 4] == (0x06, 0, 0, eperm)
    # while socket() still refuses AF_UNIX
    [sock] = [i for i, insn in enumerate(insns) if insn[0] == 0x15 and insn[3] == table["socket"]]
    sock_block = insns[sock + 1 + insns[sock][1] :][:2]
    assert sock_block == [(0x20, 0, 0, 16), (0x15, 9, 0, 1)]
