"""Which resolved addresses the egress rules refuse, and the host-side connect path."""

from __future__ import annotations

import json

import pytest

from sandbox.egress import (
    EgressDenied,
    connect_checked,
    forbidden_reason,
    is_forbidden_address,
    own_addresses,
    system_resolver,
)
from sandbox.types import NetworkPolicy
from tests.fixtures.upstream import Upstream


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("10.0.0.5", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.254", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("169.254.1.1", "link-local"),
        ("169.254.169.254", "cloud metadata"),
        ("100.100.100.200", "cloud metadata"),
        ("168.63.129.16", "cloud metadata"),
        ("192.0.0.192", "cloud metadata"),
        ("224.0.0.1", "multicast"),
        ("255.255.255.255", "reserved"),
        ("240.0.0.1", "reserved"),
        ("::", "unspecified"),
        ("::1", "loopback"),
        ("fd00::1", "private"),
        ("fc00::1", "private"),
        ("fd00:ec2::254", "cloud metadata"),
        ("fe80::1", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("ff02::1", "multicast"),
        ("::ffff:127.0.0.1", "loopback (embedded IPv4 127.0.0.1)"),
        ("::ffff:169.254.169.254", "cloud metadata (embedded IPv4 169.254.169.254)"),
        ("::127.0.0.1", "loopback (embedded IPv4 127.0.0.1)"),
        ("::ffff:0:10.0.0.1", "private (embedded IPv4 10.0.0.1)"),
        ("64:ff9b::7f00:1", "loopback (embedded IPv4 127.0.0.1)"),
        ("64:ff9b::a9fe:a9fe", "cloud metadata (embedded IPv4 169.254.169.254)"),
        ("2002:7f00:1::1", "loopback (embedded IPv4 127.0.0.1)"),
        ("2002:c0a8:101::1", "private (embedded IPv4 192.168.1.1)"),
        ("2001:0:4136:e378::1", "reserved"),  # Teredo
        ("not-an-ip", "unparseable address"),
        ("0177.0.0.1", "unparseable address"),
    ],
)
def test_forbidden_addresses_name_their_category(address: str, why: str) -> None:
    # when / then
    assert forbidden_reason(address) == why
    assert is_forbidden_address(address) is True


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        "198.51.100.7",
        "2606:4700:4700::1111",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "2002:808:808::1",
    ],
)
def test_public_addresses_are_allowed(address: str) -> None:
    assert forbidden_reason(address) is None


def test_the_hosts_own_addresses_are_forbidden(upstream: Upstream) -> None:
    # given the host side of the test veth, an address of this very machine
    own = own_addresses(refresh=True)

    # then it is known as ours and refused, while the upstream behind it is not
    assert any(str(a) == upstream.host_ip for a in own)
    assert forbidden_reason(upstream.host_ip) == "this host's own"
    assert forbidden_reason(upstream.ip) is None


def test_system_resolver_uses_the_hosts_resolver() -> None:
    # when
    answers = system_resolver("localhost", 443)

    # then
    assert "127.0.0.1" in answers
    assert len(answers) == len(set(answers))


def test_connect_checked_dials_the_checked_address(upstream: Upstream) -> None:
    # given
    dns = upstream.resolver()
    policy = NetworkPolicy(allowed_domains=("api.allowed.test",))

    # when
    sock, decision = connect_checked("api.allowed.test", 80, policy, resolver=dns)
    with sock:
        sock.sendall(b"GET /echo HTTP/1.1\r\nHost: api.allowed.test\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk

    # then
    assert decision.resolved_ip == upstream.ip
    assert sock.family.name == "AF_INET"
    assert json.loads(data.split(b"\r\n\r\n", 1)[1])["client"] == upstream.host_ip
    assert dns.calls == [("api.allowed.test", 80)]


@pytest.mark.parametrize(
    ("host", "answers", "reason"),
    [
        ("evil.test", ["198.51.100.1"], "not_allowlisted"),
        ("api.allowed.test", ["127.0.0.1"], "forbidden_address"),
        ("api.allowed.test", [], "resolve_failed"),
    ],
)
def test_connect_checked_raises_with_the_refusing_decision(
    host: str, answers: list[str], reason: str, upstream: Upstream
) -> None:
    # given
    dns = upstream.resolver(names=(), extra={host: answers})
    policy = NetworkPolicy(allowed_domains=("api.allowed.test",))

    # when
    with pytest.raises(EgressDenied) as caught:
        connect_checked(host, 443, policy, resolver=dns)

    # then
    assert caught.value.decision.reason == reason
    assert caught.value.decision.allowed is False


def test_static_egress_hosts_answer_their_names_and_leave_the_rest_to_dns() -> None:
    from sandbox.egress.addresses import static_hosts, static_resolver

    table = static_hosts(
        " api.agentmail.to=203.0.113.6, Docs.Example.ORG.=203.0.113.6|2001:db8::1 ,"
    )
    assert table == {
        "api.agentmail.to": ["203.0.113.6"],
        "docs.example.org": ["203.0.113.6", "2001:db8::1"],
    }
    asked: list[tuple[str, int]] = []

    def dns(host: str, port: int) -> list[str]:
        asked.append((host, port))
        return ["198.51.100.7"]

    resolve = static_resolver(table, fallback=dns)
    assert resolve("API.agentmail.to.", 80) == ["203.0.113.6"]
    assert resolve("other.to", 443) == ["198.51.100.7"]
    assert asked == [("other.to", 443)]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("api.agentmail.to", "egress host entry 'api.agentmail.to': expected name=address"),
        ("a.to=", "egress host entry 'a.to=': expected name=address"),
        ("a.to=b.to", "egress host entry 'a.to=b.to': 'b.to' is not an IP address"),
    ],
)
def test_a_bad_static_egress_host_entry_is_named(spec: str, message: str) -> None:
    from sandbox.egress.addresses import static_hosts

    with pytest.raises(ValueError) as refused:
        static_hosts(spec)
    assert str(refused.value) == message


def test_a_bad_egress_hosts_setting_stops_the_backend_from_starting(monkeypatch) -> None:
    from sandbox.backends import get_backend
    from sandbox.types import SandboxError

    monkeypatch.setenv("MOTOR_SANDBOX_EGRESS_HOSTS", "api.agentmail.to=nowhere")
    with pytest.raises(SandboxError) as refused:
        get_backend("bwrap")
    assert str(refused.value) == (
        "MOTOR_SANDBOX_EGRESS_HOSTS: egress host entry 'api.agentmail.to=nowhere': 'nowhere' is "
        "not an IP address"
    )
