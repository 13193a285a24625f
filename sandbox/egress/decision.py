"""The one egress decision: canonicalise, match the allowlist, resolve once, check, dial.

Both backends' proxies and the host-side fetch use these functions, so a destination gets the
same verdict however the request arrives (CONNECT, absolute-form HTTP, host-side fetch).
"""

from __future__ import annotations

import functools
import ipaddress
import socket
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
    """A network policy entry that cannot be used; the message names the entry and the rule."""


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


@dataclass(frozen=True, slots=True)
class _CompiledPolicy:
    exact: frozenset[str]
    suffixes: tuple[str, ...]  # ".example.com" for "*.example.com"
    ports: frozenset[int]


def _compile_entry(entry: str) -> tuple[str, bool]:
    """(canonical host or suffix, is_wildcard) for one allowlist entry, or PolicyError."""
    if not isinstance(entry, str) or not entry.strip():
        raise PolicyError(f"allowed domain {entry!r} is empty")
    if entry != entry.strip():
        raise PolicyError(f"allowed domain {entry!r} has surrounding whitespace")
    if entry.startswith("*."):
        rest = entry[2:]
        if "*" in rest:
            raise PolicyError(f"allowed domain {entry!r}: only one leading '*.' is supported")
        try:
            suffix, _ = canonicalize_host(rest, 443)
        except HostRejected as exc:
            raise PolicyError(f"allowed domain {entry!r}: {exc.reason}") from None
        if is_ip_literal(suffix):
            raise PolicyError(f"allowed domain {entry!r}: wildcards never match IP addresses")
        if "." not in suffix:
            raise PolicyError(
                f"allowed domain {entry!r} is too broad: a wildcard needs at least two labels "
                "after '*.' (e.g. '*.example.com')"
            )
        return suffix, True
    if "*" in entry:
        raise PolicyError(
            f"allowed domain {entry!r}: '*' is only allowed as a leading '*.' (e.g. '*.example.com')"
        )
    try:
        if entry.startswith("[") or entry.count(":") == 0:
            host, _ = canonicalize_host(entry, 443)
        else:
            raise PolicyError(
                f"allowed domain {entry!r}: ports belong in allowed_ports; IPv6 needs brackets"
            )
    except HostRejected as exc:
        raise PolicyError(f"allowed domain {entry!r}: {exc.reason}") from None
    return host, False


@functools.lru_cache(maxsize=256)
def _compile(domains: tuple[str, ...], ports: tuple[int, ...]) -> _CompiledPolicy:
    exact: set[str] = set()
    suffixes: list[str] = []
    for entry in domains:
        value, wildcard = _compile_entry(entry)
        if wildcard:
            suffixes.append("." + value)
        else:
            exact.add(value)
    checked_ports: set[int] = set()
    for port in ports:
        try:
            checked_ports.add(canonical_port(port))
        except HostRejected as exc:
            raise PolicyError(f"allowed port {port!r}: {exc.reason}") from None
    return _CompiledPolicy(frozenset(exact), tuple(suffixes), frozenset(checked_ports))


def validate_policy(policy: NetworkPolicy) -> None:
    """Raise PolicyError naming the first unusable entry of `policy`; return None if it is sound."""
    _compile(tuple(policy.allowed_domains), tuple(policy.allowed_ports))
    if policy.max_tunnels < 1:
        raise PolicyError("max_tunnels must be at least 1")
    if policy.max_total_bytes < 1:
        raise PolicyError("max_total_bytes must be at least 1 byte")
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
    listed = host in compiled.exact or (
        not is_ip_literal(host) and any(host.endswith(suffix) for suffix in compiled.suffixes)
    )
    if not listed:
        return Decision(False, "not_allowlisted", host, port, not_allowlisted_message(host))
    if port not in compiled.ports:
        allowed = ", ".join(str(p) for p in sorted(compiled.ports))
        return Decision(
            False,
            "port_not_allowed",
            host,
            port,
            f"port {port} is not allowed for {host} (allowed ports: {allowed}); "
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
