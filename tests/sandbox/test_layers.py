"""Dependency layers built in a real sandbox from a real package index (pypiserver) and a real
npm registry (Verdaccio), then mounted read-only into another session whose python3 imports
and whose node requires from them."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.layers import (
    LAYER_MOUNT,
    InstallOutcome,
    Package,
    PackageIndex,
    index_domains,
    install_commands,
    layer_build,
    layer_environment,
    no_node_message,
)
from sandbox.reaper import bwrap_sandboxes
from sandbox.session import SessionRegistry, open_session
from sandbox.tools import execute_tool
from sandbox.types import ExecRequest, Session, SessionSpec
from tests.fixtures.npm_index import NpmIndex
from tests.fixtures.package_index import PackageIndex as Index
from tests.fixtures.upstream import STALLED_PORT, Answer, Upstream

pytestmark = pytest.mark.slow


@pytest.fixture
def index(package_index: Index, monkeypatch: pytest.MonkeyPatch) -> PackageIndex:
    monkeypatch.setenv("MOTOR_SANDBOX_EGRESS_HOSTS", package_index.egress_hosts)
    return PackageIndex(pip_index_url=package_index.url, pip_download_hosts=())


def test_the_install_may_reach_the_configured_index_only(index: PackageIndex) -> None:
    packages = [Package("pip", "mcdemo", "1.0.0"), Package("npm", "left-pad", "1.3.0")]
    assert index_domains(packages, index) == ("pypi.layers.test:8090", "registry.npmjs.org")
    assert index_domains(packages[:1], PackageIndex()) == ("pypi.org", "files.pythonhosted.org")
    pip, npm = install_commands(packages, index)
    assert pip[:3] == ["python3", "-m", "pip"] and pip[-1] == "mcdemo==1.0.0"
    assert pip[pip.index("--target") + 1] == "/workspace/python"
    # plain http: pip is told to trust the operator's index, by host:port
    assert pip[pip.index("--trusted-host") + 1] == "pypi.layers.test:8090"
    assert (
        npm[:2] == ["npm", "install"] and "--ignore-scripts" in npm and npm[-1] == "left-pad@1.3.0"
    )


def test_a_layer_installed_in_a_sandbox_is_imported_by_another_session(
    index: PackageIndex, tmp_path: Path
) -> None:
    # given a layer built from the local index
    layer = tmp_path / "layer"
    layer.mkdir()
    outcome = layer_build(
        packages=[Package("pip", "mcdemo", "1.0.0")], index=index, target=layer, backend="bwrap"
    )
    assert outcome.ok, outcome.output
    assert (layer / "python" / "mcdemo.py").read_text() == "VALUE = 42\n"
    # the installers' scratch space is gone and nothing in the layer is writable
    assert not (layer / ".install-tmp").exists()
    assert all(not p.stat().st_mode & 0o222 for p in [layer, *layer.rglob("*")])
    # when a run's session mounts it read-only with the layer environment
    workspace = tmp_path / "ws"
    workspace.mkdir()
    spec = SessionSpec(
        workspace=workspace,
        readonly_mounts=((layer, LAYER_MOUNT),),
        environment=layer_environment(),
    )
    with open_session(spec, "bwrap", session_registry=SessionRegistry()) as session:
        # then python3 started by a command imports the package
        result = session.exec(
            ExecRequest(argv=["python3", "-c", "import mcdemo; print(mcdemo.VALUE)"])
        )
        assert (result.exit_code, result.stdout) == (0, b"42\n")
        # and so does the code tool
        code = execute_tool(
            session, "code", {"code": "import mcdemo\nprint(mcdemo.VALUE)"}, network_enabled=False
        )
        assert (code.ok, code.output.strip()) == (True, "42")
        # and the layer cannot be written from inside
        write = session.exec(
            ExecRequest(argv=["python3", "-c", f"open('{LAYER_MOUNT}/python/x.py', 'w')"])
        )
        assert write.exit_code == 1 and b"Read-only file system" in write.stderr


def test_a_package_the_index_does_not_hold_fails_with_the_installers_message(
    index: PackageIndex, tmp_path: Path
) -> None:
    layer = tmp_path / "layer"
    layer.mkdir()
    outcome = layer_build(
        packages=[Package("pip", "nosuchpackage", "1.0.0")],
        index=index,
        target=layer,
        backend="bwrap",
    )
    assert not outcome.ok
    assert "No matching distribution found for nosuchpackage==1.0.0" in outcome.output


@pytest.mark.docker
def test_a_layer_built_under_bwrap_is_imported_in_a_docker_session(
    index: PackageIndex, tmp_path: Path
) -> None:
    # given a layer built from the local index
    layer = tmp_path / "layer"
    layer.mkdir()
    outcome = layer_build(
        packages=[Package("pip", "mcdemo", "2.0.0")], index=index, target=layer, backend="bwrap"
    )
    assert outcome.ok, outcome.output
    # when a docker session mounts it read-only with the layer environment
    from sandbox.backends.docker import DockerBackend

    workspace = tmp_path / "ws"
    workspace.mkdir()
    spec = SessionSpec(
        workspace=workspace,
        readonly_mounts=((layer, LAYER_MOUNT),),
        environment=layer_environment(),
    )
    session = DockerBackend().open(spec)
    try:
        # then the code tool imports the package, and the layer cannot be written
        code = execute_tool(
            session, "code", {"code": "import mcdemo\nprint(mcdemo.VALUE)"}, network_enabled=False
        )
        assert (code.ok, code.output.strip()) == (True, "43")
        write = session.exec(
            ExecRequest(argv=["python3", "-c", f"open('{LAYER_MOUNT}/python/x.py', 'w')"])
        )
        assert write.exit_code == 1 and b"Read-only file system" in write.stderr
    finally:
        session.close()


@pytest.mark.docker
def test_a_layer_is_built_under_docker_too(index: PackageIndex, tmp_path: Path) -> None:
    # given an empty layer directory, when the docker backend installs a package from the index
    layer = tmp_path / "layer"
    layer.mkdir()
    outcome = layer_build(
        packages=[Package("pip", "mcdemo", "1.0.0")], index=index, target=layer, backend="docker"
    )
    # then pip inside the image installed it into the layer, read-only for everyone
    assert outcome.ok, outcome.output
    assert (layer / "python" / "mcdemo.py").read_text() == "VALUE = 42\n"
    assert not (layer / "python" / "mcdemo.py").stat().st_mode & 0o222


def test_the_install_sandbox_reaches_nothing_but_the_index(
    upstream: Upstream, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # given an index whose page for `lure` links its file on another host
    monkeypatch.setenv(
        "MOTOR_SANDBOX_EGRESS_HOSTS",
        f"index.layers.test={upstream.ip},api.allowed.test={upstream.ip}",
    )
    upstream.routes_clear()
    link = "http://api.allowed.test/files/lure-1.0.0-py3-none-any.whl"
    upstream.route(
        "index.layers.test",
        "/simple/lure/",
        Answer(
            body=f'<html><body><a href="{link}">lure-1.0.0-py3-none-any.whl</a></body></html>',
            headers={"Content-Type": "text/html"},
        ),
    )
    layer = tmp_path / "layer"
    layer.mkdir()
    # when it is installed from that index
    outcome = layer_build(
        packages=[Package("pip", "lure", "1.0.0")],
        index=PackageIndex(pip_index_url="http://index.layers.test/simple/", pip_download_hosts=()),
        target=layer,
        backend="bwrap",
    )
    # then the index was asked, the other host never was, and the install failed saying so
    assert not outcome.ok
    assert upstream.requests("index.layers.test") == ["GET /simple/lure/"]
    assert upstream.requests("api.allowed.test") == []
    assert "HTTP error 403 while getting " + link in outcome.output
    assert "api.allowed.test is not in this run's allowed domains" in outcome.output
    upstream.routes_clear()


def test_npm_installs_through_the_egress_proxy_and_a_missing_package_is_the_registrys_404(
    upstream: Upstream, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # given a registry (the test upstream) that holds no package at all
    monkeypatch.setenv("MOTOR_SANDBOX_EGRESS_HOSTS", f"registry.layers.test={upstream.ip}")
    upstream.routes_clear()
    layer = tmp_path / "layer"
    layer.mkdir()
    # when an npm package is installed from it (node starts inside the install sandbox)
    outcome = layer_build(
        packages=[Package("npm", "left-pad", "1.3.0")],
        index=PackageIndex(npm_registry_url="http://registry.layers.test/"),
        target=layer,
        backend="bwrap",
    )
    # then npm asked the registry through the proxy and failed with the registry's answer
    assert not outcome.ok
    assert upstream.requests("registry.layers.test") == ["GET /left-pad"]
    assert "npm error 404 Not Found - GET http://registry.layers.test/left-pad" in outcome.output


@pytest.fixture
def npm(npm_index: NpmIndex, monkeypatch: pytest.MonkeyPatch) -> PackageIndex:
    monkeypatch.setenv("MOTOR_SANDBOX_EGRESS_HOSTS", npm_index.egress_hosts)
    return PackageIndex(npm_registry_url=npm_index.url)


NODE_REQUIRE = ["node", "-e", "console.log(require('mcdemo-npm').value)"]


BACKENDS = ["bwrap", pytest.param("docker", marks=pytest.mark.docker)]


def _open(spec: SessionSpec, backend: str) -> Session:
    if backend == "docker":
        from sandbox.backends.docker import DockerBackend

        return DockerBackend().open(spec)
    return open_session(spec, backend, session_registry=SessionRegistry())


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_npm_package_from_a_real_registry_is_required_by_node_in_a_run_session(
    npm: PackageIndex, npm_index: NpmIndex, tmp_path: Path, backend: str
) -> None:
    # given a layer built by npm in the sandbox from the registry
    layer = tmp_path / "layer"
    layer.mkdir()
    documents = len(npm_index.requests_for("GET /mcdemo-npm',"))
    tarballs = len(npm_index.requests_for("GET /mcdemo-npm/-/mcdemo-npm-1.0.0.tgz'"))
    outcome = layer_build(
        packages=[Package("npm", "mcdemo-npm", "1.0.0")], index=npm, target=layer, backend=backend
    )
    assert outcome.ok, outcome.output
    installed = layer / "node" / "node_modules" / "mcdemo-npm"
    assert (installed / "index.js").read_text() == "module.exports = { value: 42 };\n"
    assert not (layer / ".install-tmp").exists()
    assert all(not p.stat().st_mode & 0o222 for p in [layer, *layer.rglob("*")])
    # the registry served the package's document and its tarball (through the egress proxy)
    assert len(npm_index.requests_for("GET /mcdemo-npm',")) == documents + 1
    assert len(npm_index.requests_for("GET /mcdemo-npm/-/mcdemo-npm-1.0.0.tgz'")) == tarballs + 1
    # when a session with a run's default limits mounts it
    workspace = tmp_path / "ws"
    workspace.mkdir()
    spec = SessionSpec(
        workspace=workspace,
        readonly_mounts=((layer, LAYER_MOUNT),),
        environment=layer_environment(),
    )
    session = _open(spec, backend)
    try:
        # then node starts under the run's memory limit and requires the package
        result = session.exec(ExecRequest(argv=NODE_REQUIRE))
        assert (result.exit_code, result.stdout, result.stderr) == (0, b"42\n", b"")
    finally:
        session.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_node_runs_under_a_runs_memory_limit_and_is_still_bounded_by_it(
    tmp_path: Path, backend: str
) -> None:
    # given a session with the run default limits (512 MiB of memory)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    session = _open(SessionSpec(workspace=workspace), backend)
    try:
        # then node (whose JIT reserves more address space than that) starts and runs
        started = session.exec(ExecRequest(argv=["node", "-e", "console.log(6 * 7)"]))
        assert (started.exit_code, started.stdout, started.stderr) == (0, b"42\n", b"")
        # and a node that writes without end is stopped, reported as out of memory: its own
        # RLIMIT_DATA refuses the allocation (on docker the container's memory cgroup, which
        # also counts the supervisor, may kill it first), and the session goes on
        bomb = session.exec(
            ExecRequest(
                argv=["node", "-e", "const a = []; for (;;) a.push(Buffer.alloc(32 << 20, 1));"],
                timeout_s=60,
            )
        )
        assert bomb.oom is True and bomb.timed_out is False
        if backend == "bwrap":
            assert bomb.exit_code == 1
            assert b"RangeError: Array buffer allocation failed" in bomb.stderr
        else:
            assert bomb.exit_code != 0
        # the limits a command starts with: writable memory at 512 MiB, address space 1 GiB
        # above it (soft limits, the ones in force)
        limits = session.exec(ExecRequest(argv=["cat", "/proc/self/limits"])).stdout.decode()
        rows = {line[:26].strip(): line[26:].split()[0] for line in limits.splitlines()[1:]}
        assert (rows["Max data size"], rows["Max address space"]) == (
            str(512 << 20),
            str(1536 << 20),
        )
    finally:
        session.close()


@pytest.fixture
def image_without_node(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A sandbox image like the real one but without node and npm (the docker backend's image
    for this test, through SANDBOX_DOCKER_IMAGE)."""
    import io

    import docker

    from sandbox.backends.docker import DEFAULT_IMAGE

    client = docker.from_env()
    tag = f"motor-cortex-no-node-test:{os.getpid()}"
    dockerfile = (
        f"FROM {os.environ.get('SANDBOX_DOCKER_IMAGE') or DEFAULT_IMAGE}\nUSER 0\n"
        "RUN rm -f /usr/bin/node /usr/bin/nodejs /usr/bin/npm /usr/bin/npx\n"
        "USER 10001:10001\n"
    )
    client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    monkeypatch.setenv("SANDBOX_DOCKER_IMAGE", tag)
    try:
        yield tag
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.images.remove(tag, force=True)


@pytest.mark.docker
def test_npm_dependencies_on_a_sandbox_without_node_are_refused_saying_so(
    npm: PackageIndex, npm_index: NpmIndex, tmp_path: Path, image_without_node: str
) -> None:
    # given a docker sandbox image that carries python3 and pip but no node or npm
    layer = tmp_path / "layer"
    layer.mkdir()
    asked = len(npm_index.requests_for("mcdemo-npm"))
    packages = [Package("pip", "mcdemo", "1.0.0"), Package("npm", "mcdemo-npm", "1.0.0")]
    # when a layer with an npm package is built there
    outcome = layer_build(packages=packages, index=npm, target=layer, backend="docker")
    # then the install fails at once with a message that says why, and nothing was fetched
    assert (outcome.ok, outcome.stopped, outcome.timed_out) == (False, False, False)
    assert outcome.output == no_node_message("docker", packages)
    assert outcome.output == (
        "npm dependencies (mcdemo-npm@1.0.0) cannot be installed: the docker sandbox has no "
        "node and npm (the sandbox image must include the nodejs and npm packages, "
        "sandbox/image/packages.txt)"
    )
    assert len(npm_index.requests_for("mcdemo-npm")) == asked


@pytest.mark.parametrize("backend", ["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def test_stopping_an_install_kills_it_promptly_and_leaves_no_process(
    upstream: Upstream, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, backend: str
) -> None:
    # given an install from an index whose connections hang (pip waits on it for minutes)
    monkeypatch.setenv("MOTOR_SANDBOX_EGRESS_HOSTS", f"pypi.layers.test={upstream.ip}")
    layer = tmp_path / "layer"
    layer.mkdir()
    stop = threading.Event()
    asked: list[float] = []

    def should_stop() -> bool:
        asked.append(time.monotonic())
        return stop.is_set()

    results: list[object] = []
    session_id = f"layer-stop-{backend}-{time.monotonic_ns()}"
    builder = threading.Thread(
        target=lambda: results.append(
            layer_build(
                packages=[Package("pip", "mcdemo", "1.0.0")],
                index=PackageIndex(
                    pip_index_url=f"http://pypi.layers.test:{STALLED_PORT}/simple/",
                    pip_download_hosts=(),
                ),
                target=layer,
                backend=backend,
                timeout_s=300,
                session_id=session_id,
                should_stop=should_stop,
            )
        )
    )
    builder.start()
    # when the caller says stop while pip is waiting on the index
    time.sleep(8)
    assert builder.is_alive() and results == []
    stop.set()
    stopped_at = time.monotonic()
    builder.join(timeout=30)
    # then the install ends within seconds, stopped (not failed, not timed out)
    assert not builder.is_alive()
    took = time.monotonic() - stopped_at
    assert took < 5, took
    (outcome,) = results
    assert isinstance(outcome, InstallOutcome)
    assert (outcome.ok, outcome.stopped, outcome.timed_out) == (False, True, False)
    assert outcome.output.endswith("the install was stopped")
    # the question was asked while the install ran, not only at its end
    assert len(asked) > 10
    # and nothing of the install's sandbox is left: no bwrap process, no container
    assert session_id[:32] not in bwrap_sandboxes()
    if backend == "docker":
        import docker

        client = docker.from_env()
        assert (
            client.containers.list(all=True, filters={"name": f"motor-cortex-{session_id}"}) == []
        )
