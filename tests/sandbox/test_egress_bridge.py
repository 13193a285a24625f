"""The in-sandbox bridge: TCP on loopback → unix socket → egress proxy → upstream.

Run in-process (no sandbox needed) and as a script under the system /usr/bin/python3, which has
none of the project's dependencies: the bridge must work with the standard library alone.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.egress import EgressProxy
from sandbox.inside import bridge
from sandbox.inside.bridge import serve_bridge
from sandbox.types import ConnectionReport, NetworkPolicy
from tests.fixtures.upstream import Upstream

SYSTEM_PYTHON = "/usr/bin/python3"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def proxy(
    tmp_path: Path, upstream: Upstream
) -> Iterator[tuple[EgressProxy, list[ConnectionReport]]]:
    reports: list[ConnectionReport] = []
    with EgressProxy(
        session_id="run-bridge",
        policy=NetworkPolicy(allowed_domains=("api.allowed.test",)),
        socket_path=tmp_path / "egress.sock",
        resolver=upstream.resolver(),
        on_connection=reports.append,
    ) as running:
        yield running, reports


@pytest.fixture
def bridge_port(proxy: tuple[EgressProxy, list[ConnectionReport]]) -> Iterator[int]:
    port = free_port()
    ready, stop = threading.Event(), threading.Event()
    thread = threading.Thread(
        target=serve_bridge,
        args=("127.0.0.1", port, str(proxy[0].socket_path), ready),
        kwargs={"stop": stop},
        daemon=True,
    )
    thread.start()
    assert ready.wait(10)
    yield port
    stop.set()
    thread.join(10)
    assert not thread.is_alive()


def opener(port: int, upstream: Upstream) -> urllib.request.OpenerDirector:
    """urllib configured like a sandboxed tool: HTTP(S)_PROXY pointing at the bridge."""
    proxy_url = f"http://127.0.0.1:{port}"
    return urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": proxy_url, "https": proxy_url}),
        urllib.request.HTTPSHandler(context=upstream.client_context()),
    )


def test_https_through_the_bridge_reaches_the_upstream(
    bridge_port: int, upstream: Upstream, proxy: tuple[EgressProxy, list[ConnectionReport]]
) -> None:
    # when a client uses the bridge as its HTTPS proxy
    with opener(bridge_port, upstream).open("https://api.allowed.test/echo", timeout=10) as resp:
        body = json.loads(resp.read())

    # then the TLS request arrived at the upstream via the session's proxy
    assert (resp.status, body["sni"], body["client"]) == (200, "api.allowed.test", upstream.host_ip)
    deadline = time.monotonic() + 10
    while not proxy[1] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [(r.session_id, r.host, r.port, r.verdict) for r in proxy[1]] == [
        ("run-bridge", "api.allowed.test", 443, "allowed")
    ]


def test_plain_http_through_the_bridge_reaches_the_upstream(
    bridge_port: int, upstream: Upstream
) -> None:
    # when
    with opener(bridge_port, upstream).open("http://api.allowed.test/hello", timeout=10) as resp:
        body = resp.read()

    # then
    assert (resp.status, body) == (200, b"hello from upstream\n")


def test_a_refusal_travels_back_through_the_bridge(bridge_port: int, upstream: Upstream) -> None:
    # when
    with pytest.raises(urllib.error.HTTPError) as caught:
        opener(bridge_port, upstream).open("http://evil.test/hello", timeout=10)

    # then the client sees the proxy's 403 and its verdict header
    assert caught.value.code == 403
    assert caught.value.headers["X-Motor-Egress"] == "denied; reason=not_allowlisted"
    assert caught.value.read() == (
        b"evil.test is not in this run's allowed domains; use ask_user to request it\n"
    )


def test_a_missing_unix_socket_closes_the_client_connection(tmp_path: Path) -> None:
    # given a bridge whose unix socket does not exist
    port = free_port()
    ready, stop = threading.Event(), threading.Event()
    thread = threading.Thread(
        target=serve_bridge,
        args=("127.0.0.1", port, str(tmp_path / "absent.sock"), ready),
        kwargs={"stop": stop},
        daemon=True,
    )
    thread.start()
    assert ready.wait(10)
    try:
        # when a client connects and speaks
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            client.sendall(b"CONNECT api.allowed.test:443 HTTP/1.1\r\n\r\n")
            # then the bridge ends it (EOF or reset, since our bytes were never read): no answer
            try:
                answer = client.recv(1)
            except ConnectionResetError:
                answer = b""
            assert answer == b""
    finally:
        stop.set()
        thread.join(10)


def test_the_bridge_runs_under_the_system_python(
    proxy: tuple[EgressProxy, list[ConnectionReport]], upstream: Upstream
) -> None:
    # given the bridge started as a script by the interpreter a sandbox has
    port = free_port()
    process = subprocess.Popen(
        [SYSTEM_PYTHON, "-I", bridge.__file__, "127.0.0.1", str(port), str(proxy[0].socket_path)],
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except ConnectionRefusedError:
                time.sleep(0.02)

        # when a client goes through it
        with opener(port, upstream).open("https://api.allowed.test/hello", timeout=10) as resp:
            body = resp.read()

        # then
        assert (resp.status, body) == (200, b"hello from upstream\n")
    finally:
        process.kill()
        _, stderr = process.communicate(timeout=10)
    assert b"Traceback" not in stderr


def test_a_refused_https_tunnel_tells_the_client_why(bridge_port: int, upstream: Upstream) -> None:
    # when a client asks for an HTTPS URL on a host outside the allowlist
    with pytest.raises(urllib.error.URLError) as caught:
        opener(bridge_port, upstream).open("https://evil.test/hello", timeout=10)

    # then the refusal sentence reaches it through the CONNECT status line
    assert str(caught.value.reason) == (
        "Tunnel connection failed: 403 evil.test is not in this run's allowed domains; "
        "use ask_user to request it"
    )
