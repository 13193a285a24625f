"""HTTP heads as the egress proxy reads and writes them: the parsed request, the refusals it
answers with (status, ``X-Motor-Egress`` verdict, the message in the reason phrase) and the
filter over upstream response heads."""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass

from sandbox.egress.framing import BodyFramer
from sandbox.egress.hostnames import printable

#: response header carrying the verdict, e.g. "denied; reason=not_allowlisted"
EGRESS_HEADER = "X-Motor-Egress"
MAX_HEAD_BYTES = 32 * 1024
_REQUEST_LINE = re.compile(r"^([A-Za-z]+) ([^\s]+) HTTP/1\.[01]$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

#: verdict reason -> (HTTP status, kind) of the refusal sent to the client
_REFUSAL_STATUS: dict[str, tuple[int, str]] = {
    "invalid_host": (403, "denied"),
    "no_network": (403, "denied"),
    "not_allowlisted": (403, "denied"),
    "port_not_allowed": (403, "denied"),
    "forbidden_address": (403, "denied"),
    "tunnel_limit": (503, "denied"),
    "byte_limit": (403, "denied"),
    "resolve_failed": (502, "error"),
    "connect_failed": (502, "error"),
    "bad_request": (400, "error"),
    "method_not_allowed": (405, "error"),
}
_STATUS_TEXT = {
    400: "Bad Request",
    403: "Forbidden",
    405: "Method Not Allowed",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


class _BadRequest(Exception):
    def __init__(self, message: str, reason: str = "bad_request") -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


@dataclass(slots=True)
class _Request:
    method: str
    target: str
    headers: list[tuple[str, str]]
    rest: bytes  # bytes read past the end of the header block
    body: BodyFramer | None = None  # plain HTTP: where the one forwarded request ends


def read_request(client: socket.socket, timeout_s: float) -> _Request:
    """Read and parse one request head from `client` (waiting at most `timeout_s` for it). Raises
    _BadRequest naming what is wrong with it."""
    client.settimeout(timeout_s)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            if len(data) > MAX_HEAD_BYTES:
                raise _BadRequest(f"request head is larger than {MAX_HEAD_BYTES} bytes")
            chunk = client.recv(8192)
            if not chunk:
                raise _BadRequest("connection closed before a complete request head")
            data += chunk
    except TimeoutError:
        raise _BadRequest("timed out waiting for the request head") from None
    finally:
        client.settimeout(None)
    head, _, rest = data.partition(b"\r\n\r\n")
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        raise _BadRequest("request head is not valid UTF-8") from None
    request_line, *header_lines = text.split("\r\n")
    match = _REQUEST_LINE.match(request_line)
    if match is None:
        raise _BadRequest(
            f"malformed request line {printable(request_line)!r} "
            "(expected 'METHOD target HTTP/1.1')"
        )
    headers: list[tuple[str, str]] = []
    for line in header_lines:
        if "\r" in line or "\n" in line or "\x00" in line:
            raise _BadRequest("bare CR, LF or NUL inside the request head")
        if line[:1] in {" ", "\t"}:
            raise _BadRequest("folded header lines are not accepted")
        name, sep, value = line.partition(":")
        if not sep or not _HEADER_NAME.match(name):
            raise _BadRequest(f"malformed header line {printable(line, 40)!r}")
        headers.append((name, value.strip()))
    return _Request(match.group(1), match.group(2), headers, rest)


class _ResponseHeadFilter:
    """Drops X-Motor-Egress lines from upstream response heads, so that only the proxy can
    say a request was refused (an upstream must not be able to fake a block), and makes the
    final head say ``Connection: close``: the proxy serves one request per connection."""

    def __init__(self) -> None:
        self._buffer = b""
        self._done = False

    def feed(self, data: bytes) -> bytes | None:
        """Bytes to pass on now, or None if the head grew past MAX_HEAD_BYTES."""
        if self._done:
            return data
        self._buffer += data
        out = b""
        while not self._done:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                return None if len(self._buffer) > MAX_HEAD_BYTES else out
            head, self._buffer = self._buffer[: end + 4], self._buffer[end + 4 :]
            lines = head[:-4].split(b"\r\n")
            status = lines[0].split(b" ")[1] if lines[0].count(b" ") else b""
            # 1xx interim answers (100 Continue) are followed by the real head
            self._done = not (status.startswith(b"1") and status != b"101")
            dropped = {EGRESS_HEADER.lower().encode()}
            if self._done:
                # one request per connection: the client must not try to send another
                dropped |= {b"connection", b"keep-alive", b"proxy-connection"}
            kept = [lines[0]] + [
                line for line in lines[1:] if line.partition(b":")[0].strip().lower() not in dropped
            ]
            if self._done:
                kept.append(b"Connection: close")
            out += b"\r\n".join(kept) + b"\r\n\r\n"
        out, self._buffer = out + self._buffer, b""
        return out

    def flush(self) -> bytes:
        """What is still buffered when the upstream closes (an incomplete head)."""
        rest, self._buffer = self._buffer, b""
        return rest


def _response(status: int, kind: str, reason: str, body: str) -> bytes:
    payload = body.encode("utf-8")
    # The message also rides in the reason phrase: many clients drop a refused CONNECT's body and
    # headers but quote its status line (Python's http.client: "Tunnel connection failed: 403
    # <phrase>"), and that is how the sentence reaches the model from inside the sandbox.
    phrase = body.strip().encode("ascii", "backslashreplace").decode("ascii")
    phrase = "".join(ch for ch in phrase if " " <= ch <= "~")[:300]
    head = (
        f"HTTP/1.1 {status} {phrase or _STATUS_TEXT.get(status, 'Error')}\r\n"
        f"{EGRESS_HEADER}: {kind}; reason={reason}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(payload)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + payload
