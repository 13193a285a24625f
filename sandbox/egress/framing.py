"""Where a forwarded HTTP/1.1 request ends: its body framing, read strictly.

The egress proxy serves exactly one request per plain-HTTP connection. It forwards the request
head and then exactly the body its framing announces — Content-Length bytes, or a chunked body up
to and including its last chunk and trailers — and drops whatever the client sends after it (a
pipelined or keep-alive second request is never read, so never relayed to the first request's
host). That only holds if the proxy and the upstream agree on where the body ends, so every form
two parsers may read differently is refused before anything is dialled: Content-Length and
Transfer-Encoding together, more than one of either, a Content-Length that is not plain digits,
a Transfer-Encoding other than exactly ``chunked``. Malformed chunked framing found while
relaying ends the connection.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: the longest chunk-size or trailer line accepted (bytes)
MAX_LINE_BYTES = 4096
_CHUNK_SIZE = re.compile(rb"^([0-9A-Fa-f]{1,16})(?:[ \t]*;[\x20-\x7e\t]*)?$")
_TRAILER = re.compile(rb"^[!#$%&'*+.^_`|~0-9A-Za-z-]+:[\x20-\x7e\t\x80-\xff]*$")
_DIGITS = re.compile(r"^[0-9]{1,18}$")


class FramingError(ValueError):
    """A request whose body framing could be read two ways; the message names the rule."""


class BodyFramer:
    """Feed it the bytes a client sends after the request head; it returns the part that belongs
    to the request body and sets `done` once the body is complete (the rest is `dropped`).
    Raises FramingError on malformed chunked framing."""

    def __init__(self, *, length: int | None = None, chunked: bool = False) -> None:
        self._chunked = chunked
        self._left = 0 if chunked else (length or 0)
        self._state = "size" if chunked else "data"
        self._line = b""
        self.dropped = 0
        self.done = not chunked and self._left == 0

    def feed(self, data: bytes) -> bytes:
        """The leading part of `data` that is still body; the remainder is counted in `dropped`."""
        if self.done:
            self.dropped += len(data)
            return b""
        if not self._chunked:
            part = data[: self._left]
            self._left -= len(part)
            self.dropped += len(data) - len(part)
            self.done = self._left == 0
            return part
        used = self._scan_chunked(data)
        self.dropped += len(data) - used
        return data[:used]

    def _scan_chunked(self, data: bytes) -> int:
        """How many bytes of `data` belong to the chunked body (advancing the state)."""
        i = 0
        while i < len(data) and not self.done:
            if self._state == "data":
                take = min(self._left, len(data) - i)
                i += take
                self._left -= take
                if self._left == 0:
                    self._state = "data_end"
                continue
            end = data.find(b"\n", i)
            if end < 0:
                self._line += data[i:]
                i = len(data)
                if len(self._line) > MAX_LINE_BYTES:
                    raise FramingError("a chunked body line is too long")
                break
            line = self._line + data[i : end + 1]
            self._line = b""
            i = end + 1
            if len(line) > MAX_LINE_BYTES:
                raise FramingError("a chunked body line is too long")
            if not line.endswith(b"\r\n") or b"\r" in line[:-2]:
                raise FramingError("a chunked body line does not end with CRLF")
            self._line_done(line[:-2])
        return i

    def _line_done(self, line: bytes) -> None:
        if self._state == "data_end":
            if line:
                raise FramingError("a chunk is longer than its size")
            self._state = "size"
        elif self._state == "size":
            match = _CHUNK_SIZE.match(line)
            if match is None:
                raise FramingError("malformed chunk size line")
            self._left = int(match.group(1), 16)
            self._state = "data" if self._left else "trailer"
        elif self._state == "trailer":
            if not line:
                self.done = True
            elif _TRAILER.match(line) is None:
                raise FramingError("malformed trailer line")


def body_framer(headers: Sequence[tuple[str, str]]) -> BodyFramer:
    """The framer for a request with `headers`, or FramingError naming the ambiguity."""
    lengths = [value for name, value in headers if name.lower() == "content-length"]
    encodings = [value for name, value in headers if name.lower() == "transfer-encoding"]
    if lengths and encodings:
        raise FramingError(
            "conflicting Content-Length / Transfer-Encoding headers: a request may carry one"
        )
    if len(lengths) > 1:
        raise FramingError("more than one Content-Length header")
    if len(encodings) > 1:
        raise FramingError("more than one Transfer-Encoding header")
    if encodings:
        if encodings[0].strip().lower() != "chunked":
            raise FramingError(
                f"Transfer-Encoding {encodings[0]!r} is not accepted (only 'chunked')"
            )
        return BodyFramer(chunked=True)
    if lengths:
        if _DIGITS.match(lengths[0]) is None:
            raise FramingError(f"Content-Length {lengths[0]!r} is not a plain decimal number")
        return BodyFramer(length=int(lengths[0]))
    return BodyFramer(length=0)


__all__ = ["BodyFramer", "FramingError", "body_framer"]
