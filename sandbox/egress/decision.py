"""The one egress decision: canonicalise, match the allowlist, resolve once, check, dial.

Both backends' proxies and the host-side fetch use these functions, so a destination gets the
same verdict however the request arrives (CONNECT, absolute-form HTTP, host-side fetch).
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass, replace

from sandbox.egress.addresses import Resolver, forbidden_reason, parse_address, system_resolver
from sandbox.egress.hostnames import (
    HostRejected,
    canonical_port,
    canonicalize_host,
    is_ip_literal,
    printable,
    split_authority,
    unbracket,
)
from sandbox.types import NetworkPolicy


class PolicyError(ValueError):
    """A network policy entry that cannot be used; the message names the entry and the rule.

    `entry` is the offending value (None for a setting that is not an entry) and `rule` a
    stable machine code (see POLICY_RULES)."""

    def __init__(self, message: str, *, entry: object = None, rule: str = "invalid_policy") -> None:
        super().__init__(message)
        self.entry = entry
        self.rule = rule


@dataclass(frozen=True, slots=True)
class Decision:
    """The verdict on one destination.

    `reason` is a stable machine code (see REASONS); `message` is the sentence an LLM sees.
    `resolved_ip` is set once the destination has been resolved and checked.
    """

    allowed: bool
    reason: str
    host: str
    port: int
    message: str = ""
    resolved_ip: str | None = None
    addresses: tuple[str, ...] = ()


#: machine codes a Decision (and a ConnectionReport) may carry
REASONS = frozenset(
    {
        "allowed",
        "invalid_host",
        "no_network",
        "not_allowlisted",
        "port_not_allowed",
        "forbidden_address",
        "resolve_failed",
        "connect_failed",
        "tunnel_limit",
        "byte_limit",
        "idle_timeout",
        "sni_mismatch",
        "bad_request",
        "method_not_allowed",
        "closed",
    }
)


#: machine codes a PolicyError may carry
POLICY_RULES = frozenset(
    {
        "not_text",
        "empty",
        "whitespace",
        "not_a_host",
        "wildcard_form",
        "wildcard_too_broad",
        "wildcard_ip",
        "invalid_host",
        "invalid_port",
        "ipv6_brackets",
        "invalid_policy",
    }
)


@dataclass(frozen=True, slots=True)
class AllowlistEntry:
    """One parsed allowlist entry.

    `host` is canonical; for a wildcard (`*.example.com`) it is the parent (`example.com`) and
    the entry matches strict subdomains only. `port` is None for a bare entry, which is allowed
    on the policy's `allowed_ports` (443 and 80 by default); an entry written `host:port` is
    allowed on that port only.
    """

    host: str
    wildcard: bool = False
    port: int | None = None

    def covers(self, host: str) -> bool:
        """Whether this entry names canonical `host` (whatever the port)."""
        if self.wildcard:
            return not is_ip_literal(host) and host.endswith("." + self.host)
        return host == self.host

    def __str__(self) -> str:
        name = f"*.{self.host}" if self.wildcard else self.host
        return name if self.port is None else f"{name}:{self.port}"


def parse_allowlist_entry(entry: object) -> AllowlistEntry:
    """Parse one allowed-domain entry: `host`, `*.domain`, an IP literal (IPv6 in brackets),
    each optionally followed by `:port`. Raises PolicyError naming the entry and the rule."""
    if not isinstance(entry, str):
        raise PolicyError(f"allowed domain {entry!r} is not text", entry=entry, rule="not_text")
    if not entry.strip():
        raise PolicyError(f"allowed domain {entry!r} is empty", entry=entry, rule="empty")
    if entry != entry.strip():
        raise PolicyError(
            f"allowed domain {entry!r} has surrounding whitespace", entry=entry, rule="whitespace"
        )
    if "/" in entry or "@" in entry:
        raise PolicyError(
            f"allowed domain {entry!r} is not a host name: write the host alone, optionally with "
            "':port' (e.g. 'api.example.com' or 'api.example.com:8443'), not a URL",
            entry=entry,
            rule="not_a_host",
        )
    wildcard = entry.startswith("*.")
    rest, port = _split_entry_port(entry[2:] if wildcard else entry, entry)
    if "*" in rest:
        raise PolicyError(
            f"allowed domain {entry!r}: '*' is only allowed as a leading '*.', and only one "
            "(e.g. '*.example.com')",
            entry=entry,
            rule="wildcard_form",
        )
    try:
        host, _ = canonicalize_host(rest, port or 443)
    except HostRejected as exc:
        raise PolicyError(
            f"allowed domain {entry!r}: {exc.reason}", entry=entry, rule="invalid_host"
        ) from None
    if wildcard and is_ip_literal(host):
        raise PolicyError(
            f"allowed domain {entry!r}: wildcards never match IP addresses",
            entry=entry,
            rule="wildcard_ip",
        )
    if wildcard and "." not in host:
        raise PolicyError(
            f"allowed domain {entry!r} is too broad: a wildcard needs at least two labels "
            "after '*.' (e.g. '*.example.com')",
            entry=entry,
            rule="wildcard_too_broad",
        )
    return AllowlistEntry(host=host, wildcard=wildcard, port=port)


def _split_entry_port(text: str, entry: str) -> tuple[str, int | None]:
    """(name, port or None) of `text`, the host part of `entry` (IPv6 literals in brackets)."""
    if text.startswith("["):
        close = text.find("]")
        name, rest = (text, "") if close < 0 else (text[: close + 1], text[close + 1 :])
        if rest and not rest.startswith(":"):
            raise PolicyError(
                f"allowed domain {entry!r}: unexpected characters after the IPv6 literal",
                entry=entry,
                rule="invalid_host",
            )
        port_text = rest[1:] if rest else None
    elif text.count(":") > 1:
        raise PolicyError(
            f"allowed domain {entry!r}: IPv6 needs brackets (e.g. '[2001:db8::1]:443')",
            entry=entry,
            rule="ipv6_brackets",
        )
    else:
        name, sep, port_part = text.partition(":")
        port_text = port_part if sep else None
    if port_text is None:
        return name, None
    try:
        return name, canonical_port(port_text)
    except HostRejected as exc:
        raise PolicyError(
            f"allowed domain {entry!r}: {exc.reason}", entry=entry, rule="invalid_port"
        ) from None


def validate_domains(domains: Sequence[object]) -> list[AllowlistEntry]:
    """Parse every allowed-domain entry the way the egress proxy will; raise PolicyError for
    the first that it would refuse (the Django side calls this before it creates a run or saves
    a policy, so a bad entry is refused up front, never at session start)."""
    if isinstance(domains, str) or not isinstance(domains, Sequence):
        raise PolicyError("allowed domains must be a list of entries", rule="not_text")
    return [parse_allowlist_entry(entry) for entry in domains]


@dataclass(frozen=True, slots=True)
class _CompiledPolicy:
    entries: tuple[AllowlistEntry, ...]
    ports: frozenset[int]  # the ports of entries without their own


@functools.lru_cache(maxsize=256)
def _compile(domains: tuple[str, ...], ports: tuple[int, ...]) -> _CompiledPolicy:
    checked_ports: set[int] = set()
    for port in ports:
        try:
            checked_ports.add(canonical_port(port))
        except HostRejected as exc:
            raise PolicyError(
                f"allowed port {port!r}: {exc.reason}", entry=port, rule="invalid_port"
            ) from None
    return _CompiledPolicy(tuple(validate_domains(domains)), frozenset(checked_ports))


def validate_policy(policy: NetworkPolicy) -> None:
    """Raise PolicyError naming the first unusable entry of `policy`; return None if it is sound."""
    _compile(tuple(policy.allowed_domains), tuple(policy.allowed_ports))
    if policy.max_tunnels < 1:
        raise PolicyError("max_tunnels must be at least 1", entry=policy.max_tunnels)
    if policy.max_total_bytes < 1:
        raise PolicyError("max_total_bytes must be at least 1 byte", entry=policy.max_total_bytes)
    if policy.connect_timeout_s <= 0 or policy.idle_timeout_s <= 0:
        raise PolicyError("connect_timeout_s and idle_timeout_s must be positive seconds")


def not_allowlisted_message(host: str) -> str:
    return f"{host} is not in this run's allowed domains; use ask_user to request it"


def decide(host: str, port: int | str, policy: NetworkPolicy) -> Decision:
    """Judge a destination against `policy` WITHOUT any DNS lookup.

    `host` may be raw (as the client sent it); it is canonicalised first and refused when it
    cannot be read unambiguously. IP literals pass only when listed literally; `*.domain`
    matches strict subdomains only. An invalid policy raises PolicyError.
    """
    compiled = _compile(tuple(policy.allowed_domains), tuple(policy.allowed_ports))
    try:
        canonical, canonical_port_value = canonicalize_host(host, port)
    except HostRejected as exc:
        shown = printable(host) if isinstance(host, str) else repr(host)
        safe_port = port if isinstance(port, int) and not isinstance(port, bool) else 0
        return Decision(
            False,
            "invalid_host",
            shown,
            safe_port,
            f"refused destination {shown!r}: {exc.reason}",
        )
    return _match(compiled, canonical, canonical_port_value, bool(policy.allowed_domains))


def decide_authority(
    authority: str, policy: NetworkPolicy, default_port: int | None = None
) -> Decision:
    """decide() for a `host:port` authority as it appears in a CONNECT line or a URL."""
    compiled = _compile(tuple(policy.allowed_domains), tuple(policy.allowed_ports))
    try:
        canonical, port = split_authority(authority, default_port)
    except HostRejected as exc:
        shown = printable(authority)
        return Decision(
            False, "invalid_host", shown, 0, f"refused destination {shown!r}: {exc.reason}"
        )
    return _match(compiled, canonical, port, bool(policy.allowed_domains))


def _match(compiled: _CompiledPolicy, host: str, port: int, enabled: bool) -> Decision:
    if not enabled:
        return Decision(
            False,
            "no_network",
            host,
            port,
            f"this run has no network access, so {host} cannot be reached; "
            "use ask_user to request it",
        )
    naming = [entry for entry in compiled.entries if entry.covers(host)]
    if not naming:
        return Decision(False, "not_allowlisted", host, port, not_allowlisted_message(host))
    allowed_ports = {compiled_port for entry in naming if (compiled_port := entry.port)}
    if any(entry.port is None for entry in naming):
        allowed_ports |= compiled.ports
    if port not in allowed_ports:
        shown = ", ".join(str(p) for p in sorted(allowed_ports))
        return Decision(
            False,
            "port_not_allowed",
            host,
            port,
            f"port {port} is not allowed for {host} (allowed ports: {shown}); "
            "use ask_user to request it",
        )
    return Decision(True, "allowed", host, port, f"{host}:{port} is allowed")


def resolve_checked(decision: Decision, resolver: Resolver | None = None) -> Decision:
    """Resolve an allowed decision ONCE and refuse if any address is forbidden.

    Returns a Decision whose `addresses` are the checked addresses to dial (never the name).
    A denied decision is returned unchanged and never reaches the resolver.
    """
    if not decision.allowed:
        return decision
    if is_ip_literal(decision.host):
        answers = [unbracket(decision.host)]
    else:
        try:
            answers = list((resolver or system_resolver)(decision.host, decision.port))
        except (OSError, UnicodeError, ValueError) as exc:
            return replace(
                decision,
                allowed=False,
                reason="resolve_failed",
                message=f"{decision.host} could not be resolved ({type(exc).__name__})",
            )
    if not answers:
        return replace(
            decision,
            allowed=False,
            reason="resolve_failed",
            message=f"{decision.host} has no addresses",
        )
    checked: list[str] = []
    for answer in answers:
        why = forbidden_reason(answer)
        if why is not None:
            return replace(
                decision,
                allowed=False,
                reason="forbidden_address",
                resolved_ip=printable(str(answer)),
                message=(
                    f"{decision.host} resolves to {printable(str(answer))}, a {why} address "
                    "that sandboxed code may not reach"
                ),
            )
        address = parse_address(answer)
        if address.compressed not in checked:
            checked.append(address.compressed)
    return replace(decision, addresses=tuple(checked), resolved_ip=checked[0])


def dial(decision: Decision, timeout_s: float) -> tuple[socket.socket, str]:
    """Connect to the first reachable checked address of a resolved decision.

    Only addresses in `decision.addresses` are dialled, each as an IP: the name is never resolved
    again (which is what defeats DNS rebinding). Raises OSError if none answers.
    """
    if not decision.allowed or not decision.addresses:
        raise ValueError("dial() needs an allowed decision returned by resolve_checked()")
    last: OSError | None = None
    for address in decision.addresses:
        family = (
            socket.AF_INET6
            if isinstance(ipaddress.ip_address(address), ipaddress.IPv6Address)
            else socket.AF_INET
        )
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.connect((address, decision.port))
        except OSError as exc:
            sock.close()
            last = exc
            continue
        sock.settimeout(None)
        return sock, address
    assert last is not None
    raise last


class EgressDenied(Exception):
    """Raised by connect_checked when the destination is refused or unreachable."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.message)
        self.decision = decision


def connect_checked(
    host: str,
    port: int | str,
    policy: NetworkPolicy,
    *,
    resolver: Resolver | None = None,
    timeout_s: float | None = None,
) -> tuple[socket.socket, Decision]:
    """decide → resolve once → check → dial the checked address, for host-side callers.

    Returns the connected socket and the final Decision (with `resolved_ip` = the dialled
    address). Raises EgressDenied carrying the refusing Decision otherwise.
    """
    decision = resolve_checked(decide(host, port, policy), resolver)
    if not decision.allowed:
        raise EgressDenied(decision)
    try:
        sock, address = dial(decision, timeout_s or policy.connect_timeout_s)
    except OSError as exc:
        raise EgressDenied(
            replace(
                decision,
                allowed=False,
                reason="connect_failed",
                message=f"could not connect to {decision.host}:{decision.port} "
                f"({type(exc).__name__})",
            )
        ) from None
    return sock, replace(decision, resolved_ip=address)
