"""A lean HTTP/1.1 transport under the `openai` client: one keep-alive connection per thread.

The client keeps everything of its own (retries with backoff, timeouts, error mapping, auth
headers, response decoding); only the connection pool underneath is replaced. httpcore's pool
and h11 state machine cost about 0.4 ms of CPU and 13 system calls per request against a local
server; this transport (about 0.15 ms and 5.6 calls) writes the request in one send, parses the
status line and headers itself and reads the body (Content-Length, chunked, or up to the
close) in as few receives as the answer allows.

Each thread keeps its own connection per origin, so no lock is taken per request. A connection
that has sat idle longer than the keep-alive expiry (5 s, as the default pool), or that the
server has closed meanwhile, is replaced before use; when a reused connection fails before any
byte of the answer arrived (the server closed it as the request went out), the request is sent
once more on a fresh connection — never otherwise, and never after a timeout.

The whole answer is read before `handle_request` returns (a chat completion is a few kilobytes;
the runtime does not stream), and it is handed to httpx2 as the raw body: httpx2 undoes any
gzip/deflate/br content-encoding, as it does for the default transport.

Proxies are not spoken here: when HTTP_PROXY / HTTPS_PROXY / ALL_PROXY (minus NO_PROXY) applies
to a request's URL, as httpx2's default client reads them, the request goes through httpx2's
default transport for that proxy instead.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import ssl
import threading
import time
import weakref
from typing import Any

import httpx2
from openai._constants import DEFAULT_CONNECTION_LIMITS

# The keep-alive expiry of openai's default pool (httpx2's Limits default).
KEEPALIVE_EXPIRY = 5.0
_MAX_HEAD = 64 * 1024
_RECV = 65536
_NO_BODY_STATUS = frozenset({204, 304})
# (scheme, host, port) of a request's URL: one connection per thread for each.
_Origin = tuple[bytes, bytes, int]

# Bumped in a forked child: connections inherited from the parent are not the child's to use.
_generation = 0


def _forked() -> None:
    global _generation
    _generation += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


class _Stale(Exception):
    """The connection failed before any byte of the answer: `error` unless it was reused."""

    def __init__(self, error: httpx2.HTTPError) -> None:
        super().__init__(str(error))
        self.error = error


class _Connection:
    __slots__ = ("__weakref__", "buffer", "generation", "idle_since", "served", "sock", "timeout")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.generation = _generation
        self.idle_since = time.monotonic()
        self.served = 0
        self.timeout = sock.gettimeout()

    def set_timeout(self, value: float | None) -> None:
        # Setting a socket's timeout is a system call: only when it changes.
        if value != self.timeout:
            self.sock.settimeout(value)
            self.timeout = value

    def usable(self, expiry: float | None) -> bool:
        """Whether the connection may carry the next request: this process's, not expired,
        and with nothing to read (a readable idle connection has been closed by the server)."""
        if self.generation != _generation or self.sock.fileno() < 0:
            return False
        if expiry is not None and time.monotonic() - self.idle_since > expiry:
            return False
        if self.buffer or (isinstance(self.sock, ssl.SSLSocket) and self.sock.pending()):
            return False
        poll = select.poll()
        poll.register(self.sock, select.POLLIN)
        return not poll.poll(0)

    def close(self) -> None:
        if self.generation != _generation:
            # Inherited across a fork: close this process's descriptor without a TLS
            # close_notify or shutdown, which would end the parent's connection too.
            try:
                os.close(self.sock.detach())
            except OSError:
                pass
            return
        try:
            self.sock.close()
        except OSError:
            pass

    def __del__(self) -> None:
        # A thread's connections go with the thread (its thread-local dict is dropped).
        # At interpreter exit the module's globals may already be gone.
        with contextlib.suppress(Exception):
            self.close()


class LeanTransport(httpx2.BaseTransport):
    """An httpx2 transport keeping one persistent HTTP/1.1 connection per thread and origin.

    `verify`, `cert` and `trust_env` mean what they mean for httpx2's default client (with
    `trust_env`, SSL_CERT_FILE / SSL_CERT_DIR choose the trusted certificates, and a proxy from
    the environment sends the request through httpx2's own proxy transport). Errors are
    httpx2's: ConnectError / ConnectTimeout, ReadTimeout / WriteTimeout, ReadError /
    WriteError, RemoteProtocolError, so the openai client maps and retries them as usual.
    """

    def __init__(
        self,
        *,
        verify: ssl.SSLContext | str | bool = True,
        cert: Any = None,
        trust_env: bool = True,
        keepalive_expiry: float | None = KEEPALIVE_EXPIRY,
    ) -> None:
        self._ssl_context = httpx2.create_ssl_context(verify=verify, cert=cert, trust_env=trust_env)
        self._ssl_context.set_alpn_protocols(["http/1.1"])
        self._tls = (verify, cert, trust_env)
        # As httpx2.Client reads the environment: once, when it is made.
        self._proxy_mounts = _environment_proxies() if trust_env else {}
        # Per origin: the proxy transport that carries its requests, or None (direct).
        self._via: dict[_Origin, httpx2.BaseTransport | None] = {}
        self._via_lock = threading.Lock()
        self._keepalive_expiry = keepalive_expiry
        self._local = threading.local()
        self._open: weakref.WeakSet[_Connection] = weakref.WeakSet()
        self._open_lock = threading.Lock()

    # --- connections ---------------------------------------------------------------------------

    def _connections(self) -> dict[_Origin, _Connection]:
        try:
            return self._local.connections
        except AttributeError:
            self._local.connections = connections = {}
            return connections

    def _connect(self, request: httpx2.Request, timeouts: dict[str, Any]) -> _Connection:
        url = request.url
        https = url.raw_scheme == b"https"
        host = url.host
        port = url.port or (443 if https else 80)
        connect_timeout = timeouts.get("connect")
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout)
        except TimeoutError as exc:
            raise httpx2.ConnectTimeout(str(exc) or "connect timed out") from exc
        except OSError as exc:
            raise httpx2.ConnectError(str(exc)) from exc
        # The request goes out in one write; without this, a request longer than a segment
        # would hold its tail until the server's delayed ACK of the head (about 40 ms).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if https:
            sni = request.extensions.get("sni_hostname") or host
            try:
                sock = self._ssl_context.wrap_socket(sock, server_hostname=sni)
            except TimeoutError as exc:
                sock.close()
                raise httpx2.ConnectTimeout(str(exc) or "TLS handshake timed out") from exc
            except OSError as exc:  # ssl.SSLError (a certificate not trusted, ...) included
                sock.close()
                raise httpx2.ConnectError(str(exc)) from exc
        connection = _Connection(sock)
        with self._open_lock:
            self._open.add(connection)
        return connection

    def _checkout(
        self, request: httpx2.Request, origin: _Origin, timeouts: dict[str, Any]
    ) -> tuple[_Connection, bool]:
        """This thread's connection to the request's origin, and whether it has served before."""
        connections = self._connections()
        connection = connections.get(origin)
        if connection is not None:
            if connection.usable(self._keepalive_expiry):
                return connection, True
            del connections[origin]
            connection.close()
        connection = self._connect(request, timeouts)
        connections[origin] = connection
        return connection, False

    def _discard(self, origin: _Origin, connection: _Connection) -> None:
        connections = self._connections()
        if connections.get(origin) is connection:
            del connections[origin]
        connection.close()

    # --- the exchange --------------------------------------------------------------------------

    def _proxy_transport(
        self, request: httpx2.Request, origin: _Origin
    ) -> httpx2.BaseTransport | None:
        """The default transport through the environment's proxy for the request's origin,
        or None when the request goes directly."""
        try:
            return self._via[origin]
        except KeyError:
            pass
        with self._via_lock:
            if origin not in self._via:
                proxy = next(
                    (
                        url
                        for pattern, url in self._proxy_mounts.items()
                        if pattern.matches(request.url)
                    ),
                    None,
                )
                verify, cert, trust_env = self._tls
                self._via[origin] = (
                    None
                    if proxy is None
                    else httpx2.HTTPTransport(
                        verify=verify,
                        cert=cert,
                        trust_env=trust_env,
                        limits=DEFAULT_CONNECTION_LIMITS,
                        proxy=httpx2.Proxy(url=proxy),
                    )
                )
            return self._via[origin]

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        origin = (url.raw_scheme, url.raw_host, url.port or 0)
        if self._proxy_mounts:
            proxied = self._proxy_transport(request, origin)
            if proxied is not None:
                return proxied.handle_request(request)
        timeouts = request.extensions.get("timeout") or {}
        payload = _encode(request)
        connection, reused = self._checkout(request, origin, timeouts)
        try:
            return self._exchange(request, origin, connection, payload, timeouts)
        except _Stale as stale:
            self._discard(origin, connection)
            if not reused:
                raise stale.error from stale.__cause__
        # The server closed the idle connection as the request went out: nothing of an answer
        # was read, so the request goes once more, on a fresh connection.
        connection = self._connect(request, timeouts)
        self._connections()[origin] = connection
        try:
            return self._exchange(request, origin, connection, payload, timeouts)
        except _Stale as stale:
            self._discard(origin, connection)
            raise stale.error from stale.__cause__

    def _exchange(
        self,
        request: httpx2.Request,
        origin: _Origin,
        connection: _Connection,
        payload: bytes,
        timeouts: dict[str, Any],
    ) -> httpx2.Response:
        sock = connection.sock
        try:
            connection.set_timeout(timeouts.get("write"))
            try:
                sock.sendall(payload)
            except TimeoutError as exc:
                raise httpx2.WriteTimeout(str(exc) or "write timed out") from exc
            except OSError as exc:
                raise _Stale(httpx2.WriteError(str(exc))) from exc
            trace = request.extensions.get("trace")
            if trace is not None:
                # What httpcore's connection reports here (runs.llm's `on_sent` listens for it).
                trace("http11.send_request_body.complete", {"request": request})
            connection.set_timeout(timeouts.get("read"))
            response, keep_alive = _read_response(connection, request.method == "HEAD")
        except _Stale:
            raise  # handle_request decides: a fresh connection, or the error
        except BaseException:
            # Whatever was half-read is left on the connection: it cannot carry another request.
            self._discard(origin, connection)
            raise
        if keep_alive and not connection.buffer:
            connection.served += 1
            connection.idle_since = time.monotonic()
        else:
            self._discard(origin, connection)
        return response

    def close(self) -> None:
        with self._via_lock:
            proxies = [transport for transport in self._via.values() if transport is not None]
            self._via.clear()
        for transport in proxies:
            transport.close()
        with self._open_lock:
            connections = list(self._open)
            self._open.clear()
        for connection in connections:
            connection.close()


def _environment_proxies() -> dict[Any, str | None]:
    """httpx2's reading of HTTP_PROXY / HTTPS_PROXY / ALL_PROXY / NO_PROXY, as URL patterns in
    the order httpx2.Client matches them (None: no proxy for that pattern)."""
    from httpx2._utils import URLPattern, get_environment_proxies

    return dict(sorted((URLPattern(key), url) for key, url in get_environment_proxies().items()))


def _encode(request: httpx2.Request) -> bytes:
    """The request's head and body as one buffer, for one send."""
    try:
        body = request.content
    except httpx2.RequestNotRead:
        body = b"".join(request.stream)  # type: ignore[arg-type]
    raw = request.headers.raw
    lines = [request.method.encode("ascii") + b" " + request.url.raw_path + b" HTTP/1.1"]
    lines += [name + b": " + value for name, value in raw]
    names = b"\n".join([name for name, _ in raw]).lower()
    if b"transfer-encoding" in names:
        # httpx2 announced chunks (a body it could not size): the whole body as one chunk.
        body = (b"%x\r\n" % len(body) + body + b"\r\n" if body else b"") + b"0\r\n\r\n"
    elif body and b"content-length" not in names:
        lines.append(b"Content-Length: %d" % len(body))
    lines += [b"", b""]
    head = b"\r\n".join(lines)
    # A CR or LF inside a header would start another header (or the body): one check for all.
    if head.count(b"\n") != len(lines) - 1 or head.count(b"\r") != len(lines) - 1:
        raise httpx2.LocalProtocolError("a header name or value holds a CR or LF")
    return head + body


def _recv(connection: _Connection) -> bytes:
    """What the socket has next (b"" once the peer closed it), with httpx2's read errors."""
    try:
        return connection.sock.recv(_RECV)
    except TimeoutError as exc:
        raise httpx2.ReadTimeout(str(exc) or "read timed out") from exc
    except OSError as exc:
        raise httpx2.ReadError(str(exc)) from exc


def _fill(connection: _Connection) -> None:
    """Receive more of the answer into the connection's buffer; a closed connection is an
    answer cut short."""
    chunk = _recv(connection)
    if not chunk:
        raise httpx2.RemoteProtocolError(
            "peer closed connection without sending complete message body"
        )
    connection.buffer += chunk


def _read_head(connection: _Connection, started: bool) -> tuple[bytes, int]:
    """The bytes of the answer's head (status line and headers) and where its body starts.
    Until a byte of the answer has arrived (`started`: an interim answer has), a connection
    closed or reset is `_Stale`."""
    buffer = connection.buffer
    start = 0
    while True:
        end = buffer.find(b"\r\n\r\n", start)
        if end >= 0:
            return bytes(buffer[:end]), end + 4
        if len(buffer) > _MAX_HEAD:
            raise httpx2.RemoteProtocolError("the answer's headers are too long")
        start = max(0, len(buffer) - 3)
        first = not (started or buffer)
        try:
            chunk = _recv(connection)
        except httpx2.ReadError as exc:
            if first:
                raise _Stale(exc) from exc
            raise
        if not chunk:
            if first:
                raise _Stale(
                    httpx2.RemoteProtocolError("Server disconnected without sending a response.")
                )
            raise httpx2.RemoteProtocolError("Server disconnected in the middle of the headers.")
        buffer += chunk


def _read_response(connection: _Connection, head_request: bool) -> tuple[httpx2.Response, bool]:
    """The next answer on the connection (interim 1xx answers skipped), and whether the
    connection may carry another request."""
    started = False
    while True:
        head, body_start = _read_head(connection, started)
        started = True
        lines = head.split(b"\r\n")
        version, _, rest = lines[0].partition(b" ")
        code, _, reason = rest.partition(b" ")
        if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise httpx2.RemoteProtocolError(f"malformed status line {lines[0][:100]!r}")
        status = int(code)
        del connection.buffer[:body_start]
        if 100 <= status < 200 and status != 101:
            continue
        break
    headers: list[tuple[bytes, bytes]] = []
    length: int | None = None
    chunked = False
    connection_tokens = b""
    for line in lines[1:]:
        if line[:1] in (b" ", b"\t") and headers:  # obsolete line folding
            name, value = headers[-1]
            headers[-1] = (name, value + b" " + line.strip())
            continue
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():
            raise httpx2.RemoteProtocolError(f"malformed header line {line[:100]!r}")
        value = value.strip()
        headers.append((name, value))
        lower = name.lower()
        if lower == b"content-length":
            if not value.isdigit() or (length is not None and length != int(value)):
                raise httpx2.RemoteProtocolError(f"bad Content-Length {value[:40]!r}")
            length = int(value)
        elif lower == b"transfer-encoding":
            chunked = value.lower().rsplit(b",", 1)[-1].strip() == b"chunked"
            if not chunked:
                raise httpx2.RemoteProtocolError(f"unsupported Transfer-Encoding {value[:40]!r}")
        elif lower == b"connection":
            connection_tokens += b"," + value.lower()
    tokens = {token.strip() for token in connection_tokens.split(b",")}
    if version == b"HTTP/1.1":
        keep_alive = b"close" not in tokens
    else:
        keep_alive = b"keep-alive" in tokens
    if status == 101:
        raise httpx2.RemoteProtocolError("the server switched protocols")
    if head_request or status in _NO_BODY_STATUS:
        body = b""
    elif chunked:
        body = _read_chunked(connection)
    elif length is not None:
        buffer = connection.buffer
        while len(buffer) < length:
            _fill(connection)
        body = bytes(buffer[:length])
        del buffer[:length]
    else:
        # Neither a length nor chunks: the body is what comes until the server closes.
        body = _read_to_close(connection)
        keep_alive = False
    response = httpx2.Response(
        status,
        headers=headers,
        stream=httpx2.ByteStream(body),
        extensions={"http_version": version, "reason_phrase": reason},
    )
    return response, keep_alive


def _line_end(connection: _Connection, position: int, too_long: str) -> int:
    """Where the line starting at `position` of the buffer ends (its CRLF), receiving more as
    needed; a line longer than the head limit is the protocol error `too_long`."""
    buffer = connection.buffer
    while True:
        line_end = buffer.find(b"\r\n", position)
        if line_end >= 0:
            return line_end
        if len(buffer) - position > _MAX_HEAD:
            raise httpx2.RemoteProtocolError(too_long)
        _fill(connection)


def _read_chunked(connection: _Connection) -> bytes:
    buffer = connection.buffer
    parts: list[bytes] = []
    position = 0
    while True:
        line_end = _line_end(connection, position, "a chunk's size line is too long")
        size_text = bytes(buffer[position:line_end]).split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise httpx2.RemoteProtocolError(f"bad chunk size {size_text[:40]!r}") from None
        if size < 0:
            raise httpx2.RemoteProtocolError(f"bad chunk size {size_text[:40]!r}")
        position = line_end + 2
        if size == 0:
            break
        while len(buffer) < position + size + 2:
            _fill(connection)
        if buffer[position + size : position + size + 2] != b"\r\n":
            raise httpx2.RemoteProtocolError("a chunk does not end with CRLF")
        parts.append(bytes(buffer[position : position + size]))
        position += size + 2
    # Trailers (ignored) up to the empty line that ends the body.
    while True:
        line_end = _line_end(connection, position, "the answer's trailers are too long")
        empty = line_end == position
        position = line_end + 2
        if empty:
            break
    del buffer[:position]
    return b"".join(parts)


def _read_to_close(connection: _Connection) -> bytes:
    while True:
        chunk = _recv(connection)
        if not chunk:
            break
        connection.buffer += chunk
    body = bytes(connection.buffer)
    connection.buffer.clear()
    return body
