"""Which resolved addresses sandboxed code may never reach, and the resolver seam."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: (host name, port) -> addresses as strings. Injectable so tests can point a name anywhere.
Resolver = Callable[[str, int], list[str]]

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

#: cloud metadata services that are not inside one of the ranges below already
_METADATA = {
    ipaddress.ip_address("169.254.169.254"): "cloud metadata",  # AWS, GCP, Azure, OpenStack
    ipaddress.ip_address("100.100.100.200"): "cloud metadata",  # Alibaba
    ipaddress.ip_address("168.63.129.16"): "cloud metadata",  # Azure wire server (public range)
    ipaddress.ip_address("192.0.0.192"): "cloud metadata",  # Oracle
    ipaddress.ip_address("fd00:ec2::254"): "cloud metadata",  # AWS IPv6
    ipaddress.ip_address("fd20:ce::254"): "cloud metadata",  # GCP IPv6
    ipaddress.ip_address("fd00:c1::a9fe:a9fe"): "cloud metadata",
    ipaddress.ip_address("fd00:42::42"): "cloud metadata",
}

_V4_RANGES: tuple[tuple[ipaddress.IPv4Network, str], ...] = (
    (_V4("0.0.0.0/8"), "unspecified"),
    (_V4("10.0.0.0/8"), "private"),
    (_V4("100.64.0.0/10"), "carrier-grade NAT"),
    (_V4("127.0.0.0/8"), "loopback"),
    (_V4("169.254.0.0/16"), "link-local"),
    (_V4("172.16.0.0/12"), "private"),
    (_V4("192.0.0.0/24"), "reserved"),
    (_V4("192.168.0.0/16"), "private"),
    (_V4("198.18.0.0/15"), "reserved"),
    (_V4("224.0.0.0/4"), "multicast"),
    (_V4("240.0.0.0/4"), "reserved"),  # includes 255.255.255.255 broadcast
)

_V6_RANGES: tuple[tuple[ipaddress.IPv6Network, str], ...] = (
    (_V6("::/128"), "unspecified"),
    (_V6("::1/128"), "loopback"),
    (_V6("::/8"), "reserved"),
    (_V6("64:ff9b:1::/48"), "private"),  # local-use NAT64
    (_V6("100::/64"), "reserved"),  # discard-only
    (_V6("2001::/32"), "reserved"),  # Teredo: the embedded client address is obfuscated
    (_V6("fc00::/7"), "private"),  # unique local
    (_V6("fe80::/10"), "link-local"),
    (_V6("fec0::/10"), "link-local"),  # deprecated site-local
    (_V6("ff00::/8"), "multicast"),
)

_NAT64 = _V6("64:ff9b::/96")
_SIX_TO_FOUR = _V6("2002::/16")
_V4_TRANSLATED = _V6("::ffff:0:0:0/96")
_V4_COMPATIBLE = _V6("::/96")


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, translated, compatible, NAT64,
    6to4), or None."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    packed = int(address)
    if address in _V4_TRANSLATED or address in _NAT64:
        return ipaddress.IPv4Address(packed & 0xFFFFFFFF)
    if address in _V4_COMPATIBLE and packed > 1:
        return ipaddress.IPv4Address(packed & 0xFFFFFFFF)
    if address in _SIX_TO_FOUR:
        return address.sixtofour
    return None


class _OwnAddresses:
    """The addresses of this host's interfaces, re-read at most once per `ttl_s` seconds.

    Read from /proc (fib_trie's LOCAL entries and if_inet6) rather than a subprocess: it is
    cheap, needs no binary and reflects the proxy's own network namespace.
    """

    def __init__(self, ttl_s: float = 1.0) -> None:
        self._ttl_s = ttl_s
        self._lock = threading.Lock()
        self._at = float("-inf")
        self._addresses: frozenset[IPAddress] = frozenset()

    def get(self, *, refresh: bool = False) -> frozenset[IPAddress]:
        now = time.monotonic()
        with self._lock:
            if refresh or now - self._at > self._ttl_s:
                self._addresses = frozenset(_read_own_addresses())
                self._at = now
            return self._addresses


def _read_own_addresses() -> set[IPAddress]:
    found: set[IPAddress] = set()
    try:
        lines = Path("/proc/net/fib_trie").read_text().splitlines()
    except OSError:
        lines = []
    previous = ""
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("/32 host LOCAL") and previous.startswith("|-- "):
            try:
                found.add(ipaddress.IPv4Address(previous[4:]))
            except ValueError:
                pass
        previous = stripped
    try:
        v6_lines = Path("/proc/net/if_inet6").read_text().splitlines()
    except OSError:
        v6_lines = []
    for line in v6_lines:
        raw = line.split()[0] if line.split() else ""
        if len(raw) == 32:
            try:
                found.add(ipaddress.IPv6Address(int(raw, 16)))
            except ValueError:
                pass
    if not found:
        # /proc unavailable: fall back to what the kernel tells us about our host name
        try:
            for info in socket.getaddrinfo(socket.gethostname(), None):
                found.add(ipaddress.ip_address(str(info[4][0]).split("%")[0]))
        except (OSError, ValueError):
            pass
    return found


_own = _OwnAddresses()


def own_addresses(*, refresh: bool = False) -> frozenset[IPAddress]:
    """This host's interface addresses (cached for about a second; `refresh` re-reads now)."""
    return _own.get(refresh=refresh)


def parse_address(value: str | IPAddress) -> IPAddress:
    """A resolved address as an ipaddress object (IPv6 zone IDs dropped). Raises ValueError."""
    if isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return value
    text = value[1:-1] if value.startswith("[") and value.endswith("]") else value
    address = ipaddress.ip_address(text)
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
        address = ipaddress.IPv6Address(text.split("%")[0])
    return address


def forbidden_reason(value: str | IPAddress) -> str | None:
    """Why sandboxed code may not reach this address (e.g. "loopback"), or None if it may.

    Unparseable input is forbidden. IPv6 forms that carry an IPv4 address are judged by it.
    """
    try:
        address = parse_address(value)
    except ValueError:
        return "unparseable address"
    if address in _METADATA:
        return _METADATA[address]
    if isinstance(address, ipaddress.IPv6Address):
        inner = embedded_ipv4(address)
        if inner is not None:
            why = forbidden_reason(inner)
            return f"{why} (embedded IPv4 {inner})" if why else None
        for v6_network, v6_why in _V6_RANGES:
            if address in v6_network:
                return v6_why
    else:
        for v4_network, v4_why in _V4_RANGES:
            if address in v4_network:
                return v4_why
    if address in own_addresses():
        return "this host's own"
    return None


def is_forbidden_address(value: str | IPAddress) -> bool:
    """True when sandboxed code may never connect to this address."""
    return forbidden_reason(value) is not None


def system_resolver(host: str, port: int) -> list[str]:
    """Resolve with the host's resolver (getaddrinfo); addresses in the order it returns them."""
    seen: list[str] = []
    for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        address = str(info[4][0])
        if address not in seen:
            seen.append(address)
    return seen


def static_hosts(spec: str) -> dict[str, list[str]]:
    """Parse ``name=address[|address…],…`` (MOTOR_SANDBOX_EGRESS_HOSTS) into {name: [address]}.

    Names are lowercased; every address must be an IP literal. Raises ValueError naming the
    entry that is wrong. The addresses are still checked by the egress rules when dialled: a
    static entry can point a name somewhere, never open a forbidden range."""
    table: dict[str, list[str]] = {}
    for raw in spec.split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, sep, addresses = entry.partition("=")
        name = name.strip().lower().rstrip(".")
        if not sep or not name or not addresses.strip():
            raise ValueError(f"egress host entry {entry!r}: expected name=address")
        parsed = []
        for address in addresses.split("|"):
            try:
                parsed.append(str(ipaddress.ip_address(address.strip())))
            except ValueError:
                raise ValueError(
                    f"egress host entry {entry!r}: {address.strip()!r} is not an IP address"
                ) from None
        table[name] = parsed
    return table


def static_resolver(table: dict[str, list[str]], fallback: Resolver = system_resolver) -> Resolver:
    """A Resolver answering names of `table` from it and every other name with `fallback`."""

    def resolve(host: str, port: int) -> list[str]:
        found = table.get(host.lower().rstrip("."))
        return list(found) if found is not None else fallback(host, port)

    return resolve
