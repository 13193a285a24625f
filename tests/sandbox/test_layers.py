"""Dependency layers built in a real sandbox from a real package index (pypiserver), then
mounted read-only into another session whose python3 imports from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.layers import (
    LAYER_MOUNT,
    Package,
    PackageIndex,
    index_domains,
    install_commands,
    layer_build,
    layer_environment,
)
from sandbox.session import SessionRegistry, open_session
from sandbox.tools import execute_tool
from sandbox.types import ExecRequest, SessionSpec
from tests.fixtures.package_index import PackageIndex as Index
from tests.fixtures.upstream import Answer, Upstream

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
