"""Waiting on descriptors during a call: a small epoll selector and the check whether the host's
stream ended."""

from __future__ import annotations

import select
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    pass


_READ = select.EPOLLIN
_WRITE = select.EPOLLOUT


class _Key:
    __slots__ = ("fd", "data")

    def __init__(self, fd: int, data: str) -> None:
        self.fd = fd
        self.data = data


class _Poller:
    """What the call loops use of selectors.EpollSelector (the default selector on Linux), on
    select.epoll directly: importing selectors would bring collections along."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._keys: dict[int, _Key] = {}

    def register(self, fd: int, events: int, data: str) -> None:
        self._epoll.register(fd, events)
        self._keys[fd] = _Key(fd, data)

    def unregister(self, fd: int) -> None:
        del self._keys[fd]
        self._epoll.unregister(fd)

    def select(self, timeout: float) -> list[tuple[_Key, int]]:
        """The registered descriptors with an event (hang-ups and errors included), waiting at
        most `timeout` seconds, rounded up to a millisecond as selectors does (a shorter wait
        would return at once and make the caller poll)."""
        timeout = 0.0 if timeout <= 0 else -(-timeout * 1e3 // 1) * 1e-3
        try:
            events = self._epoll.poll(timeout, max(len(self._keys), 1))
        except InterruptedError:
            return []
        return [(self._keys[fd], event) for fd, event in events if fd in self._keys]

    def close(self) -> None:
        self._epoll.close()


def _host_still_there(fd: int) -> bool:
    """Whether the host's stream, found readable mid-call, is still open (no EOF).

    Peeks without consuming, so a frame the host did send stays for the next read."""
    # only here, and rarely (the stream turning readable mid-call): not on every start
    import fcntl
    import termios

    try:
        ready, _w, _x = select.select([fd], [], [], 0)
        if not ready:
            return True
        # a pipe cannot be peeked; FIONREAD says how many bytes wait (0 with readable = EOF)
        waiting = bytearray(4)  # a C int
        fcntl.ioctl(fd, termios.FIONREAD, waiting, True)
        return int.from_bytes(waiting, sys.byteorder, signed=True) > 0
    except OSError:
        return False
