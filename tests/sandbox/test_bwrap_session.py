"""The bwrap backend's session lifecycle and call semantics, on real bubblewrap."""

from __future__ import annotations

import base64
import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from sandbox.backends import get_backend
from sandbox.backends.bwrap import BwrapBackend, BwrapSession
from sandbox.session import SessionRegistry, open_session
from sandbox.tools import execute_tool
from sandbox.types import ExecRequest, Limits, SandboxError, SessionSpec
from tests.sandbox.conftest import SandboxFactory, py, py_json

REPO = Path(__file__).resolve().parents[2]


def live_processes_of(uid: int) -> list[int]:
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


def wait_until(predicate: object, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return bool(predicate())  # type: ignore[operator]


def test_exec_returns_output_exit_code_and_uses_stdin_cwd_and_env(
    open_sandbox: SandboxFactory, workspace: Path
) -> None:
    # given a session with a session-wide variable and a subdirectory in the workspace
    (workspace / "sub").mkdir()
    session = open_sandbox(workspace=workspace, environment={"SESSION_VAR": "s"})
    # when a command reads stdin, its cwd and the session + per-call environment, and fails
    result = session.exec(
        ExecRequest(
            argv=["sh", "-c", 'cat; pwd; echo "$SESSION_VAR $CALL_VAR $HOME"; exit 3'],
            stdin=b"from stdin\n",
            env={"CALL_VAR": "c"},
            cwd="/workspace/sub",
        )
    )
    # then everything is reported exactly
    assert result.exit_code == 3
    assert result.stdout == b"from stdin\n/workspace/sub\ns c /workspace\n"
    assert result.stderr == b""
    assert result.timed_out is False
    assert result.truncated is False


def test_per_call_environment_does_not_leak_into_the_next_call(
    open_sandbox: SandboxFactory,
) -> None:
    # given a call that received a credential variable
    session = open_sandbox()
    first = session.exec(ExecRequest(argv=["sh", "-c", "echo $TOKEN"], env={"TOKEN": "t0k"}))
    # when the next call looks for it
    second = session.exec(ExecRequest(argv=["sh", "-c", "echo ${TOKEN:-unset}"]))
    # then it is gone
    assert first.stdout == b"t0k\n"
    assert second.stdout == b"unset\n"


def test_files_written_inside_appear_in_the_host_workspace(
    open_sandbox: SandboxFactory, workspace: Path
) -> None:
    # given a host file in the workspace
    (workspace / "in.txt").write_text("hello")
    session = open_sandbox(workspace=workspace)
    # when the sandbox transforms it
    result = session.exec(ExecRequest(argv=["sh", "-c", "tr a-z A-Z < in.txt > out.txt"]))
    # then the host sees the result
    assert result.exit_code == 0
    assert (workspace / "out.txt").read_text() == "HELLO"


def test_missing_command_gives_127_and_a_message(open_sandbox: SandboxFactory) -> None:
    session = open_sandbox()
    result = session.exec(ExecRequest(argv=["no-such-command-xyz"]))
    assert result.exit_code == 127
    assert result.stderr == b"no-such-command-xyz: command not found"


def test_missing_cwd_is_reported(open_sandbox: SandboxFactory) -> None:
    session = open_sandbox()
    result = session.exec(ExecRequest(argv=["true"], cwd="/workspace/nope"))
    assert result.exit_code == 126
    assert result.stderr == b"working directory /workspace/nope does not exist"


def test_output_limit_applies_to_each_stream(open_sandbox: SandboxFactory) -> None:
    session = open_sandbox(limits=Limits(output_bytes=10))
    result = session.exec(ExecRequest(argv=["sh", "-c", "echo 0123456789abc; echo xy >&2"]))
    assert result.stdout == b"0123456789"
    assert result.stderr == b"xy\n"
    assert result.truncated is True


def test_invalid_request_is_refused_without_running(open_sandbox: SandboxFactory) -> None:
    session = open_sandbox()
    with pytest.raises(ValueError, match="argv"):
        session.exec(ExecRequest(argv=[]))
    with pytest.raises(ValueError, match="NUL"):
        session.exec(ExecRequest(argv=["true"], env={"A": "x\0y"}))
    # the session is still fine afterwards
    assert session.exec(ExecRequest(argv=["echo", "ok"])).stdout == b"ok\n"


def test_close_kills_everything_and_removes_the_runtime_dir(
    open_sandbox: SandboxFactory,
) -> None:
    # given a session with a detached background daemon running
    session = open_sandbox()
    assert isinstance(session, BwrapSession)
    session.exec(ExecRequest(argv=["sh", "-c", "true"]))
    runtime_dir = session._runtime_dir
    uid = session.host_uid
    assert runtime_dir.is_dir()
    assert live_processes_of(uid) != []
    # when it is closed
    session.close()
    # then no process of its uid is alive, its runtime dir is gone and calls are refused
    assert live_processes_of(uid) == []
    assert not runtime_dir.exists()
    assert session.closed is True
    with pytest.raises(SandboxError, match="closed"):
        session.exec(ExecRequest(argv=["true"]))
    session.close()  # idempotent


def test_each_session_gets_its_own_host_uid(open_sandbox: SandboxFactory) -> None:
    first = open_sandbox()
    second = open_sandbox()
    assert isinstance(first, BwrapSession) and isinstance(second, BwrapSession)
    assert first.host_uid != second.host_uid
    assert first.host_uid != 0 and second.host_uid != 0


def test_sessions_taking_turns_on_one_workspace_can_each_use_it(
    open_sandbox: SandboxFactory, workspace: Path
) -> None:
    # given a private workspace (mode 0700, as runs create them) and two warm sessions on it, as
    # two worker processes hold them for one run whose slices move between the processes; each
    # session has its own host uid, and opening the second one gave the workspace to its uid
    workspace.chmod(0o700)
    first = open_sandbox(workspace=workspace)
    second = open_sandbox(workspace=workspace)
    assert isinstance(first, BwrapSession) and isinstance(second, BwrapSession)
    assert first.host_uid != second.host_uid

    def tool(session: BwrapSession, name: str, **args: object) -> tuple[bool, str]:
        result = execute_tool(session, name, args, network_enabled=False)
        return result.ok, result.output

    # when they take turns with file tools and a command
    steps = [
        tool(first, "write", path="notes.txt", content="one\n"),
        tool(second, "edit", path="notes.txt", old_string="one", new_string="two"),
        tool(first, "edit", path="notes.txt", old_string="two", new_string="three"),
    ]
    made = first.exec(ExecRequest(argv=["/usr/bin/python3", "-c", "open('made', 'w').close()"]))
    steps.append(tool(second, "read", path="notes.txt"))
    # then every call worked; before, the first session's uid could no longer enter /workspace
    # ("/usr/bin/python3: Permission denied", exit 126)
    assert steps == [
        (True, "wrote 4 bytes to notes.txt"),
        (True, "edited notes.txt: replaced 1 occurrence at line 1"),
        (True, "edited notes.txt: replaced 1 occurrence at line 1"),
        (True, "three\n"),
    ]
    assert (made.exit_code, made.stderr) == (0, b"")
    # and the workspace belongs to the sandbox uid of the session that used it last
    owners = {p.name: p.stat().st_uid for p in [workspace, *workspace.iterdir()]}
    assert owners == {
        "workspace": second.host_uid,
        "notes.txt": second.host_uid,
        "made": second.host_uid,
    }


_MANY_SESSIONS = """
import json, sys, threading
from pathlib import Path
from sandbox.backends import get_backend
from sandbox.tools import execute_tool
from sandbox.types import SessionSpec

root, tag, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
backend = get_backend("bwrap")
barrier = threading.Barrier(count)
out = {}

def one(i):
    workspace = root / f"{tag}-{i}"
    workspace.mkdir(mode=0o700)
    barrier.wait()
    with backend.open(SessionSpec(workspace=workspace)) as session:
        calls = []
        for n in range(3):
            for name, args in (
                ("write", {"path": f"f{n}.txt", "content": f"{tag}-{i}-{n}"}),
                ("read", {"path": f"f{n}.txt"}),
                ("bash", {"command": f"cat f{n}.txt"}),
            ):
                r = execute_tool(session, name, args, network_enabled=False)
                calls.append([r.ok, r.output])
        out[i] = {"uid": session.host_uid, "calls": calls}

threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(out))
"""


def test_many_sessions_opened_at_once_from_several_processes_all_work(tmp_path: Path) -> None:
    # given three processes that each open five sessions at the same instant from five threads
    # (as busy worker processes do), each on its own private workspace
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _MANY_SESSIONS, str(tmp_path), f"p{k}", "5"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for k in range(3)
    ]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0], [err[-2000:] for _o, err in outputs]
    # when each session wrote, read and cat'ed its files
    results = {
        f"p{k}-{i}": v for k, (out, _e) in enumerate(outputs) for i, v in json.loads(out).items()
    }
    # then every call worked, in every session, and no two sessions shared a host uid
    for name, result in results.items():
        expected = []
        for n in range(3):
            expected += [
                [True, f"wrote {len(name) + 2} bytes to f{n}.txt"],
                [True, f"{name}-{n}"],
                [True, f"{name}-{n}"],
            ]
        assert result["calls"] == expected, name
    uids = [result["uid"] for result in results.values()]
    assert len(uids) == 15 and len(set(uids)) == 15


def test_sandbox_that_cannot_start_raises_sandbox_error(tmp_path: Path) -> None:
    backend = get_backend("bwrap")
    # a missing workspace
    with pytest.raises(SandboxError, match="workspace"):
        backend.open(SessionSpec(workspace=tmp_path / "missing"))
    # a workspace that is a symlink
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(SandboxError, match="not a directory"):
        backend.open(SessionSpec(workspace=tmp_path / "link"))
    # a read-only mount over the workspace
    with pytest.raises(SandboxError, match="not allowed"):
        backend.open(
            SessionSpec(workspace=tmp_path / "real", readonly_mounts=[(tmp_path, "/workspace")])
        )


def test_readonly_mounts_are_visible_and_read_only(
    open_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    # given a host directory with a file, mounted read-only at /skills/demo
    skill = tmp_path / "skill"
    skill.mkdir()
    (skill / "SKILL.md").write_text("# demo\n")
    session = open_sandbox(readonly_mounts=[(skill, "/skills/demo")])
    # when the sandbox reads and then tries to modify it
    read = session.exec(ExecRequest(argv=["cat", "/skills/demo/SKILL.md"]))
    write = session.exec(ExecRequest(argv=["sh", "-c", "echo x >> /skills/demo/SKILL.md"]))
    # then reading works, writing fails and the host file is unchanged
    assert read.stdout == b"# demo\n"
    assert write.exit_code != 0
    assert (skill / "SKILL.md").read_text() == "# demo\n"


def test_no_mount_is_left_on_the_host(open_sandbox: SandboxFactory, workspace: Path) -> None:
    # given a running session (its staging mounts live in a private mount namespace)
    session = open_sandbox(workspace=workspace)
    assert isinstance(session, BwrapSession)
    session.exec(ExecRequest(argv=["true"]))
    runtime_dir = str(session._runtime_dir)
    # when the host's mount table is read during and after the session
    during = Path("/proc/self/mountinfo").read_text()
    session.close()
    after = Path("/proc/self/mountinfo").read_text()
    # then neither the runtime dir nor the workspace was ever mounted on the host
    for table in (during, after):
        assert runtime_dir not in table
        assert str(workspace) not in table


def test_sandbox_dies_with_its_owning_process(tmp_path: Path) -> None:
    # given a worker process that opens a session and is then killed outright
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = textwrap.dedent(
        f"""
        import os, sys
        from pathlib import Path
        from sandbox.backends import get_backend
        from sandbox.types import ExecRequest, SessionSpec
        s = get_backend("bwrap").open(SessionSpec(workspace=Path({str(workspace)!r})))
        s.exec(ExecRequest(argv=["true"]))
        print(s.host_uid, flush=True)
        os.kill(os.getpid(), 9)
        """
    )
    worker = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert worker.returncode == -signal.SIGKILL
    uid = int(worker.stdout.strip())
    # then every process of the sandbox disappears
    assert wait_until(lambda: live_processes_of(uid) == [])


def test_registry_closes_idle_sessions_but_not_busy_ones(workspace: Path) -> None:
    # given a registry and a session with a 0 s idle timeout
    registry = SessionRegistry(reap_interval_s=3600)
    spec = SessionSpec(workspace=workspace, limits=Limits(idle_timeout_s=0.0))
    session = open_session(spec, "bwrap", session_registry=registry)
    other = open_session(
        SessionSpec(workspace=workspace, limits=Limits(idle_timeout_s=3600)),
        "bwrap",
        session_registry=registry,
    )
    try:
        assert len(registry) == 2
        # when the reaper runs
        closed = registry.close_idle(now=time.monotonic() + 1)
        # then only the idle one is closed and forgotten
        assert closed == [session.id]
        assert session.closed is True
        assert other.closed is False
        assert [s.id for s in registry] == [other.id]
    finally:
        registry.close_all()
    assert other.closed is True
    assert len(registry) == 0


def test_registry_reaper_thread_closes_idle_sessions(workspace: Path) -> None:
    registry = SessionRegistry(reap_interval_s=0.05)
    session = open_session(
        SessionSpec(workspace=workspace, limits=Limits(idle_timeout_s=0.1)),
        "bwrap",
        session_registry=registry,
    )
    assert wait_until(lambda: session.closed and len(registry) == 0)


def test_open_sessions_are_closed_at_interpreter_exit(tmp_path: Path) -> None:
    # given a process that opens a registered session and exits normally without closing it
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from sandbox.session import open_session
        from sandbox.types import SessionSpec
        s = open_session(SessionSpec(workspace=Path({str(workspace)!r})))
        print(s.inner.host_uid, s.inner._runtime_dir, flush=True)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    uid, runtime_dir = done.stdout.split()
    # then nothing of it is left
    assert live_processes_of(int(uid)) == []
    assert not Path(runtime_dir).exists()


def test_local_backend_is_refused_unless_enabled(workspace: Path) -> None:
    with pytest.raises(SandboxError, match="allow_local"):
        get_backend("local")
    with pytest.raises(SandboxError, match="unknown sandbox backend"):
        get_backend("chroot")


def test_local_backend_warns_on_every_session(workspace: Path) -> None:
    backend = get_backend("local", allow_local=True)
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            session = backend.open(SessionSpec(workspace=workspace))
        assert [str(w.message) for w in caught if "WITHOUT isolation" in str(w.message)] != []
        result = session.exec(ExecRequest(argv=["sh", "-c", "echo hi > f; pwd"]))
        assert result.stdout.decode().strip() == str(workspace.resolve())
        session.close()
    with pytest.warns(RuntimeWarning, match="WITHOUT isolation"):
        local = backend.open(SessionSpec(workspace=workspace))
    timed = local.exec(ExecRequest(argv=["sleep", "5"], timeout_s=0.2))
    assert timed.timed_out is True
    assert (workspace / "f").read_text() == "hi\n"


def test_supervisor_run_one_mode_applies_limits_and_seccomp(open_sandbox: SandboxFactory) -> None:
    # given a one-shot request for the supervisor's run-one mode (what a container backend uses)
    session = open_sandbox()
    request = {
        "config": {"limits": {"output_bytes": 64}, "env": {"PATH": "/usr/bin:/bin"}},
        "exec": {
            "argv": ["sh", "-c", "grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status; echo $X"],
            "env": {"X": "from-request"},
        },
    }
    # when it runs, fed on stdin and given as --request-b64
    via_stdin = session.exec(
        ExecRequest(
            argv=["python3", "-I", "-B", "/opt/motor-cortex/supervisor.py", "run-one"],
            stdin=json.dumps(request).encode(),
        )
    )
    via_arg = session.exec(
        ExecRequest(
            argv=[
                "python3",
                "-I",
                "-B",
                "/opt/motor-cortex/supervisor.py",
                "run-one",
                "--request-b64",
                base64.b64encode(json.dumps(request).encode()).decode(),
            ]
        )
    )
    # then each prints one RESULT whose command ran filtered, with the request's environment
    for outer in (via_stdin, via_arg):
        assert outer.exit_code == 0, outer.stderr
        result = json.loads(outer.stdout)
        assert result["op"] == "result"
        assert result["exit_code"] == 0
        assert base64.b64decode(result["stdout_b64"]) == (
            b"NoNewPrivs:\t1\nSeccomp:\t2\nfrom-request\n"
        )
        assert result["truncated"] is False


def test_supervisor_run_one_rejects_a_malformed_request(open_sandbox: SandboxFactory) -> None:
    session = open_sandbox()
    outer = session.exec(
        ExecRequest(
            argv=["python3", "-I", "-B", "/opt/motor-cortex/supervisor.py", "run-one"],
            stdin=b'{"exec": {"argv": []}}',
        )
    )
    assert outer.exit_code == 2
    assert json.loads(outer.stdout) == {
        "op": "error",
        "code": "invalid_args",
        "message": "argv must be a non-empty list of strings without NUL bytes",
    }


def test_supervisor_refuses_to_run_as_root() -> None:
    done = subprocess.run(
        ["/usr/bin/python3", "-I", "-B", str(REPO / "sandbox/inside/supervisor.py"), "serve"],
        capture_output=True,
        text=True,
        timeout=30,
        input="",
    )
    assert done.returncode == 3
    assert done.stderr == "supervisor: refusing to run as uid 0\n"


def test_backend_rejects_a_malformed_uid_range() -> None:
    with pytest.raises(SandboxError, match="MOTOR_SANDBOX_UID_RANGE"):
        BwrapBackend(uid_range="lots")


def test_supervisor_is_pid_1_unreadable_and_unkillable_from_inside(
    open_sandbox: SandboxFactory,
) -> None:
    # given a session (the supervisor is the namespace's PID 1 and the command's parent)
    session = open_sandbox()
    # when a command tries to read the supervisor's memory, environment and fds, and to kill it
    outcome = py_json(
        session,
        """
        import json, os, signal
        out = {"ppid": os.getppid()}
        for name in ("mem", "environ", "fd/0"):
            try:
                open(f"/proc/1/{name}", "rb").read(1)
                out[name] = "read"
            except OSError as exc:
                out[name] = type(exc).__name__
        out["seccomp"] = [l for l in open("/proc/1/status") if l.startswith("Seccomp:")][0].split()[1]
        os.kill(1, signal.SIGKILL)
        print(json.dumps(out))
        """,
    )
    # then all of it fails, the supervisor runs under its own seccomp filter, and it survives
    assert outcome == {
        "ppid": 1,
        "mem": "PermissionError",
        "environ": "PermissionError",
        "fd/0": "PermissionError",
        "seccomp": "2",
    }
    assert session.exec(ExecRequest(argv=["echo", "alive"])).stdout == b"alive\n"


def test_threads_work_under_the_filter(open_sandbox: SandboxFactory) -> None:
    # clone3 is answered with ENOSYS so libc falls back to clone, whose flags the filter checks
    session = open_sandbox()
    result = py_json(
        session,
        """
        import json, threading
        out = []
        threads = [threading.Thread(target=out.append, args=(i,)) for i in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        print(json.dumps(sorted(out)))
        """,
    )
    assert result == [0, 1, 2, 3]


def test_foreign_abi_syscall_kills_the_process(open_sandbox: SandboxFactory) -> None:
    # given the x32 ABI bit on an x86_64 syscall number (the filter's numbers would not apply)
    import platform

    assert platform.machine() == "x86_64", "this check is written for x86_64 hosts"
    session = open_sandbox()
    result = py(
        session,
        """
        import ctypes
        ctypes.CDLL(None).syscall(0x40000000 | 39)  # x32 getpid
        print("survived")
        """,
    )
    assert result.signal == signal.SIGSYS
    assert result.stdout == b""


def test_a_dead_supervisor_fails_the_call_and_closes_the_session(
    open_sandbox: SandboxFactory,
) -> None:
    # given a session whose bwrap process gets killed from the host while a call runs
    session = open_sandbox()
    assert isinstance(session, BwrapSession)
    uid = session.host_uid
    import threading

    killer = threading.Timer(0.5, lambda: os.kill(session._proc.pid, signal.SIGKILL))
    killer.start()
    # when the call waits for its result
    with pytest.raises(SandboxError, match="supervisor"):
        session.exec(ExecRequest(argv=["sleep", "30"], timeout_s=60))
    killer.join()
    # then the session is closed and nothing of it is left
    assert session.closed is True
    assert wait_until(lambda: live_processes_of(uid) == [])


def test_session_opened_in_a_short_lived_thread_survives_the_thread(
    open_sandbox: SandboxFactory,
) -> None:
    # given a session opened from a thread that has since ended
    import threading

    box: list[object] = []
    opener = threading.Thread(target=lambda: box.append(open_sandbox()))
    opener.start()
    opener.join()
    session = box[0]
    assert isinstance(session, BwrapSession)
    # when it is used from another thread
    result = session.exec(ExecRequest(argv=["echo", "alive"]))
    # then the sandbox is still there
    assert result.stdout == b"alive\n"


def test_workspace_quota_caps_a_single_big_file_and_allows_cleanup(
    open_sandbox: SandboxFactory, workspace: Path
) -> None:
    # given an 8 MiB workspace quota and a generous per-file cap
    session = open_sandbox(
        workspace=workspace,
        limits=Limits(workspace_bytes=8 * 1024 * 1024, file_size_bytes=1024 * 1024 * 1024),
    )
    # when one command writes 100 MB into one file
    big = session.exec(
        ExecRequest(argv=["sh", "-c", "head -c 100000000 /dev/zero > /workspace/big"])
    )
    # then the write stops at the quota: the host file never exceeds it
    assert big.exit_code != 0
    assert (workspace / "big").stat().st_size <= 8 * 1024 * 1024
    # and once full, further writes fail while deleting works
    more = session.exec(ExecRequest(argv=["sh", "-c", "head -c 10 /dev/zero > /workspace/more"]))
    assert more.exit_code != 0
    removed = session.exec(ExecRequest(argv=["rm", "/workspace/big", "/workspace/more"]))
    assert removed.exit_code == 0
    assert sorted(p.name for p in workspace.iterdir()) == []
    again = session.exec(ExecRequest(argv=["sh", "-c", "echo fine > /workspace/ok"]))
    assert again.exit_code == 0
    assert (workspace / "ok").read_text() == "fine\n"


def test_hard_link_to_an_outside_file_is_not_handed_to_the_sandbox(
    open_sandbox: SandboxFactory, workspace: Path, tmp_path: Path
) -> None:
    # given a root-owned file outside the workspace that also has a name inside it
    outside = tmp_path / "outside.txt"
    outside.write_text("host data")
    os.chmod(outside, 0o600)
    os.link(outside, workspace / "linked.txt")
    (workspace / "own.txt").write_text("mine")
    # when a session opens on the workspace (which hands the workspace to the sandbox uid)
    session = open_sandbox(workspace=workspace)
    assert isinstance(session, BwrapSession)
    write = session.exec(ExecRequest(argv=["sh", "-c", "echo pwned > /workspace/linked.txt"]))
    # then the multiply-linked file kept its owner and bytes; ordinary files were handed over
    assert outside.stat().st_uid == 0
    assert write.exit_code != 0
    assert outside.read_text() == "host data"
    assert (workspace / "own.txt").stat().st_uid == session.host_uid


LIMITS_PROBE = """
import ctypes, json, platform, resource, subprocess
libc = ctypes.CDLL(None, use_errno=True)


class Rlimit(ctypes.Structure):
    _fields_ = [("cur", ctypes.c_ulong), ("max", ctypes.c_ulong)]


def err(rc):
    return 0 if rc == 0 else ctypes.get_errno()


lower = Rlimit(10, 10)
seen = Rlimit()
setrlimit_nr = 160 if platform.machine() == "x86_64" else 164
out = {
    "nofile": list(resource.getrlimit(resource.RLIMIT_NOFILE)),
    "nproc": list(resource.getrlimit(resource.RLIMIT_NPROC)),
    "cpu": list(resource.getrlimit(resource.RLIMIT_CPU)),
    "lower_own": err(libc.prlimit(0, resource.RLIMIT_NOFILE, ctypes.byref(lower), None)),
    "raw_setrlimit": err(
        libc.syscall(setrlimit_nr, resource.RLIMIT_NOFILE, ctypes.byref(lower))
    ),
    "read_pid1": err(libc.prlimit(1, resource.RLIMIT_NOFILE, None, ctypes.byref(seen))),
    "lower_pid1": err(libc.prlimit(1, resource.RLIMIT_CPU, ctypes.byref(lower), None)),
    "grandchild": subprocess.run(
        ["sh", "-c", "ulimit -n; ulimit -p; ulimit -n 50 2>/dev/null || echo refused"],
        capture_output=True, text=True,
    ).stdout.split(),
}
print(json.dumps(out))
"""


def _supervisor_pids(session: BwrapSession) -> list[int]:
    bwrap_pid = session._proc.pid
    return [
        int(p) for p in Path(f"/proc/{bwrap_pid}/task/{bwrap_pid}/children").read_text().split()
    ]


@pytest.mark.parametrize(
    "memory_bytes",
    [
        512 * 1024 * 1024,
        # below the supervisor's own address space plus headroom: the limits cannot be handed
        # over by inheritance and are set between fork and exec instead
        64 * 1024 * 1024,
    ],
)
def test_commands_hold_their_limits_and_cannot_change_any(
    open_sandbox: SandboxFactory, memory_bytes: int
) -> None:
    # given a session with distinctive limits
    session = open_sandbox(
        limits=Limits(open_files=100, max_processes=40, cpu_seconds=300, memory_bytes=memory_bytes)
    )
    assert isinstance(session, BwrapSession)
    (supervisor,) = _supervisor_pids(session)
    before = Path(f"/proc/{supervisor}/limits").read_text()
    # when a command reads its limits, tries to lower its own and the supervisor's, and starts
    # a shell that reads and tries to change them too
    outcome = py_json(session, LIMITS_PROBE)
    # then it holds exactly the session's limits (soft and hard), every change of its own limits
    # is refused, prlimit() on the supervisor is refused (to read as well as to change), and the
    # grandchild is bound the same way
    assert outcome == {
        "nofile": [100, 100],
        "nproc": [40, 40],
        "cpu": [300, 301],
        "lower_own": errno.EPERM,
        "raw_setrlimit": errno.EPERM,
        "read_pid1": errno.EPERM,
        "lower_pid1": errno.EPERM,
        "grandchild": ["100", "40", "refused"],
    }
    # and the supervisor's own limits are what they were before the call
    assert Path(f"/proc/{supervisor}/limits").read_text() == before


def test_a_new_backend_sweeps_the_runtime_dirs_of_dead_owners_only(
    open_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    # given a live session of this process, and a worker process that opened a network session
    # (so its runtime dir holds an egress socket) and was then killed outright
    live = open_sandbox()
    assert isinstance(live, BwrapSession)
    workspace = tmp_path / "dead-owner-ws"
    workspace.mkdir()
    script = textwrap.dedent(
        f"""
        import os
        from pathlib import Path
        from sandbox.backends import get_backend
        from sandbox.types import ExecRequest, NetworkPolicy, SessionSpec
        s = get_backend("bwrap").open(SessionSpec(
            workspace=Path({str(workspace)!r}),
            network=NetworkPolicy(allowed_domains=("api.allowed.test",)),
        ))
        s.exec(ExecRequest(argv=["true"]))
        print(s._runtime_dir, s.host_uid, flush=True)
        os.kill(os.getpid(), 9)
        """
    )
    worker = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert worker.returncode == -signal.SIGKILL, worker.stderr
    dead_dir_text, uid_text = worker.stdout.split()
    dead_dir, dead_uid = Path(dead_dir_text), int(uid_text)
    assert (dead_dir / "net" / "egress.sock").is_socket()
    # when a new backend starts
    BwrapBackend()
    # then the dead owner's runtime dir (with its socket) is gone and its uid is free again:
    # nothing runs as it and its lease can be taken
    assert not dead_dir.exists()
    assert live_processes_of(dead_uid) == []
    lock_fd = os.open(live._runtime_dir.parent / "uids" / f"{dead_uid}.lock", os.O_RDWR)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(lock_fd)
    # and the live session's dir and sandbox are untouched
    assert live._runtime_dir.is_dir()
    assert live.exec(ExecRequest(argv=["true"])).exit_code == 0


def test_get_backend_keeps_one_instance_per_name_options_and_configuration(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # given a backend obtained by name
    first = get_backend("bwrap")
    # when it is asked for again, with other options, and under another configuration
    again = get_backend("bwrap")
    local = get_backend("local", allow_local=True)
    local_again = get_backend("local", allow_local=True)
    configured = os.environ.get("MOTOR_SANDBOX_RUNTIME_DIR")
    monkeypatch.setenv("MOTOR_SANDBOX_RUNTIME_DIR", str(tmp_path / "other-runtime"))
    reconfigured = get_backend("bwrap")
    # then the same name and configuration give the same instance, anything else a new one
    assert again is first
    assert local is not first and local_again is local
    assert reconfigured is not first
    assert get_backend("bwrap") is reconfigured
    if configured is None:
        monkeypatch.delenv("MOTOR_SANDBOX_RUNTIME_DIR")
    else:
        monkeypatch.setenv("MOTOR_SANDBOX_RUNTIME_DIR", configured)
    assert get_backend("bwrap") is first
    # and a refused backend is never cached as if it had been created
    with pytest.raises(SandboxError, match="off"):
        get_backend("local")
