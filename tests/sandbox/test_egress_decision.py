"""The egress decision without sockets: host canonicalisation, allowlist matching, policy checks."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox.egress import (
    POLICY_RULES,
    AllowlistEntry,
    Decision,
    HostRejected,
    PolicyError,
    canonicalize_host,
    decide,
    decide_authority,
    resolve_checked,
    split_authority,
    validate_domains,
    validate_policy,
)
from sandbox.types import NetworkPolicy
from tests.fixtures.upstream import FakeDNS

POLICY = NetworkPolicy(
    allowed_domains=("api.ok.test", "*.wild.test", "bücher.test", "198.51.100.7")
)


# ------------------------------------------------------------------------- canonicalize_host


@pytest.mark.parametrize(
    ("host", "port", "expected"),
    [
        ("api.ok.test", 443, ("api.ok.test", 443)),
        ("API.Ok.TEST", "443", ("api.ok.test", 443)),
        ("api.ok.test.", 80, ("api.ok.test", 80)),  # exactly one trailing dot is stripped
        ("bücher.test", 443, ("xn--bcher-kva.test", 443)),  # unicode in, punycode out
        ("XN--BCHER-KVA.test", 443, ("xn--bcher-kva.test", 443)),  # punycode stays punycode
        ("аpi.ok.test", 443, ("xn--pi-6kc.ok.test", 443)),  # Cyrillic а: a different name
        ("under_score.ok.test", 443, ("under_score.ok.test", 443)),
        ("198.51.100.7", 443, ("198.51.100.7", 443)),
        ("[2001:DB8:0:0::1]", 443, ("[2001:db8::1]", 443)),
        ("[::ffff:127.0.0.1]", 443, ("[::ffff:7f00:1]", 443)),
        ("１２７。０．０．１", 443, ("127.0.0.1", 443)),  # full-width folds to an IP literal
        ("a" * 63 + ".test", 443, ("a" * 63 + ".test", 443)),
    ],
)
def test_canonicalize_host_accepts_and_normalises(
    host: str, port: int | str, expected: tuple[str, int]
) -> None:
    # when / then
    assert canonicalize_host(host, port) == expected


@pytest.mark.parametrize(
    ("host", "port", "rule"),
    [
        ("evil.test\x00.ok.test", 443, "NUL byte"),
        ("evil.test%00.ok.test", 443, "'%'"),
        ("ok.test@evil.test", 443, "'@'"),
        ("evil.test\\.ok.test", 443, "backslash"),
        ("evil.test/.ok.test", 443, "'/'"),
        ("evil.test#.ok.test", 443, "'#'"),
        ("evil .test", 443, "space"),
        ("evil\t.test", 443, "control"),
        ("evil\r\n.test", 443, "control"),
        ("ev\u200bil.test", 443, "invisible"),  # zero-width space would silently vanish in IDNA
        ("evil.test:443.ok.test", 443, "IPv6 literals must be in brackets"),
        ("::1", 443, "IPv6 literals must be in brackets"),
        ("[fe80::1%eth0]", 443, "'%'"),  # zone IDs refused
        ("[::1", 443, "unbalanced brackets"),
        ("[not-v6]", 443, "not a valid IPv6 address"),
        ("api.ok.test..", 443, "empty label"),  # two trailing dots
        ("api..ok.test", 443, "empty label"),
        (".ok.test", 443, "empty label"),
        ("", 443, "empty"),
        ("a" * 64 + ".test", 443, "longer than 63"),
        (".".join(["a" * 60] * 5), 443, "longer than 253"),
        ("-lead.test", 443, "starts/ends with '-'"),
        ("xn--zz.test", 443, "not valid punycode"),
        ("0177.0.0.1", 443, "looks numeric"),  # octal
        ("0x7f.0.0.1", 443, "looks numeric"),  # hex
        ("0x7f.1", 443, "looks numeric"),
        ("2130706433", 443, "looks numeric"),  # integer
        ("127.1", 443, "looks numeric"),  # short form
        ("1.2.3.4.5", 443, "looks numeric"),
        ("api.ok.test", 0, "out of range"),
        ("api.ok.test", 65536, "out of range"),
        ("api.ok.test", "0443", "malformed"),
        ("api.ok.test", "44a", "malformed"),
        ("api.ok.test", "", "malformed"),
        ("api.ok.test", "+443", "malformed"),
    ],
)
def test_canonicalize_host_refuses_ambiguous_input_naming_the_rule(
    host: str, port: int | str, rule: str
) -> None:
    # when
    with pytest.raises(HostRejected) as caught:
        canonicalize_host(host, port)

    # then
    assert rule in caught.value.reason


def test_trailing_dot_form_of_an_ip_is_the_same_ip() -> None:
    # given an IPv4 literal with one trailing dot, when canonicalised, then it is the bare IP
    assert canonicalize_host("127.0.0.1.", 443) == ("127.0.0.1", 443)


@pytest.mark.parametrize(
    ("authority", "expected"),
    [
        ("api.ok.test:443", ("api.ok.test", 443)),
        ("[2001:db8::1]:8443", ("[2001:db8::1]", 8443)),
    ],
)
def test_split_authority_reads_host_and_port(authority: str, expected: tuple[str, int]) -> None:
    assert split_authority(authority) == expected


@pytest.mark.parametrize(
    ("authority", "rule"),
    [
        ("api.ok.test", "no port"),
        ("api.ok.test:", "malformed"),
        ("evil.test:443.ok.test:443", "more than one ':'"),
        ("2001:db8::1:443", "more than one ':'"),
        ("[2001:db8::1]443", "unexpected characters"),
        ("[2001:db8::1", "unbalanced"),
    ],
)
def test_split_authority_refuses_malformed_authorities(authority: str, rule: str) -> None:
    with pytest.raises(HostRejected) as caught:
        split_authority(authority)
    assert rule in caught.value.reason


# ---------------------------------------------------------------------------------- decide


@pytest.mark.parametrize(
    ("host", "port"),
    [
        ("api.ok.test", 443),
        ("API.OK.TEST.", 80),
        ("a.wild.test", 443),
        ("deep.er.wild.test", 443),
        ("bücher.test", 443),
        ("xn--bcher-kva.test", 443),
        ("198.51.100.7", 443),
    ],
)
def test_decide_allows_listed_hosts_on_allowed_ports(host: str, port: int) -> None:
    # when
    decision = decide(host, port, POLICY)

    # then
    assert decision.allowed is True
    assert decision.reason == "allowed"


@pytest.mark.parametrize(
    ("host", "port", "reason"),
    [
        ("evil.test", 443, "not_allowlisted"),
        ("wild.test", 443, "not_allowlisted"),  # *.wild.test is strict subdomains only
        ("ok.test", 443, "not_allowlisted"),
        ("api.ok.test.evil.test", 443, "not_allowlisted"),
        ("evilwild.test", 443, "not_allowlisted"),
        ("аpi.ok.test", 443, "not_allowlisted"),  # homograph of a listed name
        ("xn--pi-6kc.ok.test", 443, "not_allowlisted"),
        ("198.51.100.8", 443, "not_allowlisted"),  # IPs only when listed literally
        ("[::ffff:198.51.100.7]", 443, "not_allowlisted"),  # another spelling is another entry
        ("api.ok.test", 22, "port_not_allowed"),
        ("api.ok.test", 8443, "port_not_allowed"),
        ("0x7f.1", 443, "invalid_host"),
        ("evil.test\x00.api.ok.test", 443, "invalid_host"),
        ("api.ok.test..", 443, "invalid_host"),
    ],
)
def test_decide_refuses_with_a_reason(host: str, port: int, reason: str) -> None:
    # when
    decision = decide(host, port, POLICY)

    # then
    assert decision.allowed is False
    assert decision.reason == reason


def test_denied_message_tells_the_model_what_to_do() -> None:
    # when
    decision = decide("Evil.TEST", 443, POLICY)

    # then
    assert decision == Decision(
        allowed=False,
        reason="not_allowlisted",
        host="evil.test",
        port=443,
        message="evil.test is not in this run's allowed domains; use ask_user to request it",
    )


def test_invalid_host_message_escapes_control_characters() -> None:
    # when
    decision = decide("evil\x00.test", 443, POLICY)

    # then the NUL is shown escaped, never raw
    assert decision.host == "evil\\x00.test"
    assert "\x00" not in decision.message
    assert "NUL byte" in decision.message


def test_an_empty_policy_means_no_network() -> None:
    # when
    decision = decide("api.ok.test", 443, NetworkPolicy())

    # then
    assert (decision.allowed, decision.reason) == (False, "no_network")
    assert "use ask_user to request it" in decision.message


def test_policy_ports_replace_the_defaults() -> None:
    # given
    policy = NetworkPolicy(allowed_domains=("api.ok.test",), allowed_ports=(8443,))

    # when / then
    assert decide("api.ok.test", 8443, policy).allowed is True
    assert decide("api.ok.test", 443, policy).reason == "port_not_allowed"


def test_a_denied_decision_never_reaches_the_resolver() -> None:
    # given
    dns = FakeDNS(records={"evil.test": "198.51.100.1"})

    # when
    result = resolve_checked(decide("evil.test", 443, POLICY), dns)

    # then
    assert result.reason == "not_allowlisted"
    assert dns.calls == []


def test_an_ip_literal_is_checked_without_a_lookup() -> None:
    # given
    dns = FakeDNS()

    # when
    result = resolve_checked(decide("198.51.100.7", 443, POLICY), dns)

    # then
    assert (result.allowed, result.addresses, dns.calls) == (True, ("198.51.100.7",), [])


# --------------------------------------------------------------------------- policy checks


@pytest.mark.parametrize(
    ("entry", "rule", "text"),
    [
        ("*", "wildcard_form", "only allowed as a leading"),
        ("*:443", "wildcard_form", "only allowed as a leading"),
        ("*.test", "wildcard_too_broad", "too broad"),
        ("*.com", "wildcard_too_broad", "too broad"),
        ("*example.com", "wildcard_form", "only allowed as a leading"),
        ("api.*.example.com", "wildcard_form", "only allowed as a leading"),
        ("*.*.example.com", "wildcard_form", "only one"),
        ("*.198.51.100.7", "wildcard_ip", "wildcards never match IP"),
        ("*.[2001:db8::1]", "wildcard_ip", "wildcards never match IP"),
        ("0177.0.0.1", "invalid_host", "looks numeric"),
        ("api.example.com:0", "invalid_port", "malformed"),
        ("api.example.com:65536", "invalid_port", "out of range"),
        ("api.example.com:08443", "invalid_port", "malformed"),
        ("api.example.com:", "invalid_port", "malformed"),
        ("api.example.com:https", "invalid_port", "malformed"),
        ("[2001:db8::1]x", "invalid_host", "after the IPv6 literal"),
        ("https://api.example.com/path", "not_a_host", "not a URL"),
        ("user@api.example.com", "not_a_host", "not a host name"),
        ("2001:db8::1", "ipv6_brackets", "IPv6 needs brackets"),
        ("evil\x00.com", "invalid_host", "NUL byte"),
        (" api.example.com", "whitespace", "whitespace"),
        ("", "empty", "empty"),
    ],
)
def test_validate_policy_refuses_unusable_entries(entry: str, rule: str, text: str) -> None:
    # when
    with pytest.raises(PolicyError) as caught:
        validate_policy(NetworkPolicy(allowed_domains=("api.ok.test", entry)))

    # then the error names the entry and the rule, in words and as a code
    assert text in str(caught.value)
    assert repr(entry) in str(caught.value)
    assert (caught.value.entry, caught.value.rule) == (entry, rule)
    assert rule in POLICY_RULES


@pytest.mark.parametrize(
    ("entry", "parsed", "shown"),
    [
        ("ok.test:8443", AllowlistEntry("ok.test", port=8443), "ok.test:8443"),
        ("OK.Test.:8443", AllowlistEntry("ok.test", port=8443), "ok.test:8443"),
        ("*.ok.test:8443", AllowlistEntry("ok.test", wildcard=True, port=8443), "*.ok.test:8443"),
        ("[2001:db8::1]:8443", AllowlistEntry("[2001:db8::1]", port=8443), "[2001:db8::1]:8443"),
        ("198.51.100.7:8080", AllowlistEntry("198.51.100.7", port=8080), "198.51.100.7:8080"),
        ("ok.test", AllowlistEntry("ok.test"), "ok.test"),
    ],
)
def test_entries_with_a_port_are_parsed(entry: str, parsed: AllowlistEntry, shown: str) -> None:
    # when parsed, then the canonical host, the wildcard flag and the port are kept
    assert validate_domains([entry]) == [parsed]
    assert str(parsed) == shown


def test_a_host_port_entry_allows_that_port_only_and_a_bare_host_keeps_the_policy_ports() -> None:
    # given one host listed with a port, one bare, one wildcard with a port
    policy = NetworkPolicy(
        allowed_domains=("ok.test:8443", "api.ok.test", "*.wild.test:8080"),
        allowed_ports=(443, 80),
    )
    # when / then the port-scoped entry allows its port and nothing else
    assert decide("ok.test", 8443, policy).allowed is True
    for port in (443, 80, 8080):
        refused = decide("ok.test", port, policy)
        assert (refused.reason, refused.message) == (
            "port_not_allowed",
            f"port {port} is not allowed for ok.test (allowed ports: 8443); "
            "use ask_user to request it",
        )
    # and the bare entry keeps 443 and 80, not the other entry's port
    assert decide("api.ok.test", 443, policy).allowed is True
    assert decide("api.ok.test", 80, policy).allowed is True
    assert decide("api.ok.test", 8443, policy).reason == "port_not_allowed"
    # and the wildcard's port applies to its strict subdomains only
    assert decide_authority("a.wild.test:8080", policy).allowed is True
    assert decide_authority("a.wild.test:443", policy).reason == "port_not_allowed"
    assert decide_authority("wild.test:8080", policy).reason == "not_allowlisted"


def test_a_host_listed_bare_and_with_a_port_gets_both() -> None:
    policy = NetworkPolicy(allowed_domains=("ok.test", "ok.test:8443"))
    assert [decide("ok.test", p, policy).allowed for p in (443, 80, 8443, 8080)] == [
        True,
        True,
        True,
        False,
    ]


def test_validate_domains_refuses_a_string_in_place_of_a_list() -> None:
    with pytest.raises(PolicyError, match="must be a list") as caught:
        validate_domains("ok.test")  # type: ignore[arg-type]
    assert caught.value.rule == "not_text"


@pytest.mark.parametrize("port", [0, 65536, -1])
def test_validate_policy_refuses_bad_ports(port: int) -> None:
    with pytest.raises(PolicyError, match="allowed port"):
        validate_policy(NetworkPolicy(allowed_domains=("api.example.com",), allowed_ports=(port,)))


def test_decide_raises_for_an_unusable_policy() -> None:
    with pytest.raises(PolicyError, match="too broad"):
        decide("example.com", 443, NetworkPolicy(allowed_domains=("*.com",)))


# ------------------------------------------------------------------------- property tests

HOSTISH = st.text(
    alphabet=st.sampled_from(
        list("abcxyz019-_.:[]@%\\/#? \x00\t\r\nАаßü。．０xX") + ["\u200b", "\ufeff", "\u0301"]
    ),
    max_size=40,
)


@settings(max_examples=600, deadline=None)
@given(host=HOSTISH | st.text(max_size=30), port=st.integers(-5, 70000) | st.text(max_size=6))
def test_canonical_hosts_are_plain_idempotent_and_unambiguous(host: str, port: int | str) -> None:
    # when
    try:
        canonical, canonical_port = canonicalize_host(host, port)
    except HostRejected:
        return  # refusing is always safe; any other exception fails the test

    # then the output is lowercase ASCII with nothing a resolver could read differently,
    assert canonical.isascii() and canonical == canonical.lower()
    assert not set(canonical) & set("\x00@%\\/#? \t\r\n")
    assert 1 <= canonical_port <= 65535
    # canonicalising again changes nothing,
    assert canonicalize_host(canonical, canonical_port) == (canonical, canonical_port)
    # and IP literals are exactly what ipaddress reads (names never look numeric)
    if canonical.startswith("["):
        assert f"[{ipaddress.IPv6Address(canonical[1:-1]).compressed}]" == canonical
    elif canonical.rsplit(".", 1)[-1].isdigit():
        assert str(ipaddress.IPv4Address(canonical)) == canonical
    else:
        assert ":" not in canonical and len(canonical) <= 253


@settings(max_examples=300, deadline=None)
@given(host=HOSTISH, port=st.integers(-5, 70000))
def test_decide_never_raises_and_never_allows_an_unlisted_host(host: str, port: int) -> None:
    # when
    decision = decide(host, port, POLICY)

    # then
    if decision.allowed:
        assert decision.host in {"api.ok.test", "xn--bcher-kva.test", "198.51.100.7"} or (
            decision.host.endswith(".wild.test")
        )


def test_a_bracketed_ipv6_entry_matches_any_spelling_of_that_address() -> None:
    # given
    policy = NetworkPolicy(allowed_domains=("[2001:db8::1]",))

    # when / then
    assert decide("[2001:0DB8:0:0:0:0:0:1]", 443, policy).allowed is True
    assert decide("[2001:db8::2]", 443, policy).reason == "not_allowlisted"
    assert decide("2001:db8::1", 443, policy).reason == "invalid_host"
