"""`code` and `bash` in real bwrap and Docker sessions without network: results, caps, containment of
commands the validator lets through, the reduced PATH behind it, and credential redaction."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.backends import get_backend
from sandbox.tools import execute_tool
from sandbox.types import ErrorCode, ExecRequest, Limits, Session, SessionSpec, ToolResult

SECRET = "sk-test-4f9a8b7c6d5e"
CREDS = {"API_TOKEN": SECRET}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    (path / "data.txt").write_text("b\na\nb\nc\nb\n")
    (path / "big.txt").write_text("y" * 20_000)
    return path


@pytest.fixture(params=["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def session(ws: Path, backend: str) -> Iterator[Session]:
    opened = get_backend(backend).open(SessionSpec(workspace=ws))
    yield opened
    opened.close()


def run(session: Session, name: str, **args: object) -> ToolResult:
    return execute_tool(session, name, args, credentials=CREDS, network_enabled=False)


def assert_no_secret(result: ToolResult) -> None:
    assert SECRET not in json.dumps(result.to_dict())


# ------------------------------------------------------------------------------------ code


def test_code_prints_its_output(session: Session) -> None:
    result = run(session, "code", code="import os\nprint(sum(range(10)), os.getcwd())")
    assert (result.ok, result.output, result.exit_code, result.provenance) == (
        True,
        "45 /workspace\n",
        0,
        "internal",
    )


def test_code_failure_is_data_with_the_traceback(session: Session) -> None:
    result = run(session, "code", code="1/0")
    assert (result.ok, result.error_code, result.exit_code, result.retryable) == (
        False,
        ErrorCode.EXIT_NONZERO,
        1,
        False,
    )
    assert result.output == (
        "[stderr]\nTraceback (most recent call last):\n"
        '  File "<stdin>", line 1, in <module>\n'
        "ZeroDivisionError: division by zero\n[exit status 1]"
    )


@pytest.mark.slow
def test_code_is_killed_after_five_seconds_without_network(session: Session) -> None:
    result = run(session, "code", code="print('started', flush=True)\nwhile True: pass")
    assert (result.ok, result.error_code, result.timed_out, result.retryable) == (
        False,
        ErrorCode.TIMEOUT,
        True,
        False,
    )
    assert result.output == "timed out after 5 s and was killed\nstarted"


def test_code_output_is_capped_at_32_kb(session: Session) -> None:
    result = run(session, "code", code="print('x' * 100_000)")
    # a cut does not fail a successful program; it is flagged and marked
    assert (result.ok, result.error_code, result.truncated) == (True, None, True)
    assert result.output == "x" * 32768 + "\n[output truncated at 32768 bytes]"


def test_code_has_no_network(session: Session) -> None:
    # given a program that tries PostgreSQL on the host's loopback and a public address
    program = (
        "import socket\n"
        "for addr in [('127.0.0.1', 5432), ('93.184.216.34', 443)]:\n"
        "    try:\n"
        "        socket.create_connection(addr, timeout=2)\n"
        "        print('connected', addr)\n"
        "    except OSError as exc:\n"
        "        print(type(exc).__name__, exc.errno)\n"
    )
    # when run, then the sandbox's own loopback refuses and nothing else is routable
    result = run(session, "code", code=program)
    assert result.output == "ConnectionRefusedError 111\nOSError 101\n"


def test_code_sees_credentials_as_environment_and_output_is_redacted(session: Session) -> None:
    program = (
        "import base64, os\n"
        "v = os.environ['API_TOKEN']\n"
        "print(v)\n"
        "print(base64.b64encode(v.encode()).decode())\n"
        "raise SystemExit('failed with ' + v)\n"
    )
    result = run(session, "code", code=program)
    assert result.output == (
        "<credential:API_TOKEN>\n<credential:API_TOKEN>\n"
        "[stderr]\nfailed with <credential:API_TOKEN>\n[exit status 1]"
    )
    assert_no_secret(result)


def test_code_placeholders_are_substituted(session: Session) -> None:
    result = run(session, "code", code="print(len('<credential:API_TOKEN>'))")
    assert result.output == f"{len(SECRET)}\n"


# ------------------------------------------------------------------------------------ bash


def test_bash_runs_an_allowlisted_pipeline(session: Session) -> None:
    result = run(session, "bash", command="cat data.txt | sort | uniq -c | sort -rn | head -n 1")
    assert (result.ok, result.output.split(), result.provenance) == (
        True,
        ["3", "b"],
        "internal",
    )


def test_bash_nonzero_exit_is_data(session: Session) -> None:
    result = run(session, "bash", command="grep zzz data.txt")
    assert (result.ok, result.error_code, result.exit_code, result.output) == (
        False,
        ErrorCode.EXIT_NONZERO,
        1,
        "[exit status 1]",
    )


def test_a_refused_command_runs_nothing(session: Session, ws: Path) -> None:
    # given a list whose first part is harmless and whose second is an interpreter
    result = run(session, "bash", command="echo hi > made.txt; python3 -c 'print(1)'")
    # then the whole command is refused and not even the first part ran
    assert (result.ok, result.error_code, result.exit_code) == (False, ErrorCode.DENIED, None)
    assert result.output.startswith("bash: refused by rule 'interpreter': `python3`")
    assert not (ws / "made.txt").exists()


def test_bash_output_is_capped_at_10_kb(session: Session) -> None:
    result = run(session, "bash", command="cat big.txt")
    assert (result.ok, result.truncated) == (True, True)
    assert result.output == "y" * 10240 + "\n[output truncated at 10240 bytes]"


def test_bash_with_curl_is_web_provenance(session: Session) -> None:
    result = run(session, "bash", command="curl -sS -m 5 http://127.0.0.1:5432/")
    assert (result.provenance, result.exit_code) == ("web", 7)


#: what `cat /etc/shadow` meets: bwrap binds no /etc/shadow at all; the Docker image has its own,
#: readable by root only (the sandbox user is not root)
SHADOW_ERROR = {
    "bwrap": "cat: /etc/shadow: No such file or directory",
    "docker": "cat: /etc/shadow: Permission denied",
}


def test_a_validator_passing_read_of_host_secrets_is_contained(
    session: Session, backend: str
) -> None:
    # given a command the allowlist accepts, when it reads the shadow file
    result = run(session, "bash", command="cat /etc/shadow")
    # then it fails inside the sandbox
    assert (result.exit_code, result.output) == (
        1,
        f"[stderr]\n{SHADOW_ERROR[backend]}\n[exit status 1]",
    )


def test_a_validator_passing_connection_to_host_postgres_is_contained(session: Session) -> None:
    # given a command the allowlist accepts, when it connects to PostgreSQL on 127.0.0.1:5432
    result = run(session, "bash", command="curl -sS -m 5 http://127.0.0.1:5432/")
    # then the sandbox's own loopback has nothing there: curl's "couldn't connect" (7)
    assert result.exit_code == 7
    assert result.output.startswith(
        "[stderr]\ncurl: (7) Failed to connect to 127.0.0.1 port 5432 after "
    )
    assert result.output.endswith(" ms: Couldn't connect to server\n[exit status 7]")


def test_tee_cannot_write_outside_the_workspace(session: Session) -> None:
    # given tee, which writes to files named as arguments (not redirections)
    result = execute_tool(
        session,
        "bash",
        {"command": "echo owned | tee /usr/owned /etc/owned /workspace/ok.txt"},
        bash_allowlist=("echo", "tee"),
        network_enabled=False,
    )
    # then only the workspace copy was written: the rest of the tree is read-only or absent
    assert result.exit_code == 1
    assert "tee: /usr/owned: Read-only file system" in result.output
    probe = session.exec(
        ExecRequest(
            argv=["/usr/bin/python3", "-c", "import os;print(os.path.exists('/usr/owned'))"]
        )
    )
    assert probe.stdout == b"False\n"


def test_a_copied_interpreter_cannot_be_run(session: Session, ws: Path) -> None:
    # given python3 copied into the workspace with allowlisted commands
    copied = run(session, "bash", command="cat /usr/bin/python3 > py; wc -c < py")
    # when it is named by path, by bare name, or through the dynamic loader
    by_path = run(session, "bash", command="./py -c 1")
    by_name = run(session, "bash", command="py -c 1")
    loader = run(session, "bash", command="ld-linux-x86-64.so.2 ./py -c 1")
    # then the copy exists but is not executable, and every way to start it is refused
    assert copied.ok
    assert int(copied.output) == (ws / "py").stat().st_size
    assert (ws / "py").stat().st_mode & 0o111 == 0
    assert [by_path.output, by_name.output, loader.output] == [
        "bash: refused by rule 'bare-name': `./py`: commands must be named by their bare name "
        "from the allowlist, not by a path",
        "bash: refused by rule 'not-allowlisted': `py` is not in this call's allowlist "
        "(cat, curl, date, echo, grep, head, jq, sort, tail, uniq, wc)",
        "bash: refused by rule 'executes-argument': `ld-linux-x86-64.so.2` runs another program "
        "given as its argument; it is never allowed",
    ]


def test_path_inside_is_only_the_allowlisted_binaries(session: Session) -> None:
    # given the in-sandbox runner called directly, bypassing the validator (defence in depth)
    request = {
        "command": "echo $PATH; python3 -c 'print(1)'; ./py; sh -c 'echo x'",
        "allowlist": ["echo"],
    }
    result = session.exec(
        ExecRequest(
            argv=["/usr/bin/python3", "-I", "-B", "/opt/motor-cortex/tools.py", "bash"],
            stdin=json.dumps(request).encode(),
        )
    )
    # then bare names outside the allowlist are not found at all
    assert result.stdout.decode().startswith("/tmp/motor-bin-")
    assert result.stderr.decode() == (
        "/bin/bash: line 1: python3: command not found\n"
        "/bin/bash: line 1: ./py: No such file or directory\n"
        "/bin/bash: line 1: sh: command not found\n"
    )


# What an interpreter that got past the allowlist tries once it runs: read the host's shadow file
# and the sandbox init's environment, write outside the workspace, and see who it is.
ESCAPE_PROGRAM = (
    "import hashlib, json, os\n"
    "out = {}\n"
    "for key, path in (('shadow', '/etc/shadow'), ('environ', '/proc/1/environ')):\n"
    "    try:\n"
    "        out[key] = hashlib.sha256(open(path, 'rb').read()).hexdigest()\n"
    "    except OSError as exc:\n"
    "        out[key] = type(exc).__name__\n"
    "for key, path in (('etc', '/etc/motor-escaped'), ('usr', '/usr/motor-escaped')):\n"
    "    try:\n"
    "        open(path, 'w').write('x')\n"
    "        out[key] = 'written'\n"
    "    except OSError as exc:\n"
    "        out[key] = type(exc).__name__\n"
    "out['uid'] = os.getuid()\n"
    "out['capeff'] = [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0]\n"
    "print(json.dumps(out))\n"
)


@pytest.mark.parametrize(
    "launch",
    [
        '/proc/self/root/usr/bin/python3 -I -c "$PROGRAM"',
        '/lib64/ld-linux-x86-64.so.2 /usr/bin/python3 -I -c "$PROGRAM"',
        'cat /usr/bin/python3 > py && /lib64/ld-linux-x86-64.so.2 ./py -I -c "$PROGRAM"',
        '/usr/bin/python3 -I -c "$PROGRAM"',
    ],
    ids=["proc-self-root", "loader", "copied-binary-via-loader", "interpreter-by-path"],
)
def test_an_interpreter_past_the_allowlist_is_still_contained(
    session: Session, ws: Path, launch: str
) -> None:
    # given the allowlist refuses every one of these launches
    refused = run(session, "bash", command=launch)
    assert (refused.ok, refused.error_code) == (False, ErrorCode.DENIED)
    # when the in-sandbox runner is driven directly, as if the validator had been fooled
    request = {"command": launch, "allowlist": ["cat"]}
    result = session.exec(
        ExecRequest(
            argv=["/usr/bin/python3", "-I", "-B", "/opt/motor-cortex/tools.py", "bash"],
            stdin=json.dumps(request).encode(),
            env={"PROGRAM": ESCAPE_PROGRAM},
        )
    )
    # then the interpreter does run, but as an unprivileged user with no capabilities, it can
    # read neither the host's shadow file nor the init's environment, and nothing it tried to
    # write outside the workspace exists on the host
    assert result.exit_code == 0, result.stderr
    seen = json.loads(result.stdout)
    host_shadow = hashlib.sha256(Path("/etc/shadow").read_bytes()).hexdigest()
    assert seen["shadow"] in ("FileNotFoundError", "PermissionError")
    assert seen["shadow"] != host_shadow
    assert seen["environ"] in ("FileNotFoundError", "PermissionError")
    assert (seen["etc"], seen["usr"]) == ("OSError", "OSError")
    assert seen["uid"] != 0
    assert seen["capeff"] == "0000000000000000"
    assert not Path("/etc/motor-escaped").exists()
    assert not Path("/usr/motor-escaped").exists()


def test_bash_credentials_are_variables_and_redacted(session: Session) -> None:
    result = run(
        session,
        "bash",
        command='echo "token=<credential:API_TOKEN>"; echo "$API_TOKEN" >&2',
    )
    assert result.output == ("token=<credential:API_TOKEN>\n[stderr]\n<credential:API_TOKEN>\n")
    assert_no_secret(result)


def test_a_credential_value_cannot_inject_shell_syntax(session: Session, ws: Path) -> None:
    # given a credential whose value is shell syntax
    creds = {"EVIL": "x'; echo INJECTED > /workspace/pwned; echo '"}
    # when it is used through a placeholder
    result = execute_tool(
        session,
        "bash",
        {"command": 'echo "<credential:EVIL>" | wc -c'},
        credentials=creds,
        network_enabled=False,
    )
    # then it was data: counted, not executed
    assert result.output == f"{len(creds['EVIL']) + 1}\n"
    assert not (ws / "pwned").exists()


def test_unknown_placeholders_refuse_the_call(session: Session, ws: Path) -> None:
    result = run(session, "bash", command='echo "<credential:NOPE>" > out.txt')
    assert (result.ok, result.error_code, result.output) == (
        False,
        ErrorCode.INVALID_ARGS,
        "unknown credential placeholder(s): <credential:NOPE>; only credentials granted to "
        "this run can be used",
    )
    assert not (ws / "out.txt").exists()


def test_a_closed_session_is_a_sandbox_error(ws: Path, backend: str) -> None:
    opened = get_backend(backend).open(SessionSpec(workspace=ws))
    opened.close()
    result = run(opened, "bash", command="echo hi")
    assert (result.ok, result.error_code, result.retryable) == (
        False,
        ErrorCode.SANDBOX_ERROR,
        True,
    )


def kill_sandbox_from_the_host(session: Session, backend: str) -> None:
    """Take the sandbox down under the session's feet: bwrap's process, or the container."""
    if backend == "bwrap":
        from sandbox.backends.bwrap import BwrapSession

        assert isinstance(session, BwrapSession)
        os.kill(session._proc.pid, signal.SIGKILL)
        session._proc.wait(10)
    else:
        import docker

        from sandbox.backends.docker import DockerSession

        assert isinstance(session, DockerSession)
        docker.from_env().containers.get(session.container_id).kill()


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("bash", {"command": "echo hi > after.txt"}),
        ("code", {"code": "open('/workspace/after.txt', 'w').write('hi')"}),
        ("write", {"path": "after.txt", "content": "hi"}),
        ("read", {"path": "data.txt"}),
    ],
)
def test_a_sandbox_that_died_fails_the_call_with_sandbox_error(
    ws: Path, backend: str, tool: str, args: dict[str, object]
) -> None:
    # given a session whose sandbox was killed from the host after it started
    opened = get_backend(backend).open(SessionSpec(workspace=ws))
    try:
        kill_sandbox_from_the_host(opened, backend)
        # when a tool call is made, and another after it
        first = execute_tool(opened, tool, args, network_enabled=False)
        second = execute_tool(opened, tool, args, network_enabled=False)
    finally:
        opened.close()
    # then both fail as retryable sandbox errors, nothing ran anywhere, and the session is done
    for result in (first, second):
        assert (result.ok, result.error_code, result.retryable) == (
            False,
            ErrorCode.SANDBOX_ERROR,
            True,
        )
        assert result.output.startswith("the sandbox failed: ")
    assert not (ws / "after.txt").exists()
    assert opened.closed is True


def _quota_session(path: Path, backend: str) -> Session:
    path.mkdir()
    # a workspace that may hold 2 MB
    limits = Limits(workspace_bytes=2 * 1024 * 1024)
    return get_backend(backend).open(SessionSpec(workspace=path, limits=limits))


def test_one_huge_file_stops_at_the_quota(tmp_path: Path, backend: str) -> None:
    opened = _quota_session(tmp_path / "one", backend)
    try:
        # when a program writes one 64 MB file
        result = run(opened, "code", code="open('big.bin', 'wb').write(b'0' * (64 << 20))")
    finally:
        opened.close()
    # then the write fails at what was left of the quota
    assert (result.ok, result.error_code) == (False, ErrorCode.EXIT_NONZERO)
    assert "OSError: [Errno 27] File too large" in result.output
    assert (tmp_path / "one" / "big.bin").stat().st_size <= 2 * 1024 * 1024


def test_many_small_files_past_the_quota_are_stopped_as_too_large(
    tmp_path: Path, backend: str
) -> None:
    opened = _quota_session(tmp_path / "many", backend)
    try:
        # when a program writes 100 files of 100 KB (10 MB in all), one at a time
        result = run(
            opened,
            "code",
            code=(
                "import time\n"
                "for i in range(100):\n"
                "    open(f'part{i}.bin', 'wb').write(b'0' * 102400)\n"
                "    time.sleep(0.01)\n"
            ),
        )
    finally:
        opened.close()
    # then the quota watcher kills it and the result says the workspace is too large
    assert (result.ok, result.error_code) == (False, ErrorCode.TOO_LARGE)
    assert result.output == "the workspace went over its disk quota; the command was killed"
    assert len(list((tmp_path / "many").iterdir())) < 100


def test_an_oversized_command_is_refused_before_it_runs(session: Session, ws: Path) -> None:
    command = "echo x > made.txt; echo " + "a" * 70_000
    result = run(session, "bash", command=command)
    assert (result.ok, result.error_code, result.output) == (
        False,
        ErrorCode.INVALID_ARGS,
        "bash: argument 'command' is 70024 characters long; the limit is 65536",
    )
    assert not (ws / "made.txt").exists()


def test_credentials_live_for_one_call_only(session: Session) -> None:
    # given one call that received the credential
    program = "import os; print(os.environ.get('API_TOKEN', 'absent'))"
    first = run(session, "code", code=program)
    # when the next call runs without credentials
    second = execute_tool(session, "code", {"code": program}, network_enabled=False)
    # then the variable is gone, and it was never written into the workspace
    assert (first.output, second.output) == ("<credential:API_TOKEN>\n", "absent\n")
    scan = (
        "import os\n"
        "hits = [os.path.join(d, f) for d, _, fs in os.walk('/workspace') for f in fs\n"
        f"        if {SECRET.encode()!r} in open(os.path.join(d, f), 'rb').read()]\n"
        "print(hits)\n"
    )
    assert execute_tool(session, "code", {"code": scan}, network_enabled=False).output == "[]\n"


def test_a_heredoc_feeds_text_without_running_anything(session: Session) -> None:
    result = run(session, "bash", command="cat <<EOF | wc -l\nhello $HOME\nsecond line\nEOF\n")
    assert (result.ok, result.output) == (True, "2\n")


NO_BWRAP_SCRIPT = """
import json, sys
from pathlib import Path
from sandbox.backends import get_backend
from sandbox.types import ExecRequest, SandboxError, SessionSpec
try:
    session = get_backend("bwrap").open(SessionSpec(workspace=Path(sys.argv[1])))
    session.exec(ExecRequest(argv=["sh", "-c", "echo ran > /workspace/ran.txt"]))
    print(json.dumps({"opened": True}))
except SandboxError as exc:
    print(json.dumps({"opened": False, "error": str(exc)}))
"""


def test_without_bubblewrap_nothing_runs_and_nothing_falls_back(ws: Path) -> None:
    # given a worker whose view of the filesystem has no executable bwrap (a private mount
    # namespace with /dev/null bound over it)
    repo = Path(__file__).resolve().parents[2]
    script = (
        "mount --bind /dev/null /usr/bin/bwrap && exec "
        + shlex.quote(sys.executable)
        + " -c "
        + shlex.quote(NO_BWRAP_SCRIPT)
        + " "
        + shlex.quote(str(ws))
    )
    # when it asks for a bwrap session and tries to run a command in it
    worker = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # then opening failed with a SandboxError saying why, and the command ran nowhere
    assert worker.returncode == 0, worker.stderr
    assert json.loads(worker.stdout) == {
        "opened": False,
        "error": "bubblewrap (bwrap) is not installed; install the 'bubblewrap' package "
        "(bin/setup-host does) — commands are never run unsandboxed",
    }
    assert not (ws / "ran.txt").exists()
