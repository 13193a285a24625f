"""`fetch` (and curl in `bash`) from real bwrap and Docker sessions through the real egress proxy
to the test upstream in its own network namespace. The proxy's connection reports show what was
dialled; the upstream's access log shows what arrived.
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sandbox.backends.bwrap import BwrapBackend
from sandbox.tools import execute_tool
from sandbox.types import (
    Backend,
    ConnectionReport,
    ErrorCode,
    NetworkPolicy,
    Session,
    SessionSpec,
    ToolResult,
)
from tests.fixtures.upstream import FakeDNS, Upstream, upstream  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow

SECRET = "tok-secret-999"
CA_INSIDE = "/etc/motor-test-ca.pem"
BASE = "https://api.allowed.test"


@dataclass
class Net:
    session: Session
    dns: FakeDNS
    reports: list[ConnectionReport] = field(default_factory=list)

    def fetch(self, **args: object) -> ToolResult:
        return execute_tool(
            self.session, "fetch", args, credentials={"TOKEN": SECRET}, network_enabled=True
        )

    def verdicts(self, expected: int) -> list[tuple[str, str]]:
        """(host, verdict) of every connection, sorted. The proxy reports a tunnel when it
        closes, which may be just after the tool call returned: wait (up to 10 s) for
        `expected` reports before reading them."""
        deadline = time.monotonic() + 10.0
        while len(self.attempts()) < expected and time.monotonic() < deadline:
            time.sleep(0.02)
        return sorted((r.host, r.verdict) for r in self.attempts())

    def attempts(self) -> list[ConnectionReport]:
        # the docker supervisor's start-up probe of the bridge is an empty request: not a fetch
        return [r for r in list(self.reports) if r.host]


def make_backend(name: str, dns: FakeDNS) -> Backend:
    if name == "bwrap":
        return BwrapBackend(egress_resolver=dns)
    from sandbox.backends.docker import DockerBackend

    return DockerBackend(egress_resolver=dns)


@pytest.fixture(params=["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def net(upstream: Upstream, tmp_path: Path, backend_name: str) -> Iterator[Net]:  # noqa: F811
    # evil.test resolves to the upstream too: only the allowlist keeps it out; the names under
    # allowed.test that point at private or metadata addresses are allowed by name only
    dns = upstream.resolver(
        extra={
            "evil.test": upstream.ip,
            "db.allowed.test": "127.0.0.1",
            "meta.allowed.test": "169.254.169.254",
        }
    )
    reports: list[ConnectionReport] = []
    workspace = tmp_path / "ws"
    workspace.mkdir()
    session = make_backend(backend_name, dns).open(
        SessionSpec(
            workspace=workspace,
            network=NetworkPolicy(
                allowed_domains=(
                    "api.allowed.test",
                    "allowed.test",
                    "db.allowed.test",
                    "meta.allowed.test",
                )
            ),
            readonly_mounts=[(upstream.ca_path, CA_INSIDE)],
            environment={"SSL_CERT_FILE": CA_INSIDE},
            on_connection=reports.append,
        )
    )
    yield Net(session=session, dns=dns, reports=reports)
    session.close()


def test_an_allowed_host_answers(net: Net) -> None:
    result = net.fetch(url=f"{BASE}/hello")
    assert (result.ok, result.provenance, result.truncated) == (True, "web", False)
    assert result.output == (
        "HTTP 200 OK\nurl: https://api.allowed.test/hello\ncontent-length: 20\n"
        "content-type: text/plain\n\nhello from upstream\n"
    )
    assert net.verdicts(1) == [("api.allowed.test", "allowed")]


def test_a_host_outside_the_allowlist_is_network_blocked_before_dns(net: Net) -> None:
    result = net.fetch(url="https://evil.test/hello")
    assert (result.ok, result.error_code, result.retryable) == (
        False,
        ErrorCode.NETWORK_BLOCKED,
        False,
    )
    assert (
        result.output
        == "evil.test is not in this run's allowed domains; use ask_user to request it"
    )
    assert net.verdicts(1) == [("evil.test", "denied")]
    assert [host for host, _ in net.dns.calls] == []


def test_a_redirect_to_a_forbidden_host_is_refused_at_that_hop(net: Net) -> None:
    result = net.fetch(url=f"{BASE}/redirect?to=https://evil.test/hello")
    assert (result.ok, result.error_code) == (False, ErrorCode.NETWORK_BLOCKED)
    assert result.output == (
        "redirect 1 refused: evil.test is not in this run's allowed domains; "
        "use ask_user to request it"
    )
    assert net.verdicts(2) == [("api.allowed.test", "allowed"), ("evil.test", "denied")]
    assert [host for host, _ in net.dns.calls] == ["api.allowed.test"]


@pytest.mark.parametrize(
    ("target", "host", "reason"),
    [
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254", "not_allowlisted"),
        ("http://127.0.0.1:5432/", "127.0.0.1", "not_allowlisted"),
        ("https://meta.allowed.test/latest/meta-data/", "meta.allowed.test", "forbidden_address"),
        ("https://db.allowed.test/", "db.allowed.test", "forbidden_address"),
    ],
)
def test_a_redirect_to_a_private_or_metadata_address_is_refused_at_that_hop(
    net: Net,
    upstream: Upstream,  # noqa: F811
    target: str,
    host: str,
    reason: str,  # noqa: F811
) -> None:
    # given an allowed page that redirects to a metadata or loopback address, by IP literal or
    # through an allowed name that resolves there
    canary = "/redirect?private-" + os.urandom(6).hex()
    # when fetched
    result = net.fetch(url=f"{BASE}{canary}&to={urllib.parse.quote(target, safe='')}")
    # then the first hop arrived, the second was refused by the proxy and nothing was dialled
    assert (result.ok, result.error_code) == (False, ErrorCode.NETWORK_BLOCKED)
    assert result.output.startswith("redirect 1 refused: ")
    assert upstream.seen(canary) == 1
    assert net.verdicts(2) == sorted([("api.allowed.test", "allowed"), (host, "denied")])
    [refused] = [r for r in net.attempts() if r.host == host]
    assert (refused.reason, refused.bytes_up, refused.bytes_down) == (reason, 0, 0)


def test_relative_redirects_are_followed_hop_by_hop(net: Net) -> None:
    result = net.fetch(url=f"{BASE}/redirect?to=/hello")
    assert result.ok
    assert result.output.splitlines()[:3] == [
        "HTTP 200 OK",
        "url: https://api.allowed.test/hello",
        "redirects: 302 -> /hello",
    ]
    assert net.verdicts(2) == [("api.allowed.test", "allowed")] * 2


def test_more_than_five_redirects_are_refused(net: Net) -> None:
    target = "/hello"
    for _ in range(6):
        target = "/redirect?to=" + urllib.parse.quote(target, safe="")
    result = net.fetch(url=BASE + target)
    assert (result.ok, result.error_code) == (False, ErrorCode.HTTP_ERROR)
    assert result.output.startswith("more than 5 redirects: 302 -> /redirect?to=")
    assert net.verdicts(6) == [("api.allowed.test", "allowed")] * 6


def test_bodies_are_truncated(net: Net) -> None:
    default = net.fetch(url=f"{BASE}/big?bytes=100000")
    small = net.fetch(url=f"{BASE}/big?bytes=100000", max_bytes=10)
    assert (default.ok, default.truncated) == (True, True)
    assert default.output.endswith("\n\n" + "x" * 65536 + "\n\n[body truncated at 65536 bytes]")
    assert small.output.endswith("\n\nxxxxxxxxxx\n\n[body truncated at 10 bytes]")


def test_http_errors_are_data(net: Net) -> None:
    result = net.fetch(url=f"{BASE}/missing")
    assert (result.ok, result.error_code, result.retryable, result.provenance) == (
        False,
        ErrorCode.HTTP_ERROR,
        False,
        "web",
    )
    assert result.output.startswith("HTTP 404 Not Found\n")


def test_credentials_reach_the_server_but_never_the_result(net: Net) -> None:
    # when a POST carries the token in a header and the body through placeholders
    result = net.fetch(
        url=f"{BASE}/echo",
        method="POST",
        headers={"Authorization": "Bearer <credential:TOKEN>"},
        body="k=<credential:TOKEN>",
    )
    echoed = json.loads(result.output.split("\n\n", 1)[1])
    # then the server got the real value (16 bytes = len("k=" + SECRET)), the result shows only
    # the placeholder
    assert ["Content-Length", str(len("k=" + SECRET))] in echoed["headers"]
    assert ["Authorization", "Bearer <credential:TOKEN>"] in echoed["headers"]
    assert echoed["body"] == "k=<credential:TOKEN>"
    assert SECRET not in json.dumps(result.to_dict())


def test_credential_headers_are_dropped_on_a_cross_origin_redirect(net: Net) -> None:
    result = net.fetch(
        url=f"{BASE}/redirect?to=https://allowed.test/echo",
        headers={"Authorization": "Bearer <credential:TOKEN>", "X-Trace": "t1"},
    )
    echoed = json.loads(result.output.split("\n\n", 1)[1])
    names = [name for name, _ in echoed["headers"]]
    assert echoed["sni"] == "allowed.test"
    assert "Authorization" not in names
    assert ["X-Trace", "t1"] in echoed["headers"]


def test_without_network_fetch_does_not_try(net: Net) -> None:
    result = execute_tool(net.session, "fetch", {"url": f"{BASE}/hello"}, network_enabled=False)
    assert (result.ok, result.error_code, result.output) == (
        False,
        ErrorCode.NETWORK_BLOCKED,
        "this run has no network access; use ask_user to request a domain",
    )
    assert net.attempts() == []


def test_invalid_urls_are_refused_without_trying(net: Net) -> None:
    result = net.fetch(url="file:///etc/passwd")
    assert (result.error_code, result.output) == (
        ErrorCode.INVALID_ARGS,
        "fetch: 'file:///etc/passwd' is not an absolute http:// or https:// URL",
    )
    assert net.attempts() == []


def test_curl_in_bash_goes_through_the_proxy_and_is_web_data(net: Net) -> None:
    allowed = execute_tool(
        net.session,
        "bash",
        {"command": f"curl -sS {BASE}/hello"},
        network_enabled=True,
    )
    denied = execute_tool(
        net.session,
        "bash",
        {"command": "curl -sS https://evil.test/hello"},
        network_enabled=True,
    )
    assert (allowed.ok, allowed.output, allowed.provenance) == (
        True,
        "hello from upstream\n",
        "web",
    )
    assert (denied.ok, denied.exit_code, denied.provenance) == (False, 56, "web")
    assert net.verdicts(2) == [("api.allowed.test", "allowed"), ("evil.test", "denied")]


def test_credentials_echoed_by_curl_are_redacted(net: Net) -> None:
    result = execute_tool(
        net.session,
        "bash",
        {"command": f'curl -sS -H "Authorization: Bearer <credential:TOKEN>" {BASE}/echo'},
        credentials={"TOKEN": SECRET},
        network_enabled=True,
    )
    echoed = json.loads(result.output)
    assert ["Authorization", "Bearer <credential:TOKEN>"] in echoed["headers"]
    assert SECRET not in json.dumps(result.to_dict())


def test_an_unreachable_allowed_destination_is_a_retryable_http_error(
    upstream: Upstream,  # noqa: F811
    tmp_path: Path,
    backend_name: str,
) -> None:
    # given port 9 allowed by policy, where the upstream has no listener
    workspace = tmp_path / "ws9"
    workspace.mkdir()
    session = make_backend(backend_name, upstream.resolver()).open(
        SessionSpec(
            workspace=workspace,
            network=NetworkPolicy(allowed_domains=("api.allowed.test",), allowed_ports=(9,)),
        )
    )
    try:
        # when fetched
        result = execute_tool(
            session, "fetch", {"url": "http://api.allowed.test:9/hello"}, network_enabled=True
        )
    finally:
        session.close()
    # then the proxy's "could not connect" comes back as a transient HTTP error
    assert (result.ok, result.error_code, result.retryable) == (
        False,
        ErrorCode.HTTP_ERROR,
        True,
    )
    assert result.output.startswith(
        "http://api.allowed.test:9/hello: the egress proxy could not reach the destination "
        "(error; reason=connect_failed): "
    )


def test_code_with_network_reaches_allowed_hosts_and_is_web_data(net: Net) -> None:
    program = (
        "import urllib.request\n"
        "print(urllib.request.urlopen('https://api.allowed.test/hello').read().decode(), end='')\n"
        "try:\n"
        "    urllib.request.urlopen('https://evil.test/hello')\n"
        "except OSError as exc:\n"
        "    print('refused:', exc)\n"
    )
    result = execute_tool(net.session, "code", {"code": program}, network_enabled=True)
    assert (result.ok, result.provenance) == (True, "web")
    assert result.output == (
        "hello from upstream\nrefused: <urlopen error Tunnel connection failed: 403 evil.test is "
        "not in this run's allowed domains; use ask_user to request it>\n"
    )
    assert net.verdicts(2) == [("api.allowed.test", "allowed"), ("evil.test", "denied")]


def test_code_runs_longer_than_five_seconds_when_network_is_granted(net: Net) -> None:
    # given a program that needs six seconds (past the 5 s limit of a run without network)
    program = "import time\ntime.sleep(6)\nprint('finished')\n"
    # when it runs in a session with network access
    result = execute_tool(net.session, "code", {"code": program}, network_enabled=True)
    # then it was allowed to finish (the limit is 30 s there)
    assert (result.ok, result.timed_out, result.output) == (True, False, "finished\n")
