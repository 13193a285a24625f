"""The per-session egress proxy: HTTP CONNECT and absolute-form HTTP on a unix socket.

One proxy serves one session. The session's identity is the socket that accepted the
connection (the socket file is bind-mounted into exactly one sandbox), never a header or a proxy
username. Every destination goes through decide → resolve_checked → dial; the proxy adds the
per-session caps (concurrent tunnels, total bytes, connect and idle timeouts), an SNI check on
TLS tunnels and one ConnectionReport per connection.

Concurrency: one accept thread plus one thread per client connection, which relays both
directions with a selector. Nothing here blocks the caller; close() stops it all.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import socket
import stat
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from sandbox.egress.addresses import Resolver
from sandbox.egress.decision import (
    Decision,
    decide_authority,
    dial,
    resolve_checked,
    validate_policy,
)
from sandbox.egress.framing import BodyFramer, FramingError, body_framer
from sandbox.egress.hostnames import HostRejected, canonicalize_host, printable
from sandbox.egress.http_heads import (
    _REFUSAL_STATUS,
    _BadRequest,
    _Request,
    _response,
    _ResponseHeadFilter,
    read_request,
)
from sandbox.egress.sni import scan_client_hello
from sandbox.types import ConnectionCallback, ConnectionReport, NetworkPolicy

log = logging.getLogger("sandbox.egress")

RELAY_CHUNK_BYTES = 64 * 1024
#: Linux limit on a unix socket path (sun_path is 108 bytes including the NUL)
MAX_SOCKET_PATH_BYTES = 107
FORWARDED_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "te", "trailer", "upgrade", "host", "proxy-connection"}
)


@dataclass(slots=True)
class _Tally:
    up: int = 0
    down: int = 0
    dialled: str | None = None  # the address connected to, once there is one


class EgressProxy:
    """Serve one session's egress on `socket_path` until close().

    The socket file is created with mode 0600; `owner_uid`/`owner_gid` chown it so that an
    unprivileged sandbox user can connect. `resolver` maps a name to addresses (default: the
    host's getaddrinfo). `on_connection` receives one ConnectionReport per client connection.
    Raises PolicyError for an unusable policy and OSError if the socket cannot be created.
    """

    def __init__(
        self,
        *,
        session_id: str,
        policy: NetworkPolicy,
        socket_path: Path,
        resolver: Resolver | None = None,
        on_connection: ConnectionCallback | None = None,
        owner_uid: int | None = None,
        owner_gid: int | None = None,
        check_sni: bool = True,
        header_timeout_s: float = 10.0,
    ) -> None:
        validate_policy(policy)
        self.session_id = session_id
        self.policy = policy
        self.socket_path = Path(socket_path)
        self._resolver = resolver
        self._on_connection = on_connection
        self._check_sni = check_sni
        self._header_timeout_s = header_timeout_s
        self._lock = threading.Lock()
        self._closed = False
        self._tunnels = 0
        self._bytes_total = 0
        self._open_sockets: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        # connections still reading their request count here; beyond this we stop accepting work
        self._max_handlers = policy.max_tunnels * 2 + 8

        if len(os.fsencode(self.socket_path)) > MAX_SOCKET_PATH_BYTES:
            raise OSError(f"egress socket path is longer than {MAX_SOCKET_PATH_BYTES} bytes")
        if self.socket_path.is_symlink() or self.socket_path.exists():
            raise FileExistsError(f"egress socket path {self.socket_path} already exists")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # Linux takes the bound file's mode from the socket inode: 0600 from the first moment
            os.fchmod(listener.fileno(), 0o600)
            listener.bind(str(self.socket_path))
            self._inode = os.stat(self.socket_path).st_ino
            if owner_uid is not None or owner_gid is not None:
                os.chown(
                    self.socket_path,
                    -1 if owner_uid is None else owner_uid,
                    -1 if owner_gid is None else owner_gid,
                )
            os.chmod(self.socket_path, 0o600 if owner_gid is None else 0o660)
            listener.listen(128)
        except BaseException:
            listener.close()
            with contextlib.suppress(OSError):
                self.socket_path.unlink()
            raise
        self._listener = listener
        self._wake_r, self._wake_w = socket.socketpair()
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name=f"egress-{session_id}-accept", daemon=True
        )
        self._accept_thread.start()

    # ----------------------------------------------------------------------------- lifecycle

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def bytes_total(self) -> int:
        """Bytes relayed so far in both directions, across all connections."""
        return self._bytes_total

    @property
    def active_tunnels(self) -> int:
        return self._tunnels

    def __enter__(self) -> EgressProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop accepting, cut every open connection, join the threads, remove the socket file.

        Idempotent.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            sockets = list(self._open_sockets)
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._accept_thread.join(timeout=5.0)
        with self._lock:
            threads = list(self._threads)
        deadline = time.monotonic() + self.policy.connect_timeout_s + 5.0
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._listener.close()
        self._wake_r.close()
        self._wake_w.close()
        try:
            if os.stat(self.socket_path).st_ino == self._inode:
                self.socket_path.unlink()
        except FileNotFoundError:
            pass

    def _track(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._closed:
                return False
            self._open_sockets.add(sock)
            return True

    def _untrack(self, sock: socket.socket) -> None:
        with self._lock:
            self._open_sockets.discard(sock)
        sock.close()

    # ----------------------------------------------------------------------------- accepting

    def _accept_loop(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ)
        selector.register(self._wake_r, selectors.EVENT_READ)
        try:
            while not self._closed:
                for key, _ in selector.select():
                    if key.fileobj is self._wake_r:
                        return
                    try:
                        client, _ = self._listener.accept()
                    except OSError:
                        continue
                    self._start_handler(client)
        finally:
            selector.close()

    def _start_handler(self, client: socket.socket) -> None:
        with self._lock:
            # finished threads are pruned here rather than by themselves, so that close() can
            # still join a thread that is returning
            self._threads = {thread for thread in self._threads if thread.is_alive()}
            overloaded = len(self._threads) >= self._max_handlers
        if overloaded or not self._track(client):
            # too many connections still sending their request: refuse without a thread
            self._report("", 0, None, "denied", "tunnel_limit", _Tally(), time.monotonic())
            with contextlib.suppress(OSError):
                client.setblocking(False)
                client.send(_response(503, "denied", "tunnel_limit", "too many open connections\n"))
            client.close()
            return
        thread = threading.Thread(
            target=self._handle, args=(client,), name=f"egress-{self.session_id}-conn", daemon=True
        )
        with self._lock:
            self._threads.add(thread)
        thread.start()

    # ------------------------------------------------------------------------------ handling

    def _handle(self, client: socket.socket) -> None:
        started = time.monotonic()
        tally = _Tally()
        host, port, resolved = "", 0, None
        try:
            try:
                request = read_request(client, self._header_timeout_s)
                if request.method.upper() == "CONNECT":
                    if request.method != "CONNECT":
                        raise _BadRequest("the method must be spelled CONNECT")
                    decision = decide_authority(request.target, self.policy)
                else:
                    decision = self._decide_forward(request)
            except _BadRequest as exc:
                self._report("", 0, None, "denied", exc.reason, tally, started)
                self._refuse(client, exc.reason, exc.message)
                return
            host, port = decision.host, decision.port
            if not decision.allowed:
                self._report(host, port, None, "denied", decision.reason, tally, started)
                self._refuse(client, decision.reason, decision.message)
                return
            if not self._acquire_tunnel():
                message = (
                    f"this run already has {self.policy.max_tunnels} open connections; "
                    "close some before opening more"
                )
                self._report(host, port, None, "denied", "tunnel_limit", tally, started)
                self._refuse(client, "tunnel_limit", message)
                return
            try:
                served = self._serve(client, request, decision, tally, started)
            finally:
                self._release_tunnel()
            if served is not None:
                verdict, reason, resolved = served
                self._report(host, port, resolved, verdict, reason, tally, started)
        except OSError:
            # the client or upstream went away mid-exchange: an ordinary end, not a proxy fault
            verdict = "allowed" if tally.dialled else "denied"
            self._report(host, port, tally.dialled, verdict, "closed", tally, started)
        except Exception:  # a broken connection must never take the proxy down
            log.exception("egress connection failed (session %s)", self.session_id)
            self._report(host, port, tally.dialled, "denied", "closed", tally, started)
        finally:
            self._untrack(client)

    def _serve(
        self,
        client: socket.socket,
        request: _Request,
        decision: Decision,
        tally: _Tally,
        started: float,
    ) -> tuple[Literal["allowed", "denied"], str, str | None] | None:
        """Serve an allowed request; return how it ended for the report, or None when a refusal
        was already reported (before the client was answered)."""
        host, port = decision.host, decision.port
        checked = resolve_checked(decision, self._resolver)
        if not checked.allowed:
            self._report(host, port, checked.resolved_ip, "denied", checked.reason, tally, started)
            self._refuse(client, checked.reason, checked.message)
            return None
        try:
            upstream, address = dial(checked, self.policy.connect_timeout_s)
        except OSError as exc:
            message = f"could not connect to {checked.host}:{checked.port} ({type(exc).__name__})"
            self._report(
                host, port, checked.addresses[0], "denied", "connect_failed", tally, started
            )
            self._refuse(client, "connect_failed", message)
            return None
        checked = replace(checked, resolved_ip=address)
        tally.dialled = address
        if not self._track(upstream):
            upstream.close()
            return "denied", "closed", address
        try:
            if request.method == "CONNECT":
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                first, refusal = self._first_tunnel_bytes(client, request.rest, checked)
                if refusal == "idle_timeout":
                    return "allowed", refusal, address
                if refusal is not None:
                    return "denied", refusal, address
                initial_up = first
            else:
                assert request.body is not None
                initial_up = self._forward_head(request, checked) + request.body.feed(request.rest)
            response_filter = None if request.method == "CONNECT" else _ResponseHeadFilter()
            reason = self._relay(client, upstream, initial_up, tally, response_filter, request.body)
            return "allowed", reason, address
        finally:
            self._untrack(upstream)

    def _decide_forward(self, request: _Request) -> Decision:
        if request.method.upper() in {"TRACE", "TRACK"} or request.method not in FORWARDED_METHODS:
            raise _BadRequest(
                f"method {printable(request.method)} is not supported by the egress proxy",
                reason="method_not_allowed",
            )
        target = request.target
        if target[:8].lower() == "https://":
            raise _BadRequest("https:// URLs go through CONNECT, not a plain proxy request")
        if target[:7].lower() != "http://":
            raise _BadRequest(
                "the egress proxy accepts CONNECT host:port or an absolute http:// URL"
            )
        if "#" in target:
            raise _BadRequest("a request target must not contain a fragment ('#')")
        rest = target[7:]
        cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
        authority, path = rest[:cut], rest[cut:]
        if not path.startswith("/"):
            path = "/" + path
        decision = decide_authority(authority, self.policy, default_port=80)
        try:
            request.body = body_framer(request.headers)
        except FramingError as exc:
            raise _BadRequest(str(exc)) from None
        request.target = path
        return decision

    def _forward_head(self, request: _Request, decision: Decision) -> bytes:
        """The origin-form request head for the upstream (the body follows through the framer)."""
        connection_tokens = {
            token.strip().lower()
            for name, value in request.headers
            if name.lower() in {"connection", "proxy-connection"}
            for token in value.split(",")
        }
        host_header = decision.host if decision.port == 80 else f"{decision.host}:{decision.port}"
        lines = [f"{request.method} {request.target} HTTP/1.1", f"Host: {host_header}"]
        for name, value in request.headers:
            lowered = name.lower()
            if (
                lowered in _HOP_BY_HOP
                or lowered.startswith("proxy-")
                or lowered in connection_tokens
            ):
                continue
            lines.append(f"{name}: {value}")
        lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _first_tunnel_bytes(
        self, client: socket.socket, already: bytes, decision: Decision
    ) -> tuple[bytes, str | None]:
        """Bytes the client sent first on a tunnel; refuses an SNI that is not the CONNECT host."""
        if not self._check_sni:
            return already, None
        data = already
        client.settimeout(min(self._header_timeout_s, self.policy.idle_timeout_s))
        try:
            while True:
                scan = scan_client_hello(data)
                if scan.complete:
                    break
                chunk = client.recv(RELAY_CHUNK_BYTES)
                if not chunk:
                    return data, None  # client gave up; relay sees the EOF
                data += chunk
        except TimeoutError:
            return data, "idle_timeout"
        finally:
            client.settimeout(None)
        if not scan.is_tls:
            return data, None
        if scan.error is not None:
            return data, "sni_mismatch"
        if scan.server_name is None:
            return data, None
        try:
            sni_host, _ = canonicalize_host(scan.server_name, decision.port)
        except HostRejected:
            return data, "sni_mismatch"
        if sni_host != decision.host:
            return data, "sni_mismatch"
        return data, None

    # ------------------------------------------------------------------------------- relaying

    def _relay(
        self,
        client: socket.socket,
        upstream: socket.socket,
        initial_up: bytes,
        tally: _Tally,
        response_filter: _ResponseHeadFilter | None = None,
        request_body: BodyFramer | None = None,
    ) -> str:
        """Copy bytes both ways until both sides are done; return why the relay ended.

        With `response_filter`, upstream response heads pass through it before reaching the
        client (plain HTTP only; tunnels are opaque). With `request_body`, only the one request's
        body travels upstream: once it is complete the client is not read any more, so whatever
        it sends next (a pipelined or keep-alive request) is never relayed.
        """
        if initial_up:
            if not self._charge(len(initial_up)):
                return "byte_limit"
            upstream.sendall(initial_up)
            tally.up += len(initial_up)
        idle_s = self.policy.idle_timeout_s
        client.settimeout(idle_s)
        upstream.settimeout(idle_s)
        peer = {client: upstream, upstream: client}
        selector = selectors.DefaultSelector()
        try:
            selector.register(upstream, selectors.EVENT_READ)
            open_sides = 1
            if request_body is None or not request_body.done:
                selector.register(client, selectors.EVENT_READ)
                open_sides = 2
            while open_sides:
                events = selector.select(timeout=idle_s)
                if not events:
                    return "idle_timeout"
                for key, _ in events:
                    source = key.fileobj
                    assert isinstance(source, socket.socket)
                    try:
                        data = source.recv(RELAY_CHUNK_BYTES)
                    except (ConnectionResetError, TimeoutError):
                        return "closed"
                    if not data:
                        selector.unregister(source)
                        open_sides -= 1
                        if source is upstream and response_filter is not None:
                            with contextlib.suppress(OSError):
                                client.sendall(response_filter.flush())
                        with contextlib.suppress(OSError):
                            peer[source].shutdown(socket.SHUT_WR)
                        continue
                    if source is client and request_body is not None:
                        try:
                            data = request_body.feed(data)
                        except FramingError:
                            return "bad_request"
                        if request_body.done:
                            # the request is complete: stop reading the client
                            selector.unregister(client)
                            open_sides -= 1
                        if not data:
                            continue
                    if not self._charge(len(data)):
                        return "byte_limit"
                    outgoing = data
                    if source is upstream and response_filter is not None:
                        filtered = response_filter.feed(data)
                        if filtered is None:
                            return "closed"  # an endless response head: not HTTP we relay
                        outgoing = filtered
                    try:
                        peer[source].sendall(outgoing)
                    except (BrokenPipeError, ConnectionResetError, TimeoutError):
                        return "closed"
                    if source is client:
                        tally.up += len(data)
                    else:
                        tally.down += len(data)
            return "closed"
        except OSError:
            return "closed"
        finally:
            selector.close()

    def _charge(self, count: int) -> bool:
        with self._lock:
            if self._bytes_total + count > self.policy.max_total_bytes:
                return False
            self._bytes_total += count
            return True

    def _acquire_tunnel(self) -> bool:
        with self._lock:
            if self._tunnels >= self.policy.max_tunnels:
                return False
            self._tunnels += 1
            return True

    def _release_tunnel(self) -> None:
        with self._lock:
            self._tunnels -= 1

    # --------------------------------------------------------------------------- HTTP pieces

    def _refuse(self, client: socket.socket, reason: str, message: str) -> None:
        # Callers report a refusal before they answer the client: whoever reads the answer (a
        # tool call's result, a test) may then rely on the report being there already.
        status, kind = _REFUSAL_STATUS.get(reason, (403, "denied"))
        with contextlib.suppress(OSError):
            client.settimeout(self._header_timeout_s)
            client.sendall(_response(status, kind, reason, message + "\n"))

    def _report(
        self,
        host: str,
        port: int,
        resolved_ip: str | None,
        verdict: Literal["allowed", "denied"],
        reason: str,
        tally: _Tally,
        started: float,
    ) -> None:
        if self._on_connection is None:
            return
        report = ConnectionReport(
            session_id=self.session_id,
            host=host,
            port=port,
            resolved_ip=resolved_ip,
            verdict=verdict,
            reason=reason,
            bytes_up=tally.up,
            bytes_down=tally.down,
            duration_ms=int((time.monotonic() - started) * 1000),
        )
        try:
            self._on_connection(report)
        except Exception:
            log.exception("egress connection callback failed (session %s)", self.session_id)


def is_socket_file(path: Path) -> bool:
    """True when `path` exists and is a unix socket (not following symlinks)."""
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False
