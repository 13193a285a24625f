"""TCP-to-unix-socket bridge that runs INSIDE the sandbox (standard library only).

The sandbox has no network but loopback. Tools talk to an HTTP proxy on 127.0.0.1:<port>; this
bridge accepts those TCP connections and pipes each one into a fresh connection on the
session's egress unix socket, which the host proxy serves. It understands no protocol and makes
no decisions: all policy lives on the host side of the socket.

Runs under the system /usr/bin/python3, so it imports nothing outside the standard library:
    python3 bridge.py 127.0.0.1 3128 /run/motor/egress.sock
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import sys
import threading

CHUNK_BYTES = 64 * 1024
#: how often (seconds) a blocked accept loop checks its stop event
STOP_POLL_S = 0.25


def _pipe(client: socket.socket, unix_path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            upstream.connect(unix_path)
        except OSError:
            return  # the client sees its connection closed
        peer = {client: upstream, upstream: client}
        selector = selectors.DefaultSelector()
        try:
            selector.register(client, selectors.EVENT_READ)
            selector.register(upstream, selectors.EVENT_READ)
            open_sides = 2
            while open_sides:
                for key, _ in selector.select():
                    source = key.fileobj
                    assert isinstance(source, socket.socket)
                    try:
                        data = source.recv(CHUNK_BYTES)
                    except OSError:
                        return
                    if not data:
                        selector.unregister(source)
                        open_sides -= 1
                        with contextlib.suppress(OSError):
                            peer[source].shutdown(socket.SHUT_WR)
                        continue
                    try:
                        peer[source].sendall(data)
                    except OSError:
                        return
        finally:
            selector.close()
    finally:
        upstream.close()
        client.close()


def serve_bridge(
    listen_host: str,
    listen_port: int,
    unix_path: str,
    ready: threading.Event | None = None,
    *,
    stop: threading.Event | None = None,
) -> None:
    """Accept TCP on (listen_host, listen_port) and pipe each connection to `unix_path`.

    Sets `ready` once listening. Runs until `stop` is set (if given) or the process ends.
    Raises OSError if the listening socket cannot be bound.
    """
    family = socket.AF_INET6 if ":" in listen_host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((listen_host, listen_port))
        listener.listen(128)
        listener.settimeout(STOP_POLL_S if stop is not None else None)
        if ready is not None:
            ready.set()
        while stop is None or not stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if stop is not None and stop.is_set():
                    break
                continue
            client.settimeout(None)
            with contextlib.suppress(OSError):
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=_pipe, args=(client, unix_path), daemon=True).start()
    finally:
        listener.close()


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: bridge.py LISTEN_HOST LISTEN_PORT UNIX_SOCKET_PATH", file=sys.stderr)
        return 2
    serve_bridge(argv[0], int(argv[1]), argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
