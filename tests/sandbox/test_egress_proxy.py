"""The per-session egress proxy over its unix socket, with real TLS to a real upstream host.

The upstream lives in its own network namespace at a TEST-NET-3 address (tests/fixtures/
upstream.py); the production address rules stay on, so loopback, private and own-host targets
are refused exactly as in production.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import socket
import ssl
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sandbox.egress import EgressProxy, PolicyError, Resolver
from sandbox.types import ConnectionReport, NetworkPolicy
from tests.fixtures.upstream import (
    STALLED_PORT,
    FakeDNS,
    Upstream,
    https_through_tunnel,
    send_connect,
    send_raw,
)

ALLOWED = ("api.allowed.test", "*.wild.test")


@dataclasses.dataclass
class Harness:
    proxy: EgressProxy
    reports: list[ConnectionReport]
    dns: FakeDNS

    @property
    def path(self) -> Path:
        return self.proxy.socket_path

    def wait_reports(self, count: int) -> list[ConnectionReport]:
        """Reports are sent when a connection's thread finishes; wait for `count` of them."""
        deadline = time.monotonic() + 10
        while len(self.reports) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return list(self.reports)


ProxyFactory = Callable[..., Harness]


@pytest.fixture
def make_proxy(tmp_path: Path, upstream: Upstream) -> Iterator[ProxyFactory]:
    made: list[EgressProxy] = []

    def make(
        allowed: tuple[str, ...] = ALLOWED,
        dns: FakeDNS | None = None,
        **policy_fields: object,
    ) -> Harness:
        reports: list[ConnectionReport] = []
        resolver = dns if dns is not None else upstream.resolver()
        policy = NetworkPolicy(allowed_domains=allowed, **policy_fields)  # type: ignore[arg-type]
        proxy = EgressProxy(
            session_id="run-1",
            policy=policy,
            socket_path=tmp_path / f"egress-{len(made)}.sock",
            resolver=resolver,
            on_connection=reports.append,
        )
        made.append(proxy)
        return Harness(proxy, reports, resolver)

    yield make
    for proxy in made:
        proxy.close()


def without_duration(report: ConnectionReport) -> ConnectionReport:
    return dataclasses.replace(report, duration_ms=0)


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client speaking to the proxy's unix socket with absolute-form requests."""

    def __init__(self, socket_path: Path) -> None:
        super().__init__("proxy", timeout=10)
        self._socket_path = socket_path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(str(self._socket_path))


def proxied_get(
    socket_path: Path, url: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn = UnixHTTPConnection(socket_path)
    try:
        conn.request("GET", url, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


# ------------------------------------------------------------------------------ allowed paths


def test_connect_to_an_allowed_host_reaches_the_upstream_over_tls(
    make_proxy: ProxyFactory, upstream: Upstream
) -> None:
    # given
    harness = make_proxy()

    # when
    answer = send_connect(harness.path, "api.allowed.test:443")
    assert answer.sock is not None
    status, body = https_through_tunnel(
        answer.sock, upstream.client_context(), "api.allowed.test", "/echo"
    )

    # then the upstream saw a TLS request for the name, from this host
    echoed = json.loads(body)
    assert (answer.status, status) == (200, 200)
    assert (echoed["sni"], echoed["port"], echoed["client"]) == (
        "api.allowed.test",
        443,
        upstream.host_ip,
    )
    [report] = harness.wait_reports(1)
    assert report.bytes_up > 0 and report.bytes_down > len(body)
    assert without_duration(report) == ConnectionReport(
        session_id="run-1",
        host="api.allowed.test",
        port=443,
        resolved_ip=upstream.ip,
        verdict="allowed",
        reason="closed",
        bytes_up=report.bytes_up,
        bytes_down=report.bytes_down,
        duration_ms=0,
    )
    assert harness.dns.calls == [("api.allowed.test", 443)]


@pytest.mark.parametrize("name", ["a.wild.test", "deep.er.wild.test"])
def test_a_wildcard_entry_admits_strict_subdomains(
    name: str, make_proxy: ProxyFactory, upstream: Upstream
) -> None:
    # given
    harness = make_proxy(dns=upstream.resolver(names=(name,)))

    # when
    answer = send_connect(harness.path, f"{name}:443")
    assert answer.sock is not None
    status, body = https_through_tunnel(answer.sock, upstream.client_context(), name)

    # then
    assert (answer.status, status, body) == (200, 200, b"hello from upstream\n")


def test_a_wildcard_entry_does_not_admit_the_bare_domain(
    make_proxy: ProxyFactory, upstream: Upstream
) -> None:
    # given
    harness = make_proxy(dns=upstream.resolver(names=("wild.test",)))

    # when
    answer = send_connect(harness.path, "wild.test:443")

    # then refused before any lookup
    assert answer.status == 403
    assert answer.headers["x-motor-egress"] == "denied; reason=not_allowlisted"
    assert harness.dns.calls == []


def test_plain_http_is_forwarded_in_origin_form_without_proxy_headers(
    make_proxy: ProxyFactory, upstream: Upstream
) -> None:
    # given
    harness = make_proxy()

    # when
    status, _, body = proxied_get(
        harness.path,
        "http://api.allowed.test/echo?x=1",
        headers={
            "Host": "evil.test",
            "Proxy-Authorization": "Basic c2VjcmV0",
            "Proxy-Connection": "keep-alive",
            "X-Kept": "yes",
        },
    )

    # then
    echoed = json.loads(body)
    names = {name.lower(): value for name, value in echoed["headers"]}
    assert status == 200
    assert (echoed["method"], echoed["path"], echoed["port"]) == ("GET", "/echo?x=1", 80)
    assert names["host"] == "api.allowed.test"
    assert names["x-kept"] == "yes"
    assert not [n for n in names if n.startswith("proxy-")]
    [report] = harness.wait_reports(1)
    assert (report.host, report.port, report.verdict, report.resolved_ip) == (
        "api.allowed.test",
        80,
        "allowed",
        upstream.ip,
    )
    assert report.bytes_up > 0 and report.bytes_down > len(body)


def test_plain_http_post_body_reaches_the_upstream(make_proxy: ProxyFactory) -> None:
    # given
    harness = make_proxy()
    request = (
        b"POST http://api.allowed.test/echo HTTP/1.1\r\nHost: api.allowed.test\r\n"
        b"Content-Length: 11\r\n\r\nhello=world"
    )

    # when
    answer = send_raw(harness.path, request)

    # then
    assert answer.status == 200
    assert json.loads(answer.body)["body"] == "hello=world"


def test_an_ip_literal_listed_literally_is_allowed(
    make_proxy: ProxyFactory, upstream: Upstream
) -> None:
    # given
    harness = make_proxy(allowed=(upstream.ip,))

    # when
    answer = send_connect(harness.path, f"{upstream.ip}:443")
    assert answer.sock is not None
    status, body = https_through_tunnel(answer.sock, upstream.client_context(), upstream.ip)

    # then no lookup was needed for a literal
    assert (answer.status, status, body) == (200, 200, b"hello from upstream\n")
    assert harness.dns.calls == []


def test_policy_ports_replace_the_default_ports(
    make_proxy: ProxyFactory, upstream: Upstream
) -> None:
    # given
    harness = make_proxy(allowed_ports=(8443,))

    # when
    on_8443 = send_connect(harness.path, "api.allowed.test:8443")
    on_443 = send_connect(harness.path, "api.allowed.test:443")

    # then
    assert on_8443.sock is not None
    status, _ = https_through_tunnel(on_8443.sock, upstream.client_context(), "api.allowed.test")
    assert (on_8443.status, status) == (200, 200)
    assert on_443.status == 403
    assert on_443.headers["x-motor-egress"] == "denied; reason=port_not_allowed"


def test_a_host_port_entry_opens_that_port_for_that_host_only(
    make_proxy: ProxyFactory, upstream: Upstream
) -> None:
    # given api.allowed.test allowed on 8443 only, and www.allowed.test bare (443 and 80)
    harness = make_proxy(allowed=("api.allowed.test:8443", "www.allowed.test"))

    # when each host is asked for on 8443 and 443
    api_8443 = send_connect(harness.path, "api.allowed.test:8443")
    api_443 = send_connect(harness.path, "api.allowed.test:443")
    www_8443 = send_connect(harness.path, "www.allowed.test:8443")
    www_443 = send_connect(harness.path, "www.allowed.test:443")

    # then only the listed pairs are tunnelled, and they reach the upstream
    assert api_8443.sock is not None and www_443.sock is not None
    assert (
        https_through_tunnel(api_8443.sock, upstream.client_context(), "api.allowed.test")[0] == 200
    )
    assert (
        https_through_tunnel(www_443.sock, upstream.client_context(), "www.allowed.test")[0] == 200
    )
    assert (api_443.status, www_8443.status) == (403, 403)
    assert api_443.headers["x-motor-egress"] == "denied; reason=port_not_allowed"
    assert www_8443.headers["x-motor-egress"] == "denied; reason=port_not_allowed"


# ------------------------------------------------------------------------------ refusals


def test_a_non_allowlisted_domain_gets_an_actionable_403_and_no_dns_query(
    make_proxy: ProxyFactory,
) -> None:
    # given
    harness = make_proxy()

    # when
    answer = send_connect(harness.path, "secret-data.attacker.test:443")

    # then
    assert answer.status == 403
    assert answer.headers["x-motor-egress"] == "denied; reason=not_allowlisted"
    assert answer.body == (
        b"secret-data.attacker.test is not in this run's allowed domains; "
        b"use ask_user to request it\n"
    )
    assert harness.dns.calls == []
    [report] = harness.wait_reports(1)
    assert without_duration(report) == ConnectionReport(
        session_id="run-1",
        host="secret-data.attacker.test",
        port=443,
        resolved_ip=None,
        verdict="denied",
        reason="not_allowlisted",
        bytes_up=0,
        bytes_down=0,
        duration_ms=0,
    )


def test_plain_http_to_a_non_allowlisted_domain_is_refused_the_same_way(
    make_proxy: ProxyFactory,
) -> None:
    # given
    harness = make_proxy()

    # when
    status, headers, body = proxied_get(harness.path, "http://evil.test/hello")

    # then
    assert status == 403
    assert headers["x-motor-egress"] == "denied; reason=not_allowlisted"
    assert body == b"evil.test is not in this run's allowed domains; use ask_user to request it\n"
    assert harness.dns.calls == []


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("127.0.0.1:443", "not_allowlisted"),
        ("0177.0.0.1:443", "invalid_host"),
        ("0x7f.0.0.1:443", "invalid_host"),
        ("0x7f000001:443", "invalid_host"),
        ("2130706433:443", "invalid_host"),
        ("127.1:443", "invalid_host"),
        ("[::1]:443", "not_allowlisted"),
        ("::1:443", "invalid_host"),
        ("[::ffff:127.0.0.1]:443", "not_allowlisted"),
        ("[::ffff:7f00:1]:443", "not_allowlisted"),
        ("::ffff:127.0.0.1:443", "invalid_host"),
        ("[fe80::1%25eth0]:443", "invalid_host"),
        ("169.254.169.254:80", "not_allowlisted"),
    ],
)
def test_ip_literals_in_every_notation_are_refused_unless_listed(
    target: str, reason: str, make_proxy: ProxyFactory, upstream: Upstream
) -> None:
    # given a policy that lists names only
    harness = make_proxy()

    # when
    answer = send_connect(harness.path, target)

    # then refused before anything was resolved or dialled
    assert answer.status == 403
    assert answer.headers["x-motor-egress"] == f"denied; reason={reason}"
    assert harness.dns.calls == []


def test_the_upstream_ip_is_refused_unless_listed(
    make_proxy: ProxyFactory, upstream: Upstream
) -> None:
    # given
    harness = make_proxy()

    # when
    answer = send_connect(harness.path, f"{upstream.ip}:443")

    # then
    assert answer.status == 403
    assert answer.headers["x-motor-egress"] == "denied; reason=not_allowlisted"


def test_an_ip_literal_listed_literally_is_still_address_checked(
    make_proxy: ProxyFactory,
) -> None:
    # given a policy that lists loopback literally
    harness = make_proxy(allowed=("127.0.0.1",))

    # when
    answer = send_connect(harness.path, "127.0.0.1:443")

    # then
    assert answer.status == 403
    assert answer.headers["x-motor-egress"] == "denied; reason=forbidden_address"


FORBIDDEN_ANSWERS = [
    ["127.0.0.1"],
    ["10.0.0.5"],
    ["172.16.0.1"],
    ["192.168.1.1"],
    ["100.64.0.1"],
    ["169.254.169.254"],
    ["::1"],
    ["fd00::1"],
    ["::ffff:127.0.0.1"],
    ["64:ff9b::7f00:1"],
    ["OWN"],  # this host's own address (the veth's host side)
    ["PUBLIC", "10.0.0.5"],  # ANY bad address refuses the name
]


@pytest.mark.parametrize("answers", FORBIDDEN_ANSWERS, ids=lambda a: "+".join(a))
def test_an_allowed_name_resolving_to_a_forbidden_address_is_refused(
    answers: list[str], make_proxy: ProxyFactory, upstream: Upstream
) -> None:
    # given an allowed name whose DNS answer includes a forbidden address
    concrete = [
        {"OWN": upstream.host_ip, "PUBLIC": upstream.ip}.get(answer, answer) for answer in answers
    ]
    dns = upstream.resolver(names=(), extra={"api.allowed.test": concrete})
    harness = make_proxy(dns=dns)

    # when
    answer = send_connect(harness.path, "api.allowed.test:443")

    # then refused after exactly one lookup, naming the offending address
    bad = concrete[-1]
    assert answer.status == 403
    assert answer.headers["x-motor-egress"] == "denied; reason=forbidden_address"
    assert f"resolves to {bad}".encode() in answer.body
    assert dns.calls == [("api.allowed.test", 443)]
    [report] = harness.wait_reports(1)
    assert (report.verdict, report.reason, report.resolved_ip) == (
        "denied",
        "forbidden_address",
        bad,
    )
    assert (report.bytes_up, report.bytes_down) == (0, 0)


def test_dns_rebinding_cannot_move_the_dial_after_the_check(
    make_proxy: ProxyFactory, upstream: Upstream
) -> None:
    # given a resolver that answers the upstream first and loopback afterwards
    dns = upstream.resolver(names=(), in_turn={"api.allowed.test": [[upstream.ip], ["127.0.0.1"]]})
    harness = make_proxy(dns=dns)

    # when one connection is made, then another
    first = send_connect(harness.path, "api.allowed.test:443")
    assert first.sock is not None
    status, body = https_through_tunnel(
        first.sock, upstream.client_context(), "api.allowed.test", "/echo"
    )
    second = send_connect(harness.path, "api.allowed.test:443")

    # then the first was dialled to the address it checked (the upstream saw it), with one
    # lookup; the second lookup's loopback answer was refused
    assert (first.status, status) == (200, 200)
    assert json.loads(body)["client"] == upstream.host_ip
    assert second.status == 403
    assert second.headers["x-motor-egress"] == "denied; reason=forbidden_address"
    assert dns.calls == [("api.allowed.test", 443), ("api.allowed.test", 443)]
    reports = sorted(harness.wait_reports(2), key=lambda r: r.verdict)
    assert [(r.verdict, r.resolved_ip) for r in reports] == [
        ("allowed", upstream.ip),
        ("denied", "127.0.0.1"),
    ]


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        (b"evil.test\x00.api.allowed.test:443", "invalid_host"),
        (b"evil.test%00.api.allowed.test:443", "invalid_host"),
        (b"evil.test:443.api.allowed.test:443", "invalid_host"),
        (b"api.allowed.test.evil.test:443", "not_allowlisted"),
        (b"api.allowed.test@evil.test:443", "invalid_host"),
        (b"evil.test\\@api.allowed.test:443", "invalid_host"),
        (b"evil.test\\.api.allowed.test:443", "invalid_host"),
        (b"api.allowed.test..:443", "invalid_host"),
        ("\u0430pi.allowed.test:443".encode(), "not_allowlisted"),  # Cyrillic homograph
        (b"xn--pi-6kc.allowed.test:443", "not_allowlisted"),
        (b"api.allowed.test:0443", "invalid_host"),
        (b"api.allowed.test:65536", "invalid_host"),
        (b"api.allowed.test:0", "invalid_host"),
        (b"api.allowed.test:", "invalid_host"),
        (b"api.allowed.test", "invalid_host"),
        (b"api.allowed.test:22", "port_not_allowed"),
    ],
)
def test_hostname_parser_tricks_are_refused(
    target: bytes, reason: str, make_proxy: ProxyFactory
) -> None:
    # given
    harness = make_proxy()

    # when (no Host header: the CONNECT line alone must be judged)
    answer = send_connect(harness.path, target, host_header=False)

    # then
    assert answer.status == 403
    assert answer.headers["x-motor-egress"] == f"denied; reason={reason}"
    assert harness.dns.calls == []


def test_a_nul_byte_in_a_header_is_refused_too(make_proxy: ProxyFactory) -> None:
    # given
    harness = make_proxy()

    # when
    answer = send_connect(harness.path, b"evil.test\x00.api.allowed.test:443")

    # then
    assert answer.status == 400
    assert answer.headers["x-motor-egress"] == "error; reason=bad_request"
    assert harness.dns.calls == []


@pytest.mark.parametrize(
    "target",
    ["API.Allowed.TEST:443", "api.allowed.test.:443"],
)
def test_case_and_one_trailing_dot_are_canonicalised(
    target: str, make_proxy: ProxyFactory, upstream: Upstream
) -> None:
    # given
    harness = make_proxy()

    # when
    answer = send_connect(harness.path, target)
    assert answer.sock is not None
    status, _ = https_through_tunnel(answer.sock, upstream.client_context(), "api.allowed.test")

    # then the lookup and the report use the canonical name
    assert (answer.status, status) == (200, 200)
    assert harness.dns.calls == [("api.allowed.test", 443)]
    assert harness.wait_reports(1)[0].host == "api.allowed.test"


@pytest.mark.parametrize(
    ("request_bytes", "status", "reason"),
    [
        # CRLF injection: the CONNECT line ends early, the "real" target is only a header
        (
            b"CONNECT evil.test:443\r\nHost: api.allowed.test:443 HTTP/1.1\r\n\r\n",
            400,
            "bad_request",
        ),
        (b"CONNECT api.allowed.test:443\rX HTTP/1.1\r\n\r\n", 400, "bad_request"),
        (b"CONNECT api.allowed.test:443 HTTP/1.1\r\nX: a\nb\r\n\r\n", 400, "bad_request"),
        (b"CONNECT  api.allowed.test:443 HTTP/1.1\r\n\r\n", 400, "bad_request"),
        (b"connect api.allowed.test:443 HTTP/1.1\r\n\r\n", 400, "bad_request"),
        (b"GET /hello HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n", 400, "bad_request"),
        (b"GET https://api.allowed.test/ HTTP/1.1\r\n\r\n", 400, "bad_request"),
        (b"GET http://api.allowed.test/#frag HTTP/1.1\r\n\r\n", 400, "bad_request"),
        (b"TRACE http://api.allowed.test/ HTTP/1.1\r\n\r\n", 405, "method_not_allowed"),
        (b"BREW http://api.allowed.test/ HTTP/1.1\r\n\r\n", 405, "method_not_allowed"),
        (b"GET http://api.allowed.test@evil.test/ HTTP/1.1\r\n\r\n", 403, "invalid_host"),
        (b"GET http://evil.test\\@api.allowed.test/ HTTP/1.1\r\n\r\n", 403, "invalid_host"),
        (b"GET http://api.allowed.test:22/ HTTP/1.1\r\n\r\n", 403, "port_not_allowed"),
        (
            b"POST http://api.allowed.test/echo HTTP/1.1\r\nContent-Length: 3\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n",
            400,
            "bad_request",
        ),
        (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", 400, "bad_request"),
    ],
)
def test_malformed_or_unsupported_requests_are_refused(
    request_bytes: bytes, status: int, reason: str, make_proxy: ProxyFactory
) -> None:
    # given
    harness = make_proxy()

    # when
    answer = send_raw(harness.path, request_bytes)

    # then refused, nothing resolved, reported as a refusal
    assert answer.status == status
    assert answer.headers["x-motor-egress"].endswith(f"; reason={reason}")
    assert harness.dns.calls == []
    [report] = harness.wait_reports(1)
    assert (report.verdict, report.reason, report.resolved_ip) == ("denied", reason, None)


def test_a_tls_session_for_another_name_is_cut(
    make_proxy: ProxyFactory, upstream: Upstream
) -> None:
    # given a tunnel opened for one allowed name
    harness = make_proxy(allowed=("api.allowed.test", "www.allowed.test"))
    answer = send_connect(harness.path, "api.allowed.test:443")
    assert answer.sock is not None

    # when the client sends a ClientHello for a different (also allowed) name
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        https_through_tunnel(answer.sock, upstream.client_context(), "www.allowed.test")

    # then the tunnel was cut and reported as domain fronting
    [report] = harness.wait_reports(1)
    assert (report.verdict, report.reason, report.resolved_ip) == (
        "denied",
        "sni_mismatch",
        upstream.ip,
    )
    assert report.bytes_up == 0


# ------------------------------------------------------------------------------------ caps


def test_one_tunnel_beyond_max_tunnels_is_refused(
    make_proxy: ProxyFactory, upstream: Upstream
) -> None:
    # given two open tunnels on a policy that allows two
    harness = make_proxy(max_tunnels=2)
    first = send_connect(harness.path, "api.allowed.test:443")
    second = send_connect(harness.path, "api.allowed.test:443")

    # when a third is requested
    third = send_connect(harness.path, "api.allowed.test:443")

    # then
    assert (first.status, second.status, third.status) == (200, 200, 503)
    assert third.headers["x-motor-egress"] == "denied; reason=tunnel_limit"
    assert harness.proxy.active_tunnels == 2
    # and once one closes, a new tunnel is accepted again
    assert first.sock is not None and second.sock is not None
    first.sock.close()
    deadline = time.monotonic() + 10
    while harness.proxy.active_tunnels > 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    fourth = send_connect(harness.path, "api.allowed.test:443")
    assert fourth.status == 200
    assert fourth.sock is not None
    second.sock.close()
    fourth.sock.close()


def test_the_total_bytes_cap_cuts_the_tunnel(make_proxy: ProxyFactory, upstream: Upstream) -> None:
    # given a session allowed 64 KiB in total
    cap = 64 * 1024
    harness = make_proxy(max_total_bytes=cap)
    answer = send_connect(harness.path, "api.allowed.test:443")
    assert answer.sock is not None

    # when the client downloads 1 MiB
    try:
        _, body = https_through_tunnel(
            answer.sock, upstream.client_context(), "api.allowed.test", "/big?bytes=1048576"
        )
        received = len(body)
    except (ssl.SSLError, OSError):
        received = 0

    # then the tunnel was cut at the cap
    assert received < cap
    [report] = harness.wait_reports(1)
    assert (report.verdict, report.reason) == ("allowed", "byte_limit")
    assert report.bytes_up + report.bytes_down <= cap
    assert harness.proxy.bytes_total <= cap


def test_the_session_is_the_socket_never_a_header_or_proxy_username(
    tmp_path: Path, upstream: Upstream
) -> None:
    # given two sessions' proxies: run-2 may reach api.allowed.test, run-1 may not
    reports: list[ConnectionReport] = []
    proxies = [
        EgressProxy(
            session_id=session_id,
            policy=NetworkPolicy(allowed_domains=allowed),
            socket_path=tmp_path / f"{session_id}.sock",
            resolver=upstream.resolver(),
            on_connection=reports.append,
        )
        for session_id, allowed in (("run-1", ("www.allowed.test",)), ("run-2", ALLOWED))
    ]
    try:
        # when a client on run-1's socket claims to be run-2 by proxy username and by header
        answer = send_raw(
            proxies[0].socket_path,
            b"CONNECT api.allowed.test:443 HTTP/1.1\r\nHost: api.allowed.test:443\r\n"
            b"Proxy-Authorization: Basic cnVuLTI6eA==\r\n"  # run-2:x
            b"X-Motor-Session: run-2\r\n\r\n",
        )
        deadline = time.monotonic() + 10
        while not reports and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        for proxy in proxies:
            proxy.close()
    # then run-1's policy decided, and the report names run-1
    assert answer.status == 403
    assert answer.headers["x-motor-egress"] == "denied; reason=not_allowlisted"
    assert [(r.session_id, r.host, r.verdict) for r in reports] == [
        ("run-1", "api.allowed.test", "denied")
    ]


def test_a_destination_that_never_answers_is_given_up_after_the_connect_timeout(
    make_proxy: ProxyFactory, upstream: Upstream
) -> None:
    # given a policy with a 0.5 s connect timeout and an allowed port where SYNs are dropped
    harness = make_proxy(connect_timeout_s=0.5, allowed_ports=(STALLED_PORT,))

    # when a tunnel to it is requested
    answer = send_connect(harness.path, f"api.allowed.test:{STALLED_PORT}")

    # then the proxy gives up on the dial and says so; nothing was relayed
    assert answer.status == 502
    assert answer.headers["x-motor-egress"] == "error; reason=connect_failed"
    assert b"(TimeoutError)" in answer.body
    [report] = harness.wait_reports(1)
    assert (report.verdict, report.reason, report.resolved_ip) == (
        "denied",
        "connect_failed",
        upstream.ip,
    )
    assert (report.bytes_up, report.bytes_down) == (0, 0)


def test_an_idle_tunnel_is_closed(make_proxy: ProxyFactory) -> None:
    # given a short idle timeout and SNI peeking off (so the proxy waits in the relay)
    harness = make_proxy(idle_timeout_s=0.3)
    answer = send_connect(harness.path, "api.allowed.test:80")
    assert answer.sock is not None

    # when the client sends nothing, then the proxy closes the tunnel
    assert answer.sock.recv(1) == b""
    [report] = harness.wait_reports(1)
    assert (report.verdict, report.reason) == ("allowed", "idle_timeout")


# ------------------------------------------------------------------------------- lifecycle


def test_the_socket_is_private_to_its_owner(tmp_path: Path, upstream: Upstream) -> None:
    # when
    with EgressProxy(
        session_id="run-2",
        policy=NetworkPolicy(allowed_domains=ALLOWED),
        socket_path=tmp_path / "owned.sock",
        resolver=upstream.resolver(),
        owner_uid=65534,
    ) as proxy:
        info = os.stat(proxy.socket_path)

    # then
    assert stat.S_ISSOCK(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_uid == 65534


def test_close_cuts_tunnels_removes_the_socket_and_stops_every_thread(
    make_proxy: ProxyFactory,
) -> None:
    # given a proxy with one open tunnel
    harness = make_proxy()
    tunnel = send_connect(harness.path, "api.allowed.test:443")
    assert tunnel.sock is not None

    # when
    harness.proxy.close()

    # then
    assert tunnel.sock.recv(1) == b""
    assert not harness.path.exists()
    assert [t.name for t in threading.enumerate() if t.name.startswith("egress-run-1-")] == []
    with pytest.raises(FileNotFoundError):
        send_connect(harness.path, "api.allowed.test:443")
    harness.proxy.close()  # idempotent


def test_an_unusable_policy_creates_no_socket(tmp_path: Path, upstream: Upstream) -> None:
    # when
    with pytest.raises(PolicyError, match="too broad"):
        EgressProxy(
            session_id="run-3",
            policy=NetworkPolicy(allowed_domains=("*.com",)),
            socket_path=tmp_path / "never.sock",
            resolver=upstream.resolver(),
        )

    # then
    assert list(tmp_path.iterdir()) == []


def test_an_existing_socket_path_is_not_taken_over(tmp_path: Path) -> None:
    # given
    path = tmp_path / "taken.sock"
    path.write_text("someone else's")

    # when
    with pytest.raises(FileExistsError):
        EgressProxy(session_id="run-4", policy=NetworkPolicy(), socket_path=path)

    # then
    assert path.read_text() == "someone else's"


def test_a_failing_report_callback_does_not_break_the_proxy(
    tmp_path: Path, upstream: Upstream
) -> None:
    # given a callback that raises
    def explode(report: ConnectionReport) -> None:
        raise RuntimeError("audit sink down")

    resolver: Resolver = upstream.resolver()
    with EgressProxy(
        session_id="run-5",
        policy=NetworkPolicy(allowed_domains=ALLOWED),
        socket_path=tmp_path / "cb.sock",
        resolver=resolver,
        on_connection=explode,
    ) as proxy:
        # when two requests are made
        first = send_connect(proxy.socket_path, "evil.test:443")
        second = send_connect(proxy.socket_path, "evil.test:443")

    # then both were answered
    assert (first.status, second.status) == (403, 403)


def test_a_non_tls_tunnel_is_relayed_as_is(make_proxy: ProxyFactory, upstream: Upstream) -> None:
    # given a tunnel to the plain-HTTP port
    harness = make_proxy()
    answer = send_connect(harness.path, "api.allowed.test:80")
    assert answer.sock is not None

    # when plain HTTP is spoken through it
    with answer.sock as tunnel:
        tunnel.sendall(
            b"GET /hello HTTP/1.1\r\nHost: api.allowed.test\r\nConnection: close\r\n\r\n"
        )
        data = b""
        while chunk := tunnel.recv(65536):
            data += chunk

    # then
    assert data.startswith(b"HTTP/1.1 200 ")
    assert data.endswith(b"hello from upstream\n")


def test_a_socket_shared_with_a_group_is_group_writable(tmp_path: Path, upstream: Upstream) -> None:
    # when
    with EgressProxy(
        session_id="run-6",
        policy=NetworkPolicy(allowed_domains=ALLOWED),
        socket_path=tmp_path / "group.sock",
        resolver=upstream.resolver(),
        owner_gid=65534,
    ) as proxy:
        info = os.stat(proxy.socket_path)

    # then
    assert (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid) == (0o660, 0, 65534)


def test_an_upstream_cannot_fake_the_proxys_refusal_header(make_proxy: ProxyFactory) -> None:
    # given
    harness = make_proxy()

    # when the upstream answers with the proxy's own verdict header
    status, headers, body = proxied_get(harness.path, "http://api.allowed.test/spoof")

    # then the answer arrives without it, everything else intact
    assert (status, body) == (403, b"blocked, use ask_user to request evil.test\n")
    assert "x-motor-egress" not in headers
    assert headers["x-other"] == "kept"
