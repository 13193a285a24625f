"""The docker backend against the real engine and the locally built image.

Escape attempts shared with bwrap live in test_containment.py; these tests cover what is specific
to containers: the engine-side hardening, the hardening as seen from inside, the egress bridge,
the orphan sweep and the clear failures when the engine or the image is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from docker.errors import NotFound

from sandbox.backends import get_backend
from sandbox.backends.docker import (
    LABEL_OWNER_PID,
    LABEL_RUNTIME_DIR,
    LABEL_SESSION,
    SANDBOX_UID,
    DockerBackend,
    DockerSession,
    sweep_orphans,
)
from sandbox.types import (
    ConnectionReport,
    ExecRequest,
    ExecResult,
    Limits,
    NetworkPolicy,
    SandboxError,
    SessionSpec,
)
from tests.fixtures.upstream import HELLO_BODY, Upstream

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def engine() -> Iterator[docker.DockerClient]:
    client = docker.from_env()
    yield client
    client.close()


@pytest.fixture(scope="module")
def backend(engine: docker.DockerClient) -> DockerBackend:
    return DockerBackend(client=engine)


@pytest.fixture
def session(backend: DockerBackend, tmp_path: Path) -> Iterator[DockerSession]:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    opened = backend.open(SessionSpec(workspace=workspace, limits=Limits(tmp_bytes=8 << 20)))
    yield opened
    opened.close()


def containers_owned_by_this_process(engine: docker.DockerClient) -> set[str]:
    """Ids of the sandbox containers whose owner label is this test process (other test
    processes may create containers of their own meanwhile)."""
    owned = engine.containers.list(
        all=True, sparse=True, filters={"label": f"{LABEL_OWNER_PID}={os.getpid()}"}
    )
    return {c.id for c in owned}


def run(
    session: DockerSession, script: str, *, timeout_s: float = 20, **kwargs: object
) -> ExecResult:
    return session.exec(ExecRequest(argv=["sh", "-c", script], timeout_s=timeout_s, **kwargs))  # type: ignore[arg-type]


def py_json(session: DockerSession, code: str) -> object:
    result = session.exec(ExecRequest(argv=["python3", "-c", textwrap.dedent(code)], timeout_s=20))
    assert result.exit_code == 0, result.stderr.decode(errors="replace")
    return json.loads(result.stdout)


def test_session_opens_runs_and_close_removes_the_container(
    backend: DockerBackend, engine: docker.DockerClient, tmp_path: Path
) -> None:
    # given a session on a workspace holding a file
    (tmp_path / "notes.txt").write_text("from the host\n")
    opened = backend.open(SessionSpec(workspace=tmp_path, session_id="dockertest-open"))
    container_id = opened.container_id
    # when it reads that file, reads stdin and writes a new file
    result = run(opened, "cat notes.txt; cat; echo made > made.txt", stdin=b"from stdin\n")
    # then the call saw both, and the new file is on the host, owned by the sandbox uid
    assert (result.exit_code, result.stdout, result.stderr) == (
        0,
        b"from the host\nfrom stdin\n",
        b"",
    )
    assert (tmp_path / "made.txt").read_text() == "made\n"
    assert (tmp_path / "made.txt").stat().st_uid == SANDBOX_UID
    assert engine.containers.get(container_id).labels[LABEL_SESSION] == "dockertest-open"
    # when the session is closed (twice: close is idempotent)
    opened.close()
    opened.close()
    # then the container is gone and further calls fail as a sandbox error
    assert opened.closed is True
    with pytest.raises(NotFound):
        engine.containers.get(container_id)
    with pytest.raises(SandboxError, match="closed"):
        run(opened, "true")


def test_engine_side_hardening(session: DockerSession, engine: docker.DockerClient) -> None:
    # when the engine describes the session's container
    attrs = engine.containers.get(session.container_id).attrs
    host = attrs["HostConfig"]
    # then it is locked down as the backend promises, and no socket of the engine is mounted
    assert attrs["Config"]["User"] == f"{SANDBOX_UID}:{SANDBOX_UID}"
    assert host["CapDrop"] == ["ALL"]
    assert host["CapAdd"] is None
    assert host["Privileged"] is False
    assert host["SecurityOpt"] == ["no-new-privileges:true"]
    assert host["ReadonlyRootfs"] is True
    assert host["NetworkMode"] == "none"
    assert host["PidsLimit"] == Limits().max_processes + 2
    assert (host["Memory"], host["MemorySwap"]) == (Limits().memory_bytes, Limits().memory_bytes)
    assert host["NanoCpus"] == 1_000_000_000
    assert {u["Name"]: u["Hard"] for u in host["Ulimits"]} == {
        "nofile": Limits().open_files,
        "fsize": Limits().file_size_bytes,
        "core": 0,
        "nproc": 1 << 16,
    }
    mounts = {m["Destination"]: (m["Source"], m["RW"]) for m in attrs["Mounts"]}
    assert set(mounts) == {"/workspace", "/opt/motor-cortex"}
    assert mounts["/opt/motor-cortex"] == (str(REPO / "sandbox" / "inside"), False)
    assert mounts["/workspace"][1] is True
    assert not any("docker" in source for source, _ in mounts.values())


def test_hardening_seen_from_inside(session: DockerSession) -> None:
    # when a command inspects its own situation
    facts = py_json(
        session,
        """
        import errno, json, os, stat
        status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\\t" in line)
        def write_error(path):
            try:
                open(path, "w").close()
                return "written"
            except OSError as exc:
                return errno.errorcode[exc.errno]
        sockets = []
        for root, dirs, files in os.walk("/"):
            if root in ("/proc", "/sys"):
                dirs[:] = []
                continue
            for name in files + dirs:
                try:
                    if stat.S_ISSOCK(os.lstat(os.path.join(root, name)).st_mode):
                        sockets.append(os.path.join(root, name))
                except OSError:
                    pass
        print(json.dumps({
            "uid": os.getuid(), "gid": os.getgid(),
            "cap_eff": status["CapEff"].strip(), "cap_bnd": status["CapBnd"].strip(),
            "no_new_privs": status["NoNewPrivs"].strip(), "seccomp": status["Seccomp"].strip(),
            "root_write": write_error("/usr/bin/planted"),
            "etc_write": write_error("/etc/passwd"),
            "interfaces": sorted(os.listdir("/sys/class/net")),
            "sockets": sockets,
            "docker_sock": os.path.exists("/var/run/docker.sock") or os.path.exists("/run/docker.sock"),
            "hostname": open("/etc/hostname").read().strip(),
            "memory_limit": int(open("/sys/fs/cgroup/memory/memory.limit_in_bytes").read()),
            "pids_max": open("/sys/fs/cgroup/pids/pids.max").read().strip(),
        }))
        """,
    )
    # then it is an unprivileged, capability-less, filtered process on a read-only root
    assert facts == {
        "uid": SANDBOX_UID,
        "gid": SANDBOX_UID,
        "cap_eff": "0000000000000000",
        "cap_bnd": "0000000000000000",
        "no_new_privs": "1",
        "seccomp": "2",
        "root_write": "EROFS",
        "etc_write": "EROFS",
        "interfaces": ["lo"],
        "sockets": [],
        "docker_sock": False,
        "hostname": "sandbox",
        "memory_limit": Limits().memory_bytes,
        "pids_max": str(Limits().max_processes + 2),
    }


def test_pid1_is_unreadable_and_holds_no_worker_environment(
    session: DockerSession, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, backend: DockerBackend
) -> None:
    # given a secret in the worker's environment when a session is opened
    monkeypatch.setenv("MOTOR_DOCKER_CANARY", "canary-7f3e")
    workspace = tmp_path / "canary-ws"
    workspace.mkdir()
    environment = {"GREETING": "hi", "HTTPS_PROXY": "http://elsewhere:1", "NO_PROXY": "*"}
    with backend.open(SessionSpec(workspace=workspace, environment=environment)) as opened:
        # when a command looks at PID 1 and its own environment
        facts = py_json(
            opened,
            """
            import json, os
            try:
                open("/proc/1/environ", "rb").read()
                pid1 = "readable"
            except PermissionError:
                pid1 = "PermissionError"
            print(json.dumps({"pid1": pid1, "env": dict(os.environ)}))
            """,
        )
    # then PID 1 is unreadable, and the command's environment is exactly what the spec gave
    assert facts["pid1"] == "PermissionError"  # type: ignore[index]
    env = facts["env"]  # type: ignore[index]
    assert env["GREETING"] == "hi"
    assert "MOTOR_DOCKER_CANARY" not in env
    assert "HTTPS_PROXY" not in env  # proxy variables belong to the backend alone
    assert "NO_PROXY" not in env
    assert "canary-7f3e" not in json.dumps(env)


def test_readonly_mount_and_per_call_environment(backend: DockerBackend, tmp_path: Path) -> None:
    # given a read-only extra mount
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "data.txt").write_text("reference\n")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    spec = SessionSpec(workspace=workspace, readonly_mounts=[(shared, "/opt/shared")])
    with backend.open(spec) as opened:
        # when a call reads it, tries to write it and reads a per-call variable
        result = run(
            opened,
            'cat /opt/shared/data.txt; echo "$TOKEN"; echo x > /opt/shared/new 2>/dev/null || echo refused',
            env={"TOKEN": "per-call"},
        )
        later = run(opened, 'echo "token=${TOKEN:-unset}"')
    # then the mount is readable but not writable, and the variable lived for one call only
    assert result.stdout == b"reference\nper-call\nrefused\n"
    assert later.stdout == b"token=unset\n"
    assert sorted(p.name for p in shared.iterdir()) == ["data.txt"]


def test_tmp_is_capped_and_noexec(session: DockerSession) -> None:
    # when a call fills /tmp past its 8 MiB cap and tries to run a program from it
    result = run(
        session,
        "head -c 16777216 /dev/zero > /tmp/fill; echo fill=$?; wc -c < /tmp/fill; "
        "rm /tmp/fill; cp /bin/true /tmp/t && /tmp/t; echo exec=$?",
    )
    # then the write stopped at the cap and the copied binary did not run
    lines = result.stdout.decode().split()
    assert lines[0] == "fill=1"
    assert int(lines[1]) <= 8 << 20
    assert lines[2] == "exec=126"


def test_timeout_kills_the_tree_and_the_session_keeps_working(session: DockerSession) -> None:
    # when a call starts detached children and then hangs
    result = run(session, "setsid sleep 300 & (sleep 301 &) ; sleep 302", timeout_s=1)
    after = py_json(
        session,
        """
        import json, os
        print(json.dumps(sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid())))
        """,
    )
    # then it timed out, every process it started is gone, and the next call runs normally
    assert (result.timed_out, result.exit_code, result.signal) == (True, None, 9)
    # left besides the looking process: PID 1 and the supervisor, nothing the call started
    assert len(after) == 2  # type: ignore[arg-type]
    assert after[0] == 1  # type: ignore[index]


def test_network_session_reaches_allowed_host_only_through_the_bridge(
    engine: docker.DockerClient, upstream: Upstream, tmp_path: Path
) -> None:
    # given a backend whose proxy resolves the test names to the local upstream, and a session
    # allowed to reach api.allowed.test
    reports: list[ConnectionReport] = []
    backend = DockerBackend(client=engine, egress_resolver=upstream.resolver(), sweep=False)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    spec = SessionSpec(
        workspace=workspace,
        network=NetworkPolicy(allowed_domains=("api.allowed.test",)),
        readonly_mounts=[(upstream.ca_path, "/etc/motor-test-ca.pem")],
        on_connection=reports.append,
    )
    opened = backend.open(spec)
    runtime_dir = Path(engine.containers.get(opened.container_id).labels[LABEL_RUNTIME_DIR])
    try:
        # when the sandbox fetches the allowed host, a forbidden one, and the upstream directly
        allowed = run(
            opened, "curl -sS --cacert /etc/motor-test-ca.pem https://api.allowed.test/hello"
        )
        denied = run(opened, "curl -sS -o /dev/null -w '%{http_code}' https://evil.test/; echo")
        direct = run(
            opened,
            f"curl -sS --noproxy '*' -m 3 https://{upstream.ip}/hello; echo rc=$?",
        )
        listing = run(opened, "ls -l /run/motor-cortex")
        proxy_env = run(opened, "env | grep -i _proxy= | sort")
    finally:
        opened.close()
    # then only the allowed request went out, every attempt is reported, and the only socket the
    # sandbox sees is its own egress socket
    assert (allowed.exit_code, allowed.stdout) == (0, HELLO_BODY)
    assert b"403" in denied.stdout + denied.stderr
    assert direct.stdout.endswith(b"rc=7\n")
    # (and nothing else: the bridge's start-up makes no connection of its own)
    assert [(r.host, r.verdict) for r in reports] == [
        ("api.allowed.test", "allowed"),
        ("evil.test", "denied"),
    ]
    assert reports[0].resolved_ip == upstream.ip
    assert listing.stdout.decode().split()[-1] == "egress.sock"
    assert proxy_env.stdout.decode().splitlines() == sorted(
        f"{name}=http://127.0.0.1:3128"
        for name in (
            "ALL_PROXY",
            "HTTPS_PROXY",
            "HTTP_PROXY",
            "all_proxy",
            "https_proxy",
            "http_proxy",
        )
    )
    # and closing removed the runtime dir with its socket
    assert not runtime_dir.exists()


_ORPHAN_SCRIPT = """
import os, signal, sys, pathlib
from sandbox.backends.docker import DockerBackend
from sandbox.types import NetworkPolicy, SessionSpec
backend = DockerBackend(sweep=False)
session = backend.open(SessionSpec(
    workspace=pathlib.Path(sys.argv[1]), session_id=sys.argv[2],
    network=NetworkPolicy(allowed_domains=("example.com",)),
))
print(session.container_id, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


# Outside the parallel pass: any other test process that starts a docker backend sweeps dead
# owners' containers too, and could remove this test's orphan before its own sweep looks.
@pytest.mark.one_process
def test_sweep_removes_containers_of_dead_owners_only(
    engine: docker.DockerClient, backend: DockerBackend, session: DockerSession, tmp_path: Path
) -> None:
    # given a container whose owner process was killed without closing it
    workspace = tmp_path / "orphan-ws"
    workspace.mkdir()
    child = subprocess.run(
        [sys.executable, "-c", _ORPHAN_SCRIPT, str(workspace), "dockertest-orphan"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
    )
    assert child.returncode == -9, child.stderr
    orphan_id = child.stdout.strip()
    orphan = engine.containers.get(orphan_id)
    runtime_dir = Path(orphan.labels[LABEL_RUNTIME_DIR])
    assert runtime_dir.is_dir()
    assert orphan.labels[LABEL_OWNER_PID] != str(os.getpid())
    # (with its owner gone the engine closed the supervisor's stdin, so the container stopped)
    deadline = time.monotonic() + 15
    while orphan.status != "exited" and time.monotonic() < deadline:
        time.sleep(0.1)
        orphan.reload()
    assert orphan.status == "exited"
    # when the sweep runs
    removed = sweep_orphans(engine)
    # then the orphan and its runtime dir are gone, and this process's own session is untouched
    assert removed == ["dockertest-orphan"]
    with pytest.raises(NotFound):
        engine.containers.get(orphan_id)
    assert not runtime_dir.exists()
    assert engine.containers.get(session.container_id).status == "running"
    assert run(session, "echo alive").stdout == b"alive\n"


def test_missing_image_is_a_sandbox_error_and_starts_nothing(
    engine: docker.DockerClient,
) -> None:
    # given the sandbox containers this process owns now (other test processes may create
    # their own meanwhile; only ours can come from this call)
    before = containers_owned_by_this_process(engine)
    # when a backend is asked for an image that was never built
    with pytest.raises(SandboxError, match=r"motor-cortex-sandbox:never-built.*build\.sh"):
        DockerBackend(image="motor-cortex-sandbox:never-built", client=engine)
    # then no container was created
    assert containers_owned_by_this_process(engine) == before


def test_unreachable_engine_is_a_sandbox_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given an environment pointing at a socket where no engine listens
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    # when the backend is created, then it refuses with a clear message (never a fallback)
    with pytest.raises(SandboxError, match="no Docker engine answers"):
        DockerBackend()


def test_missing_workspace_is_a_sandbox_error(
    backend: DockerBackend, engine: docker.DockerClient, tmp_path: Path
) -> None:
    before = containers_owned_by_this_process(engine)
    # when a session is opened on a workspace that does not exist
    with pytest.raises(SandboxError, match="is not an existing directory"):
        backend.open(SessionSpec(workspace=tmp_path / "absent"))
    # then nothing was started and nothing was created on the host
    assert containers_owned_by_this_process(engine) == before
    assert not (tmp_path / "absent").exists()


def test_unsafe_session_id_is_refused_before_anything_starts(
    backend: DockerBackend, engine: docker.DockerClient, tmp_path: Path
) -> None:
    before = containers_owned_by_this_process(engine)
    # when a session id that would escape a directory name is given
    with pytest.raises(ValueError, match="session_id '../x' must be"):
        backend.open(SessionSpec(workspace=tmp_path, session_id="../x"))
    # then no container was created
    assert containers_owned_by_this_process(engine) == before


def test_get_backend_reuses_one_docker_backend_and_its_sessions_still_work(
    tmp_path: Path,
) -> None:
    # given the docker backend obtained by name twice
    first = get_backend("docker")
    second = get_backend("docker")
    # when a session is opened on each
    assert second is first
    opened = [second.open(SessionSpec(workspace=tmp_path)) for _ in range(2)]
    try:
        results = [s.exec(ExecRequest(argv=["echo", "ok"])) for s in opened]
    finally:
        for s in opened:
            s.close()
    # then both ran in their own container
    assert [(r.exit_code, r.stdout) for r in results] == [(0, b"ok\n"), (0, b"ok\n")]
    assert len({s.container_id for s in opened if isinstance(s, DockerSession)}) == 2
