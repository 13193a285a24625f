"""Escape attempts, run against every isolating backend (bwrap and docker).

Each test shows the attempt was *contained* — by exit status, errno, file bytes on the host or a
failed connection — never by a refusal message.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandbox.backends.bwrap import BwrapBackend
from sandbox.types import (
    Backend,
    ConnectionReport,
    ExecRequest,
    Limits,
    NetworkPolicy,
    SandboxError,
    Session,
    SessionSpec,
)
from tests.fixtures.upstream import FakeDNS, Upstream
from tests.sandbox.conftest import SandboxFactory, py, py_json

pytestmark = pytest.mark.slow

# Prints, for each path, the sha256 of its bytes when readable, else the exception class name.
READ_ATTEMPTS = """
import hashlib, json, sys
out = {}
for path in sys.argv[1:]:
    try:
        with open(path, "rb") as fh:
            out[path] = hashlib.sha256(fh.read()).hexdigest()
    except OSError as exc:
        out[path] = type(exc).__name__
print(json.dumps(out))
"""

# Walks the visible filesystem (minus the big read-only system trees) looking for a byte string.
FIND_BYTES = """
import json, os, sys
needle = sys.argv[1].encode()
hits = []
for top in ("/",):
    for dirpath, dirnames, filenames in os.walk(top):
        if dirpath == "/":
            dirnames[:] = [d for d in dirnames if d not in ("proc", "sys", "usr", "dev")]
        for name in filenames:
            path = os.path.join(dirpath, name)
            try:
                with open(path, "rb") as fh:
                    if needle in fh.read(1 << 20):
                        hits.append(path)
            except OSError:
                pass
print(json.dumps(hits))
"""


def read_attempts(session: Session, *paths: str) -> dict[str, str]:
    result = session.exec(ExecRequest(argv=["python3", "-c", READ_ATTEMPTS, *paths]))
    assert result.exit_code == 0, result.stderr
    import json

    value = json.loads(result.stdout)
    assert isinstance(value, dict)
    return value


def find_bytes(session: Session, needle: str) -> list[str]:
    result = session.exec(ExecRequest(argv=["python3", "-c", FIND_BYTES, needle], timeout_s=60))
    assert result.exit_code == 0, result.stderr
    import json

    hits = json.loads(result.stdout)
    assert isinstance(hits, list)
    return hits


# ----------------------------------------------------------------------------- host files


def test_host_shadow_file_is_not_readable(sandbox: Session) -> None:
    # given the host's /etc/shadow
    host_digest = hashlib.sha256(Path("/etc/shadow").read_bytes()).hexdigest()
    # when the sandbox tries to read it
    outcome = read_attempts(sandbox, "/etc/shadow", "/proc/1/root/etc/shadow")
    # then no read returned the host's bytes
    assert host_digest not in outcome.values()
    assert outcome["/etc/shadow"] in {"FileNotFoundError", "PermissionError"}


def test_project_env_file_and_data_dir_are_invisible(
    open_sandbox: SandboxFactory, backend_name: str, tmp_path: Path
) -> None:
    # given a secret .env in a data dir next to (not inside) the workspace
    secret = "canary-" + os.urandom(8).hex()
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    env_file = data_dir / ".env"
    env_file.write_text(f"SECRET_KEY={secret}\n")
    session = open_sandbox(backend_name)
    # when the sandbox opens that path and searches everything it can see for the secret
    outcome = read_attempts(session, str(env_file), str(data_dir))
    hits = find_bytes(session, secret)
    # then the file does not exist for it and its bytes appear nowhere
    assert outcome[str(env_file)] == "FileNotFoundError"
    assert hits == []
    assert env_file.read_text() == f"SECRET_KEY={secret}\n"


def test_another_sessions_workspace_is_invisible(
    open_sandbox: SandboxFactory, backend_name: str, tmp_path: Path
) -> None:
    # given two sessions, the first holding a secret file in its workspace
    secret = "other-ws-" + os.urandom(8).hex()
    ws_a = tmp_path / "ws-a"
    ws_a.mkdir()
    session_a = open_sandbox(backend_name, workspace=ws_a)
    written = session_a.exec(
        ExecRequest(argv=["sh", "-c", f"printf %s {secret} > /workspace/secret.txt"])
    )
    assert written.exit_code == 0
    session_b = open_sandbox(backend_name)
    # when the second session looks for it by host path and by content
    outcome = read_attempts(session_b, str(ws_a / "secret.txt"), "/workspace/secret.txt")
    hits = find_bytes(session_b, secret)
    # then it is not there
    assert outcome == {
        str(ws_a / "secret.txt"): "FileNotFoundError",
        "/workspace/secret.txt": "FileNotFoundError",
    }
    assert hits == []
    assert (ws_a / "secret.txt").read_text() == secret


def test_worker_environment_is_not_visible(
    canary_env: str, open_sandbox: SandboxFactory, backend_name: str
) -> None:
    # given a canary in the worker's environment before the session opens
    session = open_sandbox(backend_name)
    # when the sandbox dumps its environment and every readable /proc/*/environ and cmdline
    dump = py(
        session,
        """
        import os
        chunks = [repr(dict(os.environ)).encode()]
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                for name in ("environ", "cmdline"):
                    try:
                        chunks.append(open(f"/proc/{pid}/{name}", "rb").read())
                    except OSError:
                        pass
        import sys
        sys.stdout.buffer.write(b"\\n".join(chunks))
        """,
    )
    # then the canary is nowhere
    assert dump.exit_code == 0
    assert canary_env.encode() not in dump.stdout
    assert b"MOTOR_TEST_WORKER_SECRET" not in dump.stdout


def test_pid1_environ_is_empty_or_unreadable(sandbox: Session) -> None:
    # when the sandbox reads init's environment
    outcome = py_json(
        sandbox,
        """
        import json
        try:
            data = open("/proc/1/environ", "rb").read()
            print(json.dumps({"read": data.decode(errors="replace")}))
        except OSError as exc:
            print(json.dumps({"error": type(exc).__name__}))
        """,
    )
    # then there is nothing of the worker's there
    assert outcome in ({"read": ""}, {"error": "PermissionError"})


# ----------------------------------------------------------------------------- writing


def test_writes_outside_workspace_fail_and_host_is_untouched(sandbox: Session) -> None:
    # given paths outside /workspace
    targets = [
        "/usr/motor-escape",
        "/etc/motor-escape",
        "/motor-escape",
        "/opt/motor-cortex/x",
        "/dev/motor-escape",
        "/proc/motor-escape",
    ]
    # when the sandbox tries to create each
    outcome = py_json(
        sandbox,
        f"""
        import json
        out = {{}}
        for path in {targets!r}:
            try:
                with open(path, "wb") as fh:
                    fh.write(b"x")
                out[path] = "written"
            except OSError as exc:
                out[path] = exc.errno
        print(json.dumps(out))
        """,
    )
    # then every write failed (read-only or permission) and nothing appeared on the host
    assert isinstance(outcome, dict)
    assert set(outcome) == set(targets)
    assert set(outcome.values()) <= {errno.EROFS, errno.EACCES, errno.ENOENT}
    assert not Path("/usr/motor-escape").exists()
    assert not Path("/etc/motor-escape").exists()
    assert not Path("/motor-escape").exists()


def test_tmp_is_private_to_each_session(open_sandbox: SandboxFactory, backend_name: str) -> None:
    # given a marker written to /tmp in one session
    marker = "tmp-marker-" + os.urandom(6).hex()
    first = open_sandbox(backend_name)
    second = open_sandbox(backend_name)
    wrote = first.exec(ExecRequest(argv=["sh", "-c", f"echo x > /tmp/{marker}"]))
    # when the other session and the host look for it
    seen = second.exec(ExecRequest(argv=["ls", f"/tmp/{marker}"]))
    # then only the writer sees it
    assert wrote.exit_code == 0
    assert first.exec(ExecRequest(argv=["ls", f"/tmp/{marker}"])).exit_code == 0
    assert seen.exit_code != 0
    assert not Path(f"/tmp/{marker}").exists()


def test_proc_sys_core_pattern_cannot_be_written(sandbox: Session) -> None:
    # given the host's core_pattern
    before = Path("/proc/sys/kernel/core_pattern").read_bytes()
    # when the sandbox tries to overwrite it
    outcome = py_json(
        sandbox,
        """
        import json
        try:
            with open("/proc/sys/kernel/core_pattern", "w") as fh:
                fh.write("|/workspace/pwn")
            print(json.dumps("written"))
        except OSError as exc:
            print(json.dumps(exc.errno))
        """,
    )
    # then the write failed and the host value is unchanged
    assert outcome in (errno.EACCES, errno.EROFS, errno.EPERM)
    assert Path("/proc/sys/kernel/core_pattern").read_bytes() == before


# ----------------------------------------------------------------------------- processes, privileges


def test_host_processes_are_invisible(sandbox: Session) -> None:
    # when the sandbox lists every process it can see
    procs = py_json(
        sandbox,
        """
        import json, os
        out = {}
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    out[pid] = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
                except OSError:
                    out[pid] = None
        print(json.dumps(out))
        """,
    )
    # then it sees only its own few processes, none of them this test runner
    assert isinstance(procs, dict)
    assert len(procs) <= 5
    assert str(os.getpid()) not in procs or "pytest" not in (procs[str(os.getpid())] or "")
    assert not any("pytest" in (cmd or "") for cmd in procs.values())


def test_host_processes_cannot_be_signalled_or_inspected_by_pid(sandbox: Session) -> None:
    # given a host process that must outlive the attempt: a sleeper started by this test
    victim = subprocess.Popen(["sleep", "300"])
    try:
        # when the sandbox signals it by its host pid and reads its /proc entries
        outcome = py_json(
            sandbox,
            f"""
            import json, os, signal
            out = {{}}
            for name, sig in (("kill", signal.SIGKILL), ("probe", 0)):
                try:
                    os.kill({victim.pid}, sig)
                    out[name] = "sent"
                except OSError as exc:
                    out[name] = exc.errno
            for name in ("cmdline", "environ", "root"):
                try:
                    os.stat("/proc/{victim.pid}/" + name)
                    out[name] = "visible"
                except OSError as exc:
                    out[name] = exc.errno
            print(json.dumps(out))
            """,
        )
        # then no such process exists for the sandbox, and the host process is still running
        assert outcome == {
            "kill": errno.ESRCH,
            "probe": errno.ESRCH,
            "cmdline": errno.ENOENT,
            "environ": errno.ENOENT,
            "root": errno.ENOENT,
        }
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_no_capabilities_no_new_privs_seccomp_and_unprivileged_uid(sandbox: Session) -> None:
    # when the sandboxed command reads its own status
    status = sandbox.exec(ExecRequest(argv=["cat", "/proc/self/status"])).stdout.decode()
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    # then every capability set is empty, no_new_privs and a seccomp filter are on, uid != 0
    assert fields["CapEff"].strip() == "0000000000000000"
    assert fields["CapPrm"].strip() == "0000000000000000"
    assert fields["CapBnd"].strip() == "0000000000000000"
    assert fields["CapAmb"].strip() == "0000000000000000"
    assert fields["NoNewPrivs"].strip() == "1"
    assert fields["Seccomp"].strip() == "2"
    assert "0" not in fields["Uid"].split()
    assert "0" not in fields["Gid"].split()


SYSCALL_PROBE = """
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return [rc, ctypes.get_errno()]
import platform
x86 = platform.machine() == "x86_64"
NR = {
    "io_uring_setup": 425,
    "keyctl": 250 if x86 else 219,
    "add_key": 248 if x86 else 217,
    "unshare": 272 if x86 else 97,
    "ptrace": 101 if x86 else 117,
    "bpf": 321 if x86 else 280,
    "userfaultfd": 323 if x86 else 282,
    "perf_event_open": 298 if x86 else 241,
    "mount": 165 if x86 else 40,
}
params = ctypes.create_string_buffer(120)
out = {
    "io_uring_setup": call(NR["io_uring_setup"], 8, ctypes.addressof(params)),
    "keyctl": call(NR["keyctl"], 0, -3, 0),  # KEYCTL_GET_KEYRING_ID of the session keyring
    "add_key": call(NR["add_key"], 0, 0, 0, 0, -3),
    "unshare_user": call(NR["unshare"], 0x10000000),  # CLONE_NEWUSER
    "unshare_net": call(NR["unshare"], 0x40000000),  # CLONE_NEWNET
    "ptrace_attach_parent": call(NR["ptrace"], 16, os.getppid(), 0, 0),  # PTRACE_ATTACH
    "bpf": call(NR["bpf"], 0, 0, 0),
    "userfaultfd": call(NR["userfaultfd"], 0),
    "perf_event_open": call(NR["perf_event_open"], 0, 0, -1, -1, 0),
    "mount": call(NR["mount"], 0, 0, 0, 0, 0),
}
print(json.dumps(out))
"""


def test_dangerous_syscalls_fail_with_eperm(sandbox: Session) -> None:
    # when the sandbox calls io_uring, keyctl, unshare, ptrace, bpf, ... directly
    outcome = py_json(sandbox, SYSCALL_PROBE)
    # then each returned -1 with EPERM
    assert outcome == {
        name: [-1, errno.EPERM]
        for name in (
            "io_uring_setup",
            "keyctl",
            "add_key",
            "unshare_user",
            "unshare_net",
            "ptrace_attach_parent",
            "bpf",
            "userfaultfd",
            "perf_event_open",
            "mount",
        )
    }


# ----------------------------------------------------------------------------- network


@pytest.mark.parametrize("port", [5432, 6379])
def test_host_services_on_loopback_are_unreachable(sandbox: Session, port: int) -> None:
    # given a service the host itself can reach on 127.0.0.1
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    # when the sandbox connects to the same address
    outcome = py_json(
        sandbox,
        f"""
        import json, socket
        s = socket.socket()
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", {port}))
            print(json.dumps("connected"))
        except OSError as exc:
            print(json.dumps(exc.errno))
        """,
    )
    # then the connection fails (nothing listens in its own network namespace)
    assert outcome in (errno.ECONNREFUSED, errno.ENETUNREACH)


BYPASS_PROBE = """
import errno, json, os, socket
for name in list(os.environ):
    if "proxy" in name.lower():
        del os.environ[name]
def attempt(fn):
    try:
        fn()
        return "ok"
    except OSError as exc:
        return exc.errno
def tcp(host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((host, port))
    finally:
        s.close()
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(b"\\x00" * 12, ("8.8.8.8", 53))
    finally:
        s.close()
def tcp6():
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect(("2606:4700:4700::1111", 443))
    finally:
        s.close()
out = {
    "tcp_public": attempt(lambda: tcp("1.1.1.1", 443)),
    "tcp_host_gateway": attempt(lambda: tcp("172.17.0.1", 2375)),
    "tcp6_public": attempt(tcp6),
    "udp_dns": attempt(udp),
    "raw": attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)),
    "packet": attempt(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW)),
    "netlink": attempt(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)),
    "unix": attempt(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)),
    "unix_pair": attempt(lambda: socket.socketpair(socket.AF_UNIX)),
    "vsock": attempt(lambda: socket.socket(40, socket.SOCK_STREAM)),
}
try:
    socket.getaddrinfo("example.com", 443)
    out["dns"] = "ok"
except socket.gaierror as exc:
    out["dns"] = "gaierror"
print(json.dumps(out))
"""


def test_network_paths_that_bypass_the_proxy_all_fail(sandbox: Session) -> None:
    # when the sandbox drops the proxy variables and tries every direct route out
    outcome = py_json(sandbox, BYPASS_PROBE)
    # then none works: no route in its own network namespace, and the socket families a tool
    # never needs are refused by seccomp
    assert isinstance(outcome, dict)
    assert outcome["tcp_public"] == errno.ENETUNREACH
    assert outcome["tcp_host_gateway"] == errno.ENETUNREACH
    assert outcome["tcp6_public"] in (errno.ENETUNREACH, errno.EADDRNOTAVAIL)
    assert outcome["udp_dns"] == errno.ENETUNREACH
    assert outcome["raw"] == errno.EPERM
    assert outcome["packet"] == errno.EPERM
    assert outcome["netlink"] == errno.EPERM
    assert outcome["unix"] == errno.EPERM
    assert outcome["unix_pair"] == errno.EPERM
    assert outcome["vsock"] == errno.EPERM
    assert outcome["dns"] == "gaierror"


def test_bash_dev_tcp_cannot_reach_host_services(sandbox: Session) -> None:
    # given bash in the sandbox image
    has_bash = sandbox.exec(ExecRequest(argv=["sh", "-c", "command -v bash"]))
    assert has_bash.exit_code == 0, "bash is expected in the sandbox for this check"
    # when bash opens /dev/tcp to the host's PostgreSQL and to a public address
    local = sandbox.exec(
        ExecRequest(argv=["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/5432"], timeout_s=10)
    )
    public = sandbox.exec(
        ExecRequest(argv=["bash", "-c", "exec 3<>/dev/tcp/1.1.1.1/443"], timeout_s=10)
    )
    # then both fail
    assert local.exit_code == 1
    assert public.exit_code == 1


# ----------------------------------------------------------------------------- resource abuse


def test_fork_bomb_is_bounded_and_session_survives(
    open_sandbox: SandboxFactory, backend_name: str
) -> None:
    # given a session allowing 32 processes
    session = open_sandbox(backend_name, limits=Limits(max_processes=32))
    # when a command forks until the kernel refuses
    bomb = py(
        session,
        """
        import os, time
        children = 0
        try:
            while True:
                pid = os.fork()
                if pid == 0:
                    time.sleep(30)
                    os._exit(0)
                children += 1
        except OSError as exc:
            print(children, exc.errno)
        """,
        timeout_s=20,
    )
    # then fork failed with EAGAIN well below the host's limits, the call ended, all the sleepers
    # are gone and the session still works
    children, err = bomb.stdout.split()
    assert int(err) == errno.EAGAIN
    assert int(children) < 32
    assert bomb.timed_out is False
    assert session.exec(ExecRequest(argv=["echo", "still here"])).stdout == b"still here\n"
    left = py_json(
        session,
        """
        import json, os
        print(json.dumps(sum(1 for p in os.listdir("/proc") if p.isdigit())))
        """,
    )
    assert isinstance(left, int) and left <= 4


def test_shell_fork_bomb_times_out_and_is_cleaned_up(
    open_sandbox: SandboxFactory, backend_name: str
) -> None:
    # given a session allowing 32 processes
    session = open_sandbox(backend_name, limits=Limits(max_processes=32))
    # when the classic shell fork bomb runs
    bomb = session.exec(
        ExecRequest(argv=["bash", "-c", "b() { b | b & }; b; sleep 30"], timeout_s=2)
    )
    # then the call is killed at its deadline and nothing of the bomb survives
    assert bomb.timed_out is True
    assert session.exec(ExecRequest(argv=["echo", "ok"])).stdout == b"ok\n"
    count = py_json(
        session,
        'import json, os; print(json.dumps(sum(1 for p in os.listdir("/proc") if p.isdigit())))',
    )
    assert isinstance(count, int) and count <= 4


def test_memory_bomb_is_stopped_and_reported(
    open_sandbox: SandboxFactory, backend_name: str
) -> None:
    # given a session with 256 MiB of memory
    session = open_sandbox(backend_name, limits=Limits(memory_bytes=256 * 1024 * 1024))
    # when a command allocates without end
    bomb = py(
        session,
        """
        chunks = []
        while True:
            chunks.append(bytearray(16 * 1024 * 1024))
        """,
    )
    # then it fails, the result says out-of-memory, and the session is still usable
    assert bomb.exit_code != 0
    assert bomb.oom is True
    assert session.exec(ExecRequest(argv=["echo", "ok"])).stdout == b"ok\n"


def test_infinite_loop_times_out_and_its_whole_tree_is_killed(sandbox: Session) -> None:
    # when a command starts background children and then spins forever
    spin = sandbox.exec(
        ExecRequest(
            argv=["sh", "-c", "sleep 300 & sleep 301 & while :; do :; done"],
            timeout_s=1,
        )
    )
    # then the call times out with SIGKILL and no process of it is left
    assert spin.timed_out is True
    assert spin.exit_code is None
    survivors = py_json(
        sandbox,
        """
        import json, os
        out = []
        for p in os.listdir("/proc"):
            if p.isdigit():
                try:
                    out.append(open(f"/proc/{p}/cmdline", "rb").read().decode())
                except OSError:
                    pass
        print(json.dumps([c for c in out if c.startswith("sleep")]))
        """,
    )
    assert survivors == []


def test_one_gigabyte_of_output_is_truncated(sandbox: Session) -> None:
    # when a command writes 1 GB to stdout
    flood = sandbox.exec(
        ExecRequest(
            argv=["head", "-c", "1000000000", "/dev/zero"],
            output_limit=4096,
            timeout_s=60,
        )
    )
    # then the call completes with exactly the cap kept and the truncated flag set
    assert flood.exit_code == 0
    assert flood.stdout == b"\0" * 4096
    assert flood.truncated is True


def test_workspace_quota_holds_for_one_big_file(
    open_sandbox: SandboxFactory, backend_name: str, workspace: Path
) -> None:
    # given an 8 MiB workspace quota and a 1 GiB per-file cap
    session = open_sandbox(
        backend_name,
        workspace=workspace,
        limits=Limits(workspace_bytes=8 * 1024 * 1024, file_size_bytes=1024 * 1024 * 1024),
    )
    # when a command writes 100 MB into one file
    fill = session.exec(
        ExecRequest(argv=["sh", "-c", "head -c 100000000 /dev/zero > /workspace/fill"])
    )
    # then the write fails and the host file stays within the quota
    assert fill.exit_code != 0
    assert (workspace / "fill").stat().st_size <= 8 * 1024 * 1024


def test_workspace_quota_stops_a_call_filling_many_files(
    open_sandbox: SandboxFactory, backend_name: str, workspace: Path
) -> None:
    # given an 8 MiB workspace quota
    session = open_sandbox(
        backend_name, workspace=workspace, limits=Limits(workspace_bytes=8 * 1024 * 1024)
    )
    # when a command keeps creating 1 MiB files
    fill = py(
        session,
        """
        import os, time
        n = 0
        while True:
            with open(f"/workspace/fill{n}", "wb") as fh:
                fh.write(b"x" * (1024 * 1024))
                fh.flush()
                os.fsync(fh.fileno())
            n += 1
            time.sleep(0.02)
        """,
        timeout_s=30,
    )
    # then the call is killed and reported as over quota long before its timeout
    assert fill.workspace_exceeded is True
    assert fill.timed_out is False
    assert sum(p.stat().st_size for p in workspace.iterdir()) < 16 * 1024 * 1024


def test_single_file_size_is_capped(open_sandbox: SandboxFactory, backend_name: str) -> None:
    # given a 1 MiB per-file cap
    session = open_sandbox(backend_name, limits=Limits(file_size_bytes=1024 * 1024))
    # when a command writes a 4 MiB file
    big = py(
        session,
        """
        import signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        try:
            with open("/workspace/big", "wb") as fh:
                fh.write(b"x" * (4 * 1024 * 1024))
            print("written")
        except OSError as exc:
            print(exc.errno)
        """,
    )
    # then the write fails with EFBIG
    assert big.stdout.strip() == str(errno.EFBIG).encode()


def test_tmp_is_size_capped(open_sandbox: SandboxFactory, backend_name: str) -> None:
    # given a 4 MiB /tmp
    session = open_sandbox(backend_name, limits=Limits(tmp_bytes=4 * 1024 * 1024))
    # when a command writes 16 MiB to /tmp
    fill = py(
        session,
        """
        total = 0
        try:
            with open("/tmp/fill", "wb") as fh:
                for _ in range(16):
                    fh.write(b"x" * (1024 * 1024))
                    fh.flush()
                    total += 1
            print("written", total)
        except OSError as exc:
            print(exc.errno, total)
        """,
    )
    # then the filesystem runs out of space
    err, written_mib = fill.stdout.split()
    assert int(err) == errno.ENOSPC
    assert int(written_mib) <= 4


def test_daemons_do_not_outlive_the_call(sandbox: Session) -> None:
    # when a command double-forks a setsid() daemon that keeps writing a heartbeat file
    launched = py(
        sandbox,
        """
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                while True:
                    with open("/workspace/heartbeat", "a") as fh:
                        fh.write("x")
                    time.sleep(0.02)
            os._exit(0)
        time.sleep(0.2)
        """,
    )
    assert launched.exit_code == 0
    # then, at the next call, no process but the sandbox's own is alive and the heartbeat is frozen
    state = py_json(
        sandbox,
        """
        import json, os, time
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
        before = os.path.getsize("/workspace/heartbeat")
        time.sleep(0.3)
        after = os.path.getsize("/workspace/heartbeat")
        print(json.dumps({"procs": len(pids), "grew": after - before}))
        """,
    )
    assert state == {"procs": state["procs"], "grew": 0}  # type: ignore[index]
    assert state["procs"] <= 4  # type: ignore[index]


# ------------------------------------------------------------- egress with a network policy
#
# The same escape categories as tests/sandbox/test_egress_proxy.py, but driven from inside a
# real session on each backend, through the bridge, so that what is tested is the whole path a
# program in the sandbox has. Containment is shown by the proxy's connection reports, the test
# resolver's query log, a host listener's accept count and the upstream's own access log.

CA_INSIDE = "/etc/motor-test-ca.pem"

# Sends each raw request (a CONNECT or an absolute-form request) straight to the in-sandbox end
# of the bridge and prints the status code of each answer (0 when the connection just closed).
RAW_PROXY_PROBE = """
import json, socket, sys
out = []
for raw in json.loads(sys.stdin.read()):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=15)
    try:
        s.sendall(raw.encode("latin-1"))
        data = b""
        while b"\\r\\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        line = data.split(b"\\r\\n", 1)[0].split()
        out.append(int(line[1]) if len(line) > 1 else 0)
    finally:
        s.close()
print(json.dumps(out))
"""


class HostListener:
    """A TCP listener on the host's 127.0.0.1 counting the connections it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.setblocking(False)
        self.port = int(self.sock.getsockname()[1])

    def accepted(self) -> int:
        count = 0
        while True:
            try:
                conn, _ = self.sock.accept()
            except BlockingIOError:
                return count
            conn.close()
            count += 1

    def close(self) -> None:
        self.sock.close()


@dataclass
class NetSandbox:
    session: Session
    dns: FakeDNS
    reports: list[ConnectionReport]
    listener: HostListener

    def attempts(self, expected: int) -> list[ConnectionReport]:
        """Every report of the proxy (nothing is filtered out: the bridge's start-up makes no
        connection of its own), waiting up to 10 s for `expected` of them: a tunnel is
        reported when it closes, which may be just after the call returned."""
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            found = list(self.reports)
            if len(found) >= expected:
                return found
            time.sleep(0.02)
        return list(self.reports)

    def raw(self, *requests: str) -> list[int]:
        result = self.session.exec(
            ExecRequest(
                argv=["python3", "-c", RAW_PROXY_PROBE],
                stdin=json.dumps(list(requests)).encode(),
                timeout_s=60,
            )
        )
        assert result.exit_code == 0, result.stderr
        statuses = json.loads(result.stdout)
        assert isinstance(statuses, list)
        return statuses


@pytest.fixture
def net_sandbox(backend_name: str, upstream: Upstream, tmp_path: Path) -> Iterator[NetSandbox]:
    """A session allowed `*.allowed.test` (port 80, 443 and a host listener's port), whose
    proxy resolves: api/www to the upstream; evil.test to the upstream too (only the allowlist
    keeps it out); db to 127.0.0.1; meta to the metadata address; lan to RFC 1918; mapped to an
    IPv4-mapped loopback; rebind to the upstream first and loopback afterwards."""
    listener = HostListener()
    dns = upstream.resolver(
        names=("api.allowed.test", "www.allowed.test"),
        extra={
            "evil.test": upstream.ip,
            "db.allowed.test": "127.0.0.1",
            "meta.allowed.test": "169.254.169.254",
            "lan.allowed.test": "10.0.0.5",
            "mapped.allowed.test": "::ffff:127.0.0.1",
        },
        in_turn={"rebind.allowed.test": [[upstream.ip], ["127.0.0.1"]]},
    )
    reports: list[ConnectionReport] = []
    workspace = tmp_path / "net-ws"
    workspace.mkdir()
    backend: Backend
    if backend_name == "bwrap":
        backend = BwrapBackend(egress_resolver=dns)
    else:
        from sandbox.backends.docker import DockerBackend

        backend = DockerBackend(egress_resolver=dns)
    session = backend.open(
        SessionSpec(
            workspace=workspace,
            network=NetworkPolicy(
                allowed_domains=("*.allowed.test",), allowed_ports=(80, 443, listener.port)
            ),
            readonly_mounts=[(upstream.ca_path, CA_INSIDE)],
            environment={"SSL_CERT_FILE": CA_INSIDE},
            on_connection=reports.append,
        )
    )
    try:
        yield NetSandbox(session=session, dns=dns, reports=reports, listener=listener)
    finally:
        session.close()
        listener.close()


def test_an_allowed_name_is_reached_and_reported_from_inside(
    net_sandbox: NetSandbox, upstream: Upstream
) -> None:
    # given a unique path, when the sandbox fetches it over HTTPS with a standard client
    canary = "/hello?allowed-" + os.urandom(6).hex()
    result = net_sandbox.session.exec(
        ExecRequest(
            argv=[
                "curl",
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                f"https://api.allowed.test{canary}",
            ],
            timeout_s=30,
        )
    )
    # then it arrived once, through the proxy, which reported it with the checked address
    assert (result.exit_code, result.stdout) == (0, b"200")
    assert upstream.seen(canary) == 1
    [report] = net_sandbox.attempts(1)
    assert (report.host, report.port, report.resolved_ip, report.verdict) == (
        "api.allowed.test",
        443,
        upstream.ip,
        "allowed",
    )
    assert report.bytes_up > 0 and report.bytes_down > 0
    assert report.session_id == net_sandbox.session.id


def test_non_allowlisted_domains_never_leave_the_sandbox(
    net_sandbox: NetSandbox, upstream: Upstream
) -> None:
    # given names that resolve to the real upstream but are not allowed, and a unique path
    canary = "/hello?blocked-" + os.urandom(6).hex()
    # when the sandbox asks for them over HTTPS (CONNECT) and plain HTTP (absolute form), and
    # tries the bare parent of the wildcard and a suffix trick
    https = net_sandbox.session.exec(
        ExecRequest(argv=["curl", "-sS", f"https://evil.test{canary}"], timeout_s=30)
    )
    statuses = net_sandbox.raw(
        f"GET http://evil.test{canary} HTTP/1.1\r\nHost: evil.test\r\n\r\n",
        f"GET http://allowed.test{canary} HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
        "CONNECT api.allowed.test.evil.test:443 HTTP/1.1\r\n\r\n",
    )
    # then curl failed on the refused tunnel, every request got 403, nothing reached the
    # upstream, no name was looked up, and every attempt was reported as denied
    assert https.exit_code == 56
    assert statuses == [403, 403, 403]
    assert upstream.seen(canary) == 0
    assert net_sandbox.dns.calls == []
    reports = net_sandbox.attempts(4)
    assert sorted((r.host, r.verdict, r.reason, r.bytes_up, r.bytes_down) for r in reports) == [
        ("allowed.test", "denied", "not_allowlisted", 0, 0),
        ("api.allowed.test.evil.test", "denied", "not_allowlisted", 0, 0),
        ("evil.test", "denied", "not_allowlisted", 0, 0),
        ("evil.test", "denied", "not_allowlisted", 0, 0),
    ]


def test_ip_literals_in_every_notation_are_refused_from_inside(
    net_sandbox: NetSandbox, upstream: Upstream
) -> None:
    # given the upstream's and loopback's addresses spelled every way a resolver might accept
    a, b, c, d = (int(part) for part in upstream.ip.split("."))
    as_int = (a << 24) | (b << 16) | (c << 8) | d
    notations = [
        upstream.ip,
        str(as_int),
        hex(as_int),
        ".".join(f"0{part:o}" for part in (a, b, c, d)),
        f"{a}.{b}.{(c << 8) | d}",
        f"[::ffff:{upstream.ip}]",
        "127.1",
        "0x7f.0.0.1",
        "0177.0.0.1",
        "[::1]",
        "169.254.169.254",
        "[fd00::1]",
    ]
    canary = "/hello?literal-" + os.urandom(6).hex()
    # when the sandbox asks the proxy for each, as a plain request and as a tunnel
    plain = net_sandbox.raw(
        *(f"GET http://{n}{canary} HTTP/1.1\r\nHost: {n}\r\n\r\n" for n in notations)
    )
    tunnels = net_sandbox.raw(*(f"CONNECT {n}:443 HTTP/1.1\r\n\r\n" for n in notations))
    # then each one is refused (none is listed) without a lookup, and nothing reached the
    # upstream or the host's loopback
    assert plain == [403] * len(notations)
    assert tunnels == [403] * len(notations)
    assert upstream.seen(canary) == 0
    assert net_sandbox.dns.calls == []
    reports = net_sandbox.attempts(2 * len(notations))
    assert len(reports) == 2 * len(notations)
    assert {(r.verdict, r.bytes_up, r.bytes_down) for r in reports} == {("denied", 0, 0)}


def test_allowed_names_resolving_to_private_or_metadata_addresses_are_refused(
    net_sandbox: NetSandbox,
) -> None:
    # given allowed names whose DNS answers point at the host's loopback (where a listener
    # waits), RFC 1918, an IPv4-mapped loopback and the cloud metadata address
    port = net_sandbox.listener.port
    targets = {
        "db.allowed.test": "127.0.0.1",
        "lan.allowed.test": "10.0.0.5",
        "mapped.allowed.test": "::ffff:127.0.0.1",
        "meta.allowed.test": "169.254.169.254",
    }
    # when the sandbox asks for each on the listener's port, as a tunnel and as plain HTTP
    tunnels = net_sandbox.raw(*(f"CONNECT {name}:{port} HTTP/1.1\r\n\r\n" for name in targets))
    plain = net_sandbox.raw(
        *(f"GET http://{name}:{port}/ HTTP/1.1\r\nHost: {name}\r\n\r\n" for name in targets)
    )
    # then every request is refused after one lookup each, the reports name the address that
    # was refused, and the host's listener never saw a connection
    assert tunnels == [403] * 4
    assert plain == [403] * 4
    assert sorted(net_sandbox.dns.calls) == sorted([(name, port) for name in targets] * 2)
    assert net_sandbox.listener.accepted() == 0
    reports = net_sandbox.attempts(8)
    assert sorted((r.host, r.resolved_ip, r.verdict, r.reason) for r in reports) == sorted(
        [(name, ip, "denied", "forbidden_address") for name, ip in targets.items()] * 2
    )


def test_dns_rebinding_cannot_redirect_a_checked_connection(
    net_sandbox: NetSandbox, upstream: Upstream
) -> None:
    # given a name that resolves to the upstream once and to the host's loopback afterwards
    port = net_sandbox.listener.port
    canary = "/echo?rebind-" + os.urandom(6).hex()
    # when the sandbox makes one plain request on port 80, then asks for the same name on the
    # port where the host's loopback listener waits
    first = net_sandbox.raw(
        f"GET http://rebind.allowed.test{canary} HTTP/1.1\r\nHost: rebind.allowed.test\r\n"
        "Connection: close\r\n\r\n"
    )
    second = net_sandbox.raw(f"CONNECT rebind.allowed.test:{port} HTTP/1.1\r\n\r\n")
    # then the first connection went to the address that was checked (one lookup; the
    # upstream logged it) and the second lookup's loopback answer was refused: the host
    # listener never saw a connection
    assert (first, second) == ([200], [403])
    assert upstream.seen(canary) == 1
    assert net_sandbox.dns.calls == [("rebind.allowed.test", 80), ("rebind.allowed.test", port)]
    assert net_sandbox.listener.accepted() == 0
    reports = sorted(net_sandbox.attempts(2), key=lambda r: r.port)
    assert [(r.port, r.resolved_ip, r.verdict) for r in reports] == [
        (80, upstream.ip, "allowed"),
        (port, "127.0.0.1", "denied"),
    ]


@pytest.mark.parametrize(
    "target",
    [
        "evil.test\x00.api.allowed.test:443",
        "evil.test%00.api.allowed.test:443",
        "evil.test:443.api.allowed.test:443",
        "api.allowed.test@evil.test:443",
        "evil.test\\.api.allowed.test:443",
        "api.allowed.test..:443",
        "API.ALLOWED.TEST.:22",
        "xn--pi-6kc.allowed.test.evil.test:443",
        "api.allowed.test:0443",
    ],
)
def test_hostname_parser_tricks_are_refused_from_inside(
    net_sandbox: NetSandbox, upstream: Upstream, target: str
) -> None:
    # when the sandbox sends a CONNECT line crafted to confuse a host parser
    statuses = net_sandbox.raw(f"CONNECT {target} HTTP/1.1\r\n\r\n")
    # then it is refused before any lookup and reported as denied with nothing relayed
    assert statuses == [403]
    assert net_sandbox.dns.calls == []
    [report] = net_sandbox.attempts(1)
    assert (report.verdict, report.bytes_up, report.bytes_down) == ("denied", 0, 0)


def test_case_and_a_trailing_dot_reach_the_same_allowed_host(
    net_sandbox: NetSandbox, upstream: Upstream
) -> None:
    # when the sandbox spells an allowed name in capitals with one trailing dot
    canary = "/hello?case-" + os.urandom(6).hex()
    statuses = net_sandbox.raw(
        f"GET http://API.Allowed.TEST.{canary} HTTP/1.1\r\nHost: API.Allowed.TEST.\r\n"
        "Connection: close\r\n\r\n"
    )
    # then it is the canonical name that is looked up, allowed and reported
    assert statuses == [200]
    assert upstream.seen(canary) == 1
    assert net_sandbox.dns.calls == [("api.allowed.test", 80)]
    [report] = net_sandbox.attempts(1)
    assert (report.host, report.verdict) == ("api.allowed.test", "allowed")


def test_paths_around_the_proxy_fail_even_with_network_granted(
    net_sandbox: NetSandbox, upstream: Upstream
) -> None:
    # given a session whose proxy would allow the upstream by name
    canary = "/hello?direct-" + os.urandom(6).hex()
    # when the sandbox ignores the proxy: curl without it, a raw TCP connect, UDP, and
    # bash's /dev/tcp, all to the upstream's address
    no_proxy = net_sandbox.session.exec(
        ExecRequest(
            argv=["curl", "-sS", "-m", "5", "--noproxy", "*", f"http://{upstream.ip}{canary}"],
            timeout_s=30,
        )
    )
    sockets = py_json(
        net_sandbox.session,
        f"""
        import json, socket
        out = {{}}
        try:
            socket.create_connection(("{upstream.ip}", 80), timeout=3)
            out["tcp"] = "connected"
        except OSError as exc:
            out["tcp"] = exc.errno
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            u.sendto(b"x", ("{upstream.ip}", 53))
            out["udp"] = "sent"
        except OSError as exc:
            out["udp"] = exc.errno
        print(json.dumps(out))
        """,
    )
    dev_tcp = net_sandbox.session.exec(
        ExecRequest(argv=["bash", "-c", f"exec 3<>/dev/tcp/{upstream.ip}/80"], timeout_s=10)
    )
    # then nothing got out: curl could not connect, the sockets have no route, and neither
    # the upstream nor the proxy saw anything
    assert no_proxy.exit_code == 7
    assert sockets == {"tcp": errno.ENETUNREACH, "udp": errno.ENETUNREACH}
    assert dev_tcp.exit_code == 1
    assert upstream.seen(canary) == 0
    assert net_sandbox.attempts(0) == []


# -------------------------------------------------------------- daemons and the session's end

# A call that leaves a setsid() double-forked daemon holding an exclusive lock on a workspace
# file (the lock is released only when the daemon is dead), then keeps running itself.
LOCKING_DAEMON = """
import fcntl, os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        fd = os.open("/workspace/daemon.lock", os.O_RDWR | os.O_CREAT, 0o666)
        fcntl.flock(fd, fcntl.LOCK_EX)
        open("/workspace/daemon.ready", "w").close()
        while True:
            time.sleep(0.05)
    os._exit(0)
time.sleep(120)
"""


def lock_is_free(path: Path) -> bool:
    """Whether no process holds a flock on `path` (tried without waiting)."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def wait_for(predicate: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_a_daemon_does_not_outlive_a_session_closed_mid_call(
    open_sandbox: SandboxFactory, backend_name: str, tmp_path: Path
) -> None:
    # given a call that started a locking daemon and is still running
    workspace = tmp_path / "daemon-ws"
    workspace.mkdir()
    session = open_sandbox(backend_name, workspace=workspace)
    outcome: list[object] = []

    def call() -> None:
        try:
            outcome.append(
                session.exec(ExecRequest(argv=["python3", "-c", LOCKING_DAEMON], timeout_s=60))
            )
        except Exception as exc:  # noqa: BLE001 - whatever the call ended with is recorded
            outcome.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    assert wait_for((workspace / "daemon.ready").exists, 30)
    assert lock_is_free(workspace / "daemon.lock") is False
    # when the session is closed while that call runs
    session.close()
    caller.join(30)
    # then the running call ended, and by the time close() returned no process of the
    # session held the lock any more: the daemon died with the session
    assert not caller.is_alive()
    assert lock_is_free(workspace / "daemon.lock") is True
    assert len(outcome) == 1
    assert type(outcome[0]) is SandboxError, repr(outcome[0])
    with pytest.raises(SandboxError, match="closed"):
        session.exec(ExecRequest(argv=["true"]))


OWNER_SCRIPT = """
import sys, threading, time
from pathlib import Path
from sandbox.backends import get_backend
from sandbox.types import ExecRequest, SessionSpec
session = get_backend(sys.argv[1]).open(SessionSpec(workspace=Path(sys.argv[2])))
threading.Thread(
    target=session.exec,
    args=(ExecRequest(argv=["python3", "-c", sys.argv[3]], timeout_s=120),),
    daemon=True,
).start()
while not (Path(sys.argv[2]) / "daemon.ready").exists():
    time.sleep(0.05)
print("ready", flush=True)
time.sleep(300)
"""


def test_a_daemon_does_not_outlive_the_owning_process(backend_name: str, tmp_path: Path) -> None:
    # given a worker process whose session is running a call that left a locking daemon
    workspace = tmp_path / "owner-ws"
    workspace.mkdir()
    repo = Path(__file__).resolve().parents[2]
    worker = subprocess.Popen(
        [sys.executable, "-c", OWNER_SCRIPT, backend_name, str(workspace), LOCKING_DAEMON],
        cwd=repo,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "ready"
        assert lock_is_free(workspace / "daemon.lock") is False
        # when the worker is killed outright (no close(), no atexit)
        worker.kill()
        worker.wait(10)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    # then the sandbox goes down with it: soon nothing holds the daemon's lock
    assert worker.returncode == -signal.SIGKILL
    assert wait_for(lambda: lock_is_free(workspace / "daemon.lock"), 60) is True


def test_a_hard_link_to_an_outside_file_is_not_handed_to_the_sandbox(
    open_sandbox: SandboxFactory, backend_name: str, tmp_path: Path
) -> None:
    # given a root-only file outside the workspace that also has a name inside it (as a careless
    # host-side copy could leave), next to an ordinary file
    workspace = tmp_path / "link-ws"
    workspace.mkdir()
    outside = tmp_path / "outside-secret.txt"
    outside.write_text("host data")
    os.chmod(outside, 0o600)
    os.link(outside, workspace / "linked.txt")
    (workspace / "own.txt").write_text("mine")
    # when a session opens on the workspace and its sandbox reads and overwrites the link
    session = open_sandbox(backend_name, workspace=workspace)
    read = session.exec(ExecRequest(argv=["cat", "/workspace/linked.txt"]))
    write = session.exec(ExecRequest(argv=["sh", "-c", "echo pwned > /workspace/linked.txt"]))
    own = session.exec(ExecRequest(argv=["sh", "-c", "echo more >> /workspace/own.txt"]))
    # then the outside file kept its owner, mode and bytes, and neither read nor write got
    # through; the ordinary file was the sandbox's to change
    assert (outside.stat().st_uid, outside.stat().st_mode & 0o777) == (0, 0o600)
    assert outside.read_text() == "host data"
    assert read.exit_code != 0 and b"host data" not in read.stdout
    assert write.exit_code != 0
    assert own.exit_code == 0
    assert (workspace / "own.txt").read_text() == "minemore\n"


def session_leftovers(session: Session) -> list[str]:
    """What of a closed session still exists on the host: processes, runtime dir, container."""
    left: list[str] = []
    runtime_dir = getattr(session, "_runtime_dir", None)
    if runtime_dir is not None and Path(runtime_dir).exists():
        left.append(f"runtime dir {runtime_dir}")
    host_uid = getattr(session, "host_uid", None)
    if isinstance(host_uid, int) and host_uid != os.geteuid():
        left += [f"process {pid}" for pid in processes_of_uid(host_uid)]
    container_id = getattr(session, "container_id", None)
    if container_id is not None:
        import docker

        engine = docker.from_env()
        try:
            left += [
                f"container {c.id}"
                for c in engine.containers.list(all=True, filters={"id": container_id})
            ]
        finally:
            engine.close()
    return left


def processes_of_uid(uid: int) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid != uid:
                    continue
                with open(f"/proc/{name}/stat", "rb") as fh:
                    state = fh.read().rsplit(b")", 1)[1].split()[0]
            except OSError:
                continue
            if state not in (b"Z", b"X"):
                pids.append(int(name))
    return pids


def test_closing_a_session_mid_call_fails_the_call_promptly_and_leaves_nothing(
    open_sandbox: SandboxFactory, backend_name: str, tmp_path: Path
) -> None:
    # given a call that would run for 30 s (its own timeout is 60 s) and has started
    workspace = tmp_path / "sleep-ws"
    workspace.mkdir()
    session = open_sandbox(backend_name, workspace=workspace)
    outcome: list[object] = []

    def call() -> None:
        try:
            outcome.append(
                session.exec(
                    ExecRequest(
                        argv=["sh", "-c", "touch /workspace/started; exec sleep 30"], timeout_s=60
                    )
                )
            )
        except BaseException as exc:  # noqa: BLE001 - whatever the call ended with is recorded
            outcome.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    assert wait_for((workspace / "started").exists, 30)
    # when another thread closes the session
    closer = threading.Thread(target=session.close)
    closer.start()
    # then close() returns and the running call ends long before its 30 s sleep would, with a
    # SandboxError (never a raw OSError)
    closer.join(10)
    caller.join(10)
    assert not closer.is_alive()
    assert not caller.is_alive()
    assert len(outcome) == 1
    assert type(outcome[0]) is SandboxError, repr(outcome[0])
    # and nothing of the session is left: no process, no runtime dir, no container
    assert session_leftovers(session) == []
    with pytest.raises(SandboxError, match="closed"):
        session.exec(ExecRequest(argv=["true"]))
