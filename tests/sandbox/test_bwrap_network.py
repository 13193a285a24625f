"""Egress from a bwrap session: the bridge to the host proxy is the only way out."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.backends.bwrap import BwrapBackend, BwrapSession
from sandbox.types import ConnectionReport, ExecRequest, NetworkPolicy, SessionSpec
from tests.fixtures.upstream import Upstream
from tests.sandbox.conftest import py, py_json

pytestmark = pytest.mark.slow


@pytest.fixture
def net_session(upstream: Upstream, tmp_path: Path) -> Iterator[tuple[BwrapSession, list]]:
    """A session allowed to reach allowed.test (which the test resolver points at the
    namespaced upstream), recording every connection report."""
    reports: list[ConnectionReport] = []
    workspace = tmp_path / "ws"
    workspace.mkdir()
    backend = BwrapBackend(egress_resolver=upstream.resolver())
    session = backend.open(
        SessionSpec(
            workspace=workspace,
            network=NetworkPolicy(allowed_domains=("allowed.test",)),
            on_connection=reports.append,
        )
    )
    yield session, reports
    session.close()


def test_proxy_variables_point_at_the_bridge_and_no_proxy_is_unset(
    net_session: tuple[BwrapSession, list],
) -> None:
    session, _ = net_session
    env = py_json(session, "import json, os; print(json.dumps(dict(os.environ)))")
    assert isinstance(env, dict)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        assert env[name] == "http://127.0.0.1:3128"
    assert "NO_PROXY" not in env and "no_proxy" not in env


def test_allowed_host_is_reached_through_the_proxy(
    net_session: tuple[BwrapSession, list], upstream: Upstream
) -> None:
    session, reports = net_session
    # when a standard client fetches an allowed URL (it honours HTTP_PROXY)
    result = py(
        session,
        """
        import urllib.request
        with urllib.request.urlopen("http://allowed.test/hello", timeout=10) as response:
            print(response.status)
        """,
    )
    # then it got the upstream's answer and the proxy reported an allowed connection to it
    assert result.exit_code == 0, result.stderr
    assert result.stdout == b"200\n"
    assert [(r.host, r.port, r.resolved_ip, r.verdict) for r in reports] == [
        ("allowed.test", 80, upstream.ip, "allowed")
    ]


def test_denied_host_gets_403_and_a_denied_report(
    net_session: tuple[BwrapSession, list],
) -> None:
    session, reports = net_session
    # when a client asks the proxy for a host outside the allowlist
    result = py(
        session,
        """
        import urllib.error, urllib.request
        try:
            urllib.request.urlopen("http://denied.test/hello", timeout=10)
            print("fetched")
        except urllib.error.HTTPError as exc:
            print(exc.code)
        """,
    )
    # then the proxy refused it and reported the refusal
    assert result.stdout == b"403\n"
    assert [(r.host, r.verdict) for r in reports] == [("denied.test", "denied")]


def test_direct_connections_still_fail_with_network_enabled(
    net_session: tuple[BwrapSession, list], upstream: Upstream
) -> None:
    session, reports = net_session
    # when the sandbox ignores the proxy and dials the upstream, the host's services and the
    # egress socket directly
    outcome = py_json(
        session,
        f"""
        import json, socket
        def attempt(family, address):
            s = socket.socket(family, socket.SOCK_STREAM)
            s.settimeout(3)
            try:
                s.connect(address)
                return "connected"
            except OSError as exc:
                return exc.errno
            finally:
                s.close()
        def unix():
            try:
                socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                return "created"
            except OSError as exc:
                return exc.errno
        print(json.dumps({{
            "upstream": attempt(socket.AF_INET, ({upstream.ip!r}, 80)),
            "postgres": attempt(socket.AF_INET, ("127.0.0.1", 5432)),
            "unix_socket": unix(),
        }}))
        """,
    )
    # then only the bridge port answers: everything else fails and the proxy saw nothing
    assert outcome == {
        "upstream": errno.ENETUNREACH,
        "postgres": errno.ECONNREFUSED,
        "unix_socket": errno.EPERM,
    }
    assert reports == []


def test_session_without_network_has_no_bridge_and_no_socket(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    session = BwrapBackend().open(SessionSpec(workspace=workspace))
    try:
        probe = py_json(
            session,
            """
            import json, os, socket
            s = socket.socket()
            s.settimeout(3)
            try:
                s.connect(("127.0.0.1", 3128))
                bridge = "connected"
            except OSError as exc:
                bridge = exc.errno
            print(json.dumps({"bridge": bridge, "run": os.path.exists("/run/motor-cortex"),
                              "proxy": [k for k in os.environ if "proxy" in k.lower()]}))
            """,
        )
        assert probe == {"bridge": errno.ECONNREFUSED, "run": False, "proxy": []}
        assert not (session._runtime_dir / "net").exists()
    finally:
        session.close()


def test_close_removes_the_egress_socket(net_session: tuple[BwrapSession, list]) -> None:
    session, _ = net_session
    socket_path = session._runtime_dir / "net" / "egress.sock"
    assert socket_path.exists()
    session.exec(ExecRequest(argv=["true"]))
    session.close()
    assert not socket_path.exists()
    assert not session._runtime_dir.exists()
