"""Host canonicalisation: one strict parser that every egress path goes through.

A proxy allowlist is only as good as its host parser. Anything a resolver, a TLS library or an
HTTP client could read differently from us (NUL bytes, `%` escapes, userinfo, odd IPv4 spellings,
zone IDs, invisible code points) is refused here instead of being "cleaned up".
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata

import idna

#: characters that never belong in a host name; each one is a known parser-differential trick
_FORBIDDEN_CHARS = {
    "\x00": "NUL byte",
    "@": "'@' (userinfo)",
    "%": "'%' (percent-escape or IPv6 zone ID)",
    "\\": "backslash",
    "/": "'/'",
    "#": "'#'",
    "?": "'?'",
    " ": "space",
}
#: Unicode categories refused outright: controls, format (zero-width), separators, surrogates,
#: private use and unassigned code points
_FORBIDDEN_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp"}
_LDH_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?$")
#: WHATWG: a host whose last label is a number (decimal, 0x-hex or octal-looking) is an IPv4
#: address; we accept only what `ipaddress` parses and refuse every other numeric spelling
_NUMERIC_LABEL = re.compile(r"^(?:0x[0-9a-f]*|[0-9]+)$")
_PORT = re.compile(r"^[1-9][0-9]{0,4}$")

MAX_LABEL_CHARS = 63
MAX_NAME_CHARS = 253


class HostRejected(ValueError):
    """A host or port that the egress rules refuse to interpret. `reason` says which rule."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def printable(value: str, limit: int = 80) -> str:
    """`value` with control and invisible characters escaped, for messages and reports."""
    shown = value if len(value) <= limit else value[:limit] + "..."
    out = []
    for ch in shown:
        if ch.isprintable() and unicodedata.category(ch) not in _FORBIDDEN_CATEGORIES:
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def canonical_port(port: int | str) -> int:
    """A port as an int in 1..65535; strings must be plain decimal without leading zeros."""
    if isinstance(port, bool):
        raise HostRejected(f"port {port!r} is not a number")
    if isinstance(port, int):
        value = port
    elif isinstance(port, str):
        if not _PORT.match(port):
            raise HostRejected(
                f"port {printable(port)!r} is malformed (decimal digits, no leading zeros)"
            )
        value = int(port)
    else:
        raise HostRejected(f"port {port!r} is not a number")
    if not 1 <= value <= 65535:
        raise HostRejected(f"port {value} is out of range (1-65535)")
    return value


def _check_characters(host: str) -> None:
    for ch in host:
        if ch in _FORBIDDEN_CHARS:
            raise HostRejected(f"host contains {_FORBIDDEN_CHARS[ch]}")
        category = unicodedata.category(ch)
        if category in _FORBIDDEN_CATEGORIES:
            raise HostRejected(
                f"host contains a control, invisible or whitespace character (U+{ord(ch):04X})"
            )


def _canonical_ipv6(inner: str) -> str:
    try:
        address = ipaddress.IPv6Address(inner)
    except ValueError:
        raise HostRejected(f"[{printable(inner)}] is not a valid IPv6 address") from None
    return f"[{address.compressed}]"


def _canonical_label(label: str) -> str:
    if not label:
        raise HostRejected("host has an empty label")
    if label.isascii():
        if label.startswith("xn--"):
            try:
                idna.ulabel(label)
            except (idna.IDNAError, UnicodeError):
                raise HostRejected(f"label {label!r} is not valid punycode") from None
            return label
        if not _LDH_LABEL.match(label):
            raise HostRejected(
                f"label {printable(label)!r} has characters outside letters, digits, '-' and '_' "
                "or starts/ends with '-'"
            )
        return label
    try:
        return idna.alabel(label).decode("ascii")
    except (idna.IDNAError, UnicodeError) as exc:
        raise HostRejected(f"label {printable(label)!r} is not a valid IDNA name: {exc}") from None


def canonicalize_host(host: str, port: int | str) -> tuple[str, int]:
    """Return the canonical (host, port) or raise HostRejected naming the broken rule.

    Canonical hosts are lowercase ASCII (IDNA A-labels), without a trailing dot; IPv4 literals in
    dotted-quad form; IPv6 literals compressed and in brackets (`[2001:db8::1]`).
    """
    canonical_port_value = canonical_port(port)
    if not isinstance(host, str):
        raise HostRejected("host is not a string")
    if not host:
        raise HostRejected("host is empty")
    if len(host) > 1024:
        raise HostRejected("host is longer than any valid name")
    _check_characters(host)

    if host.startswith("[") or host.endswith("]"):
        if not (host.startswith("[") and host.endswith("]")):
            raise HostRejected("unbalanced brackets in host")
        return _canonical_ipv6(host[1:-1]), canonical_port_value
    if ":" in host:
        raise HostRejected("':' in host: IPv6 literals must be in brackets, ports go after them")

    # UTS 46 mapping first: it folds case, full-width digits and ideographic full stops, so a
    # numeric-looking or dotted spelling is judged after the same folding a resolver would do.
    try:
        mapped = idna.uts46_remap(host, std3_rules=False, transitional=False)
    except (idna.IDNAError, UnicodeError) as exc:
        raise HostRejected(f"host is not a valid IDNA name: {exc}") from None
    _check_characters(mapped)
    if ":" in mapped or "[" in mapped or "]" in mapped:
        raise HostRejected("host maps to a string containing ':' or brackets")

    if mapped.endswith("."):
        mapped = mapped[:-1]  # exactly one trailing dot is the root label; two are an error
    labels = mapped.split(".")
    if _NUMERIC_LABEL.match(labels[-1]):
        try:
            return str(ipaddress.IPv4Address(mapped)), canonical_port_value
        except ValueError:
            raise HostRejected(
                f"{printable(host)!r} looks numeric but is not a dotted-quad IPv4 address "
                "(octal, hex, integer and shortened forms are refused)"
            ) from None

    canonical = ".".join(_canonical_label(label) for label in labels)
    for label in canonical.split("."):
        if len(label) > MAX_LABEL_CHARS:
            raise HostRejected(f"label {label[:20]}... is longer than {MAX_LABEL_CHARS} characters")
    if len(canonical) > MAX_NAME_CHARS:
        raise HostRejected(f"host name is longer than {MAX_NAME_CHARS} characters")
    return canonical, canonical_port_value


def split_authority(authority: str, default_port: int | None = None) -> tuple[str, int]:
    """Parse `host:port`, `[v6]:port` (or a bare host when `default_port` is given), canonicalised.

    Refuses more than one ':' outside brackets, an empty or malformed port, and anything
    canonicalize_host refuses.
    """
    if not isinstance(authority, str) or not authority:
        raise HostRejected("authority is empty")
    _check_characters(authority)
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            raise HostRejected("unbalanced brackets in authority")
        host, rest = authority[: close + 1], authority[close + 1 :]
        if rest == "":
            port_text: str | None = None
        elif rest.startswith(":"):
            port_text = rest[1:]
        else:
            raise HostRejected("unexpected characters after the IPv6 literal")
    else:
        if authority.count(":") > 1:
            raise HostRejected("more than one ':' in authority (IPv6 literals need brackets)")
        host, sep, port_part = authority.partition(":")
        port_text = port_part if sep else None
    if port_text is None:
        if default_port is None:
            raise HostRejected("authority has no port")
        return canonicalize_host(host, default_port)
    return canonicalize_host(host, port_text)


def is_ip_literal(canonical_host: str) -> bool:
    """True when a canonical host is an IPv4 or bracketed IPv6 literal."""
    if canonical_host.startswith("["):
        return True
    try:
        ipaddress.IPv4Address(canonical_host)
    except ValueError:
        return False
    return True


def unbracket(canonical_host: str) -> str:
    """The bare address of a canonical IP literal (brackets removed); names are unchanged."""
    if canonical_host.startswith("[") and canonical_host.endswith("]"):
        return canonical_host[1:-1]
    return canonical_host


def format_authority(canonical_host: str, port: int) -> str:
    return f"{canonical_host}:{port}"
