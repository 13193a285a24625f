"""Spare sandboxes (sandbox/pool.py) on both isolating backends: what a spare holds before a run
adopts it, what the run finds after, refilling, closing, and an owner killed with a full pool."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.backends import get_backend
from sandbox.pool import SessionPool, sweep_slots
from sandbox.reaper import bwrap_sandboxes
from sandbox.types import ConnectionReport, ExecRequest, Limits, NetworkPolicy, SessionSpec
from tests.fixtures.upstream import Upstream
from tests.sandbox.conftest import py

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

FETCH = """
import urllib.error, urllib.request
for host in ("allowed.test", "api.allowed.test"):
    try:
        with urllib.request.urlopen(f"http://{host}/hello", timeout=10) as response:
            print(host, response.status)
    except urllib.error.HTTPError as exc:
        print(host, exc.code)
"""


def _backend(name: str, upstream: Upstream | None = None) -> Any:
    resolver = upstream.resolver() if upstream is not None else None
    if name == "bwrap":
        from sandbox.backends.bwrap import BwrapBackend

        return BwrapBackend(egress_resolver=resolver)
    from sandbox.backends.docker import DockerBackend

    return DockerBackend(egress_resolver=resolver)


@pytest.fixture
def pools() -> Iterator[list[SessionPool]]:
    made: list[SessionPool] = []
    yield made
    for pool in made:
        pool.close()


def _run_dir(root: Path, name: str, files: dict[str, str]) -> Path:
    workspace = root / name
    workspace.mkdir()
    for path, text in files.items():
        (workspace / path).write_text(text)
    return workspace


def _ls(session: Any) -> list[str]:
    result = session.exec(ExecRequest(argv=["/bin/ls", "-A", "/workspace"]))
    assert result.exit_code == 0, result.stderr
    return result.stdout.decode().split()


def test_a_spare_holds_nothing_of_any_run(backend_name: str, tmp_path: Path, pools: list) -> None:
    # given a full pool of one
    pool = SessionPool(_backend(backend_name), size=1, slot_root=tmp_path / ".pool").start()
    pools.append(pool)
    assert pool.wait_full(60)
    (spare,) = pool.spares()
    # then the spare is named for the pool, has no egress proxy and an empty slot directory
    assert spare.id.startswith("pool-")
    assert spare._proxy is None
    (slot,) = list((tmp_path / ".pool").iterdir())
    assert list(slot.iterdir()) == []
    if backend_name == "bwrap":
        assert spare.lease is not None  # its uid is leased already
        assert list((spare.runtime_dir / "net").iterdir()) == []
    else:
        assert spare.runtime_dir is not None and list(spare.runtime_dir.iterdir()) == []


def test_run_b_adopts_a_spare_with_its_own_files_and_allowlist_only(
    backend_name: str, tmp_path: Path, upstream: Upstream, pools: list
) -> None:
    pool = SessionPool(
        _backend(backend_name, upstream), size=1, slot_root=tmp_path / ".pool"
    ).start()
    pools.append(pool)
    reports_a: list[ConnectionReport] = []
    reports_b: list[ConnectionReport] = []
    # given run A, allowed allowed.test only, adopting a spare and writing a file
    assert pool.wait_full(60)
    workspace_a = _run_dir(tmp_path, "run-a", {"secret-a.txt": "A's"})
    spec_a = SessionSpec(
        workspace=workspace_a,
        network=NetworkPolicy(allowed_domains=("allowed.test",)),
        session_id="run-a",
        on_connection=reports_a.append,
    )
    session_a = pool.take(spec_a)
    assert session_a is not None
    try:
        assert session_a.id == "run-a"
        assert _ls(session_a) == ["secret-a.txt"]
        made = py(session_a, "open('/workspace/made-by-a', 'w').write('x')")
        assert made.exit_code == 0, made.stderr
        # the file the sandbox wrote is in the run's workspace on the host
        assert (workspace_a / "made-by-a").read_text() == "x"
        assert py(session_a, FETCH).stdout == b"allowed.test 200\napi.allowed.test 403\n"

        # when the pool has refilled and run B, allowed api.allowed.test only, adopts a spare
        assert pool.wait_full(60)
        workspace_b = _run_dir(tmp_path, "run-b", {"b.txt": "B's"})
        spec_b = SessionSpec(
            workspace=workspace_b,
            network=NetworkPolicy(allowed_domains=("api.allowed.test",)),
            session_id="run-b",
            on_connection=reports_b.append,
        )
        session_b = pool.take(spec_b)
        assert session_b is not None and session_b is not session_a
        try:
            # then B sees its own files and none of A's (through the file tools, then a
            # command), and its allowlist is B's exactly
            from sandbox.tools.executors import execute_tool

            read_b = execute_tool(session_b, "read", {"path": "b.txt"}, network_enabled=True)
            assert read_b.ok and "B's" in read_b.output, read_b
            read_a = execute_tool(session_b, "read", {"path": "secret-a.txt"}, network_enabled=True)
            assert not read_a.ok and read_a.error_code == "not_found", read_a
            assert _ls(session_b) == ["b.txt"]
            assert py(session_b, FETCH).stdout == b"allowed.test 403\napi.allowed.test 200\n"
            assert [(r.session_id, r.host, r.verdict) for r in reports_b] == [
                ("run-b", "allowed.test", "denied"),
                ("run-b", "api.allowed.test", "allowed"),
            ]
            assert [(r.session_id, r.host, r.verdict) for r in reports_a] == [
                ("run-a", "allowed.test", "allowed"),
                ("run-a", "api.allowed.test", "denied"),
            ]
            assert sorted(p.name for p in workspace_b.iterdir()) == ["b.txt"]
        finally:
            session_b.close()
    finally:
        session_a.close()


def test_a_run_without_domains_gets_no_proxy_and_no_bridge(
    backend_name: str, tmp_path: Path, pools: list
) -> None:
    pool = SessionPool(_backend(backend_name), size=1, slot_root=tmp_path / ".pool").start()
    pools.append(pool)
    assert pool.wait_full(60)
    workspace = _run_dir(tmp_path, "run-c", {})
    session = pool.take(SessionSpec(workspace=workspace, session_id="run-c"))
    assert session is not None
    try:
        probe = py(
            session,
            """
            import os, socket
            print(sorted(k for k in os.environ if 'proxy' in k.lower()))
            try:
                socket.create_connection(("127.0.0.1", 3128), timeout=2)
                print("bridge")
            except OSError:
                print("no bridge")
            """,
        )
        assert probe.stdout == b"[]\nno bridge\n", probe.stderr
        assert session._proxy is None
    finally:
        session.close()


def test_a_spec_the_spares_cannot_serve_is_refused_and_the_spare_kept(
    tmp_path: Path, pools: list
) -> None:
    pool = SessionPool(_backend("bwrap"), size=1, slot_root=tmp_path / ".pool").start()
    pools.append(pool)
    assert pool.wait_full(60)
    workspace = _run_dir(tmp_path, "run-d", {})
    mounted = SessionSpec(workspace=workspace, readonly_mounts=((REPO / "sandbox", "/opt/x"),))
    other_limits = SessionSpec(workspace=workspace, limits=Limits(memory_bytes=256 << 20))
    idle_only = SessionSpec(workspace=workspace, limits=Limits(idle_timeout_s=5))
    assert pool.take(mounted) is None
    assert pool.take(other_limits) is None
    assert len(pool) == 1
    assert pool.fits(idle_only)


def test_the_pool_refills_and_closing_it_leaves_nothing(backend_name: str, tmp_path: Path) -> None:
    slot_root = tmp_path / ".pool"
    pool = SessionPool(_backend(backend_name), size=2, slot_root=slot_root).start()
    try:
        assert pool.wait_full(90)
        workspace = _run_dir(tmp_path, "run-e", {"f": "1"})
        adopted = pool.take(SessionSpec(workspace=workspace, session_id="run-e"))
        assert adopted is not None
        # when one spare is taken, the pool starts another in the background
        assert len(pool) == 1
        assert pool.wait_full(90)
        spares = pool.spares()
        assert len(spares) == 2 and adopted not in spares
    finally:
        pool.close()
    # then closing the pool closed every spare and removed their slots, and the run's session
    # (no longer the pool's) still works
    assert all(spare.closed for spare in spares)
    assert list(slot_root.iterdir()) == []
    assert _ls(adopted) == ["f"]
    if backend_name == "bwrap":
        from sandbox.backends.bwrap_uids import _processes_of_uid

        assert all(_processes_of_uid(spare.lease.uid) == [] for spare in spares)
        assert all(not spare.runtime_dir.exists() for spare in spares)
        assert not any(spare.id in bwrap_sandboxes() for spare in spares)
    else:
        import docker

        ids = {c.id for c in docker.from_env().containers.list(all=True)}
        assert not any(spare.container_id in ids for spare in spares)
    adopted.close()


OWNER = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from sandbox.backends import get_backend
from sandbox.pool import SessionPool
pool = SessionPool(get_backend(sys.argv[2]), size=2, slot_root=Path(sys.argv[3])).start()
assert pool.wait_full(90)
facts = []
for spare in pool.spares():
    if sys.argv[2] == "bwrap":
        facts.append({"id": spare.id, "uid": spare.lease.uid, "pid": spare.pid,
                      "runtime_dir": str(spare.runtime_dir)})
    else:
        facts.append({"id": spare.id, "container": spare.container_id})
print(json.dumps(facts), flush=True)
time.sleep(600)
"""


def _wait(predicate: Any, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return bool(predicate())


def test_an_owner_killed_with_a_full_pool_leaves_nothing_after_the_next_start(
    backend_name: str, tmp_path: Path
) -> None:
    slot_root = tmp_path / ".pool"
    # given a process holding a full pool of two
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(REPO), backend_name, str(slot_root)],
        stdout=subprocess.PIPE,
        env={**os.environ},
    )
    try:
        assert owner.stdout is not None
        facts = json.loads(owner.stdout.readline())
        assert len(facts) == 2 and len(list(slot_root.iterdir())) == 2
    finally:
        # when it is SIGKILLed
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    # then its sandboxes die with it, and the next start's sweeps remove what is left
    if backend_name == "bwrap":
        from sandbox.backends.bwrap import BwrapBackend
        from sandbox.backends.bwrap_uids import _processes_of_uid

        assert _wait(lambda: not any(os.path.exists(f"/proc/{f['pid']}") for f in facts))
        BwrapBackend()  # a backend sweeps the runtime dirs of dead owners when it is created
        assert all(not Path(f["runtime_dir"]).exists() for f in facts)
        assert all(_processes_of_uid(f["uid"]) == [] for f in facts)
        assert not any(f["id"] in bwrap_sandboxes() for f in facts)
    else:
        import docker

        from sandbox.backends.docker_orphans import sweep_orphans

        sweep_orphans()
        ids = {c.id for c in docker.from_env().containers.list(all=True)}
        assert not any(f["container"] in ids for f in facts)
    # the slots are named for their owner, now dead: the pool's sweep removes both
    assert len(sweep_slots(slot_root)) == 2
    assert list(slot_root.iterdir()) == []


def test_sweep_slots_keeps_a_live_owners_slots(tmp_path: Path, pools: list) -> None:
    pool = SessionPool(get_backend("bwrap"), size=1, slot_root=tmp_path / ".pool").start()
    pools.append(pool)
    assert pool.wait_full(60)
    dead = tmp_path / ".pool" / "999999999.1.abc"
    dead.mkdir()
    assert sweep_slots(tmp_path / ".pool") == [dead]
    assert len(list((tmp_path / ".pool").iterdir())) == 1


def test_a_configuration_the_supervisor_refuses_fails_the_first_call(
    backend_name: str, tmp_path: Path, pools: list
) -> None:
    from sandbox.types import SandboxError

    pool = SessionPool(_backend(backend_name), size=1, slot_root=tmp_path / ".pool").start()
    pools.append(pool)
    assert pool.wait_full(60)
    workspace = _run_dir(tmp_path, "run-f", {})
    # given a run whose environment the supervisor refuses (a NUL byte in a value)
    session = pool.take(
        SessionSpec(workspace=workspace, session_id="run-f", environment={"BAD": "a\0b"})
    )
    assert session is not None
    # then its first call fails as a sandbox error naming the refusal, and the session is closed
    with pytest.raises(SandboxError, match="invalid variable name or a NUL byte"):
        session.exec(ExecRequest(argv=["/usr/bin/true"]))
    assert session.closed


def test_a_spare_stopped_from_outside_is_never_adopted(
    backend_name: str, tmp_path: Path, pools: list
) -> None:
    pool = SessionPool(_backend(backend_name), size=1, slot_root=tmp_path / ".pool").start()
    pools.append(pool)
    assert pool.wait_full(60)
    (spare,) = pool.spares()
    # given a spare killed (bwrap) or removed (docker) from outside while it waits
    if backend_name == "bwrap":
        os.kill(spare.pid, signal.SIGKILL)
        assert _wait(lambda: not spare.alive(), 10)
    else:
        import docker

        docker.from_env().containers.get(spare.container_id).remove(force=True)
        assert _wait(lambda: not spare.alive(), 10)
    # when a run asks for one, the dead spare is discarded, the run opens its own session
    workspace = _run_dir(tmp_path, "run-g", {"g": "1"})
    assert pool.take(SessionSpec(workspace=workspace, session_id="run-g")) is None
    assert spare.closed and sorted(p.name for p in workspace.iterdir()) == ["g"]
    # and the pool starts a live one in its place
    assert pool.wait_full(60) and pool.spares()[0].alive()
