"""Read the server name (SNI) from the first bytes of a TLS ClientHello, without terminating TLS.

Used to refuse domain fronting on CONNECT tunnels: a tunnel opened to an allowed host must not
carry a TLS session for another name.
"""

from __future__ import annotations

from dataclasses import dataclass

_HANDSHAKE = 22
_CLIENT_HELLO = 1
_SERVER_NAME_EXTENSION = 0
_HOST_NAME = 0
#: a ClientHello larger than this is refused rather than buffered without bound
MAX_CLIENT_HELLO_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class HelloScan:
    """Outcome of scanning a tunnel's first bytes.

    `complete` is False while more bytes are needed. `is_tls` is False for non-TLS traffic.
    `server_name` is the SNI host name (None when the ClientHello carries none).
    `error` is set when the bytes claim to be a ClientHello but are malformed.
    """

    complete: bool
    is_tls: bool = False
    server_name: str | None = None
    error: str | None = None


def _handshake_bytes(data: bytes) -> tuple[bytes, bool]:
    """Concatenated handshake-record payloads in `data`, and whether a record was cut short."""
    out = bytearray()
    offset = 0
    while offset + 5 <= len(data):
        if data[offset] != _HANDSHAKE:
            break
        length = int.from_bytes(data[offset + 3 : offset + 5], "big")
        if offset + 5 + length > len(data):
            out += data[offset + 5 :]
            return bytes(out), True
        out += data[offset + 5 : offset + 5 + length]
        offset += 5 + length
    return bytes(out), offset + 5 > len(data) and offset < len(data)


def scan_client_hello(data: bytes) -> HelloScan:
    """Scan the bytes a client sent first on a tunnel."""
    if not data:
        return HelloScan(complete=False)
    if data[0] != _HANDSHAKE:
        return HelloScan(complete=True, is_tls=False)
    if len(data) > MAX_CLIENT_HELLO_BYTES:
        return HelloScan(complete=True, is_tls=True, error="ClientHello too large")
    handshake, _ = _handshake_bytes(data)
    if len(handshake) < 4:
        return HelloScan(complete=False, is_tls=True)
    if handshake[0] != _CLIENT_HELLO:
        return HelloScan(complete=True, is_tls=True, error="first handshake is not a ClientHello")
    body_length = int.from_bytes(handshake[1:4], "big")
    if len(handshake) < 4 + body_length:
        return HelloScan(complete=False, is_tls=True)
    try:
        name = _server_name(handshake[4 : 4 + body_length])
    except (IndexError, ValueError) as exc:
        return HelloScan(complete=True, is_tls=True, error=f"malformed ClientHello: {exc}")
    return HelloScan(complete=True, is_tls=True, server_name=name)


def _server_name(body: bytes) -> str | None:
    pos = 2 + 32  # legacy_version, random
    session_id_length = body[pos]
    pos += 1 + session_id_length
    cipher_length = int.from_bytes(body[pos : pos + 2], "big")
    pos += 2 + cipher_length
    compression_length = body[pos]
    pos += 1 + compression_length
    if pos == len(body):
        return None  # no extensions at all
    extensions_end = pos + 2 + int.from_bytes(body[pos : pos + 2], "big")
    if extensions_end > len(body):
        raise ValueError("extensions overrun the ClientHello")
    pos += 2
    while pos + 4 <= extensions_end:
        kind = int.from_bytes(body[pos : pos + 2], "big")
        length = int.from_bytes(body[pos + 2 : pos + 4], "big")
        data = body[pos + 4 : pos + 4 + length]
        if len(data) != length:
            raise ValueError("extension overruns the ClientHello")
        pos += 4 + length
        if kind != _SERVER_NAME_EXTENSION:
            continue
        list_length = int.from_bytes(data[0:2], "big")
        entries = data[2 : 2 + list_length]
        names: list[str] = []
        i = 0
        while i + 3 <= len(entries):
            name_type = entries[i]
            name_length = int.from_bytes(entries[i + 1 : i + 3], "big")
            raw = entries[i + 3 : i + 3 + name_length]
            if len(raw) != name_length:
                raise ValueError("server name overruns its list")
            if name_type == _HOST_NAME:
                names.append(raw.decode("ascii"))
            i += 3 + name_length
        if len(names) != 1:
            raise ValueError("ClientHello must carry exactly one host name")
        return names[0]
    return None
