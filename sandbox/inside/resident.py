"""A resident process of the supervisor: a helper that lives across calls (the browser).

A command ends with its call; a browser must keep its pages between the calls of a run. The
supervisor therefore starts the helper named by an EXEC's ``"resident"`` once, keeps its pipes,
and hands each call's stdin to it as one frame (4-byte big-endian length + bytes), answering with
the helper's one frame back as the RESULT's stdout. The helper is confined like a command — its
own session and process group, no_new_privs, the sandbox's uid and namespaces, a seccomp filter
with every refusal of the command profile except AF_UNIX sockets (Chromium's process singleton
and its IPC need them; inside the sandbox's own network namespace and read-only filesystem they
reach the egress socket at most, which applies the allowlist) — with limits of its own:
RLIMIT_DATA instead of RLIMIT_AS (Chromium reserves terabytes of address space it never uses,
so an address-space cap kills it; RLIMIT_DATA counts what it can write to), more processes and
open files, and no core files. The sweep after a command spares the helper's descendants (see
sweep.py); a call past its deadline, a helper that died or an explicit stop kills the helper and
every process it started. While a call waits for the helper, the host's request stream is watched
as the runner watches it during a command: its end means the owner is gone, and the helper (the
browser with every page) is killed and the supervisor exits, instead of the call running on
unobserved until its deadline.
"""

from __future__ import annotations

import os
import resource
import select
import struct
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    import subprocess
    from typing import Any

if TYPE_CHECKING or __package__:
    from .poller import _host_still_there
    from .protocol import _result
    from .siblings import _load_sibling
    from .sweep import SIGKILL, descendants, reap_orphans, spare
else:  # inside the sandbox, where this directory is first on sys.path (see supervisor.py)
    from poller import _host_still_there
    from protocol import _result
    from siblings import _load_sibling
    from sweep import SIGKILL, descendants, reap_orphans, spare

#: the residents a call may name, and the limits each gets: RLIMIT_DATA bytes, RLIMIT_NPROC,
#: RLIMIT_NOFILE
RESIDENTS = {"browser": {"data_bytes": 1536 * 1024 * 1024, "processes": 512, "open_files": 4096}}
_HEADER = struct.Struct(">I")
#: the biggest answer a resident may give (bytes)
MAX_ANSWER_BYTES = 16 * 1024 * 1024
#: why a call ended when the host's stream ended during it
OWNER_GONE = "the owner is gone"


class Resident:
    """One running helper and its pipes."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes]) -> None:
        self.name = name
        self.proc = proc
        spare(proc.pid)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """SIGKILL the helper and every process it started; reap it."""
        victims = descendants(self.proc.pid)
        for pid in [self.proc.pid, *victims]:
            try:
                os.kill(pid, SIGKILL)
            except OSError:
                pass
        try:
            os.killpg(self.proc.pid, SIGKILL)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001, S110 - PID 1 reaps it later
            pass
        spare(None)
        # its processes were re-parented to us (PID 1) as they died: reap them, bounded
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            reap_orphans()
            if not any(os.path.exists(f"/proc/{pid}") for pid in victims):
                break
            time.sleep(0.01)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass

    def call(
        self, payload: bytes, timeout_s: float, host_fd: int | None = None
    ) -> tuple[bytes | None, str]:
        """Send one request, wait for one answer until the deadline: (answer, "") or (None, why).
        With `host_fd` (the host's request stream), its end during the wait gives
        (None, OWNER_GONE) at once."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(_HEADER.pack(len(payload)) + payload)
            self.proc.stdin.flush()
        except OSError as exc:
            return None, f"the {self.name} is gone ({exc.strerror or exc})"
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        buffer = b""
        needed = _HEADER.size
        header_read = False
        while True:
            while len(buffer) < needed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None, "timeout"
                watched = [fd] if host_fd is None else [fd, host_fd]
                ready, _, _ = select.select(watched, [], [], left)
                if host_fd is not None and host_fd in ready:
                    if not _host_still_there(host_fd):
                        return None, OWNER_GONE
                    # the host sent something mid-call (it never does): stop watching it
                    host_fd = None
                if fd not in ready:
                    continue
                chunk = os.read(fd, max(65536, needed - len(buffer)))
                if not chunk:
                    return None, f"the {self.name} exited"
                buffer += chunk
            if header_read:
                return buffer[:needed], ""
            (size,) = _HEADER.unpack(buffer[: _HEADER.size])
            if size > MAX_ANSWER_BYTES:
                return None, f"the {self.name} answered {size} bytes"
            buffer = buffer[_HEADER.size :]
            needed = size
            header_read = True


class Residents:
    """The supervisor's residents by name (at most one each)."""

    def __init__(self, host_fd: int | None = None) -> None:
        #: the host's request stream (serve mode), watched while a call waits for a helper
        self._host_fd = host_fd
        self._running: dict[str, Resident] = {}
        self._filter: Any = None

    def _start(self, name: str, spec: Any) -> Resident:
        import subprocess

        limits = RESIDENTS[name]
        if self._filter is None:
            self._filter = _load_sibling("seccomp").prepare(allow_unix_sockets=True)
        seccomp_filter = self._filter

        # never above what this process may hold (a container's own hard limits stay in force)
        def capped(res: int, value: int) -> tuple[int, int]:
            hard = resource.getrlimit(res)[1]
            if hard != resource.RLIM_INFINITY and (value == resource.RLIM_INFINITY or value > hard):
                value = hard
            return value, value

        wanted = [
            (resource.RLIMIT_AS, capped(resource.RLIMIT_AS, resource.RLIM_INFINITY)),
            (resource.RLIMIT_DATA, capped(resource.RLIMIT_DATA, limits["data_bytes"])),
            (resource.RLIMIT_NPROC, capped(resource.RLIMIT_NPROC, limits["processes"])),
            (resource.RLIMIT_NOFILE, capped(resource.RLIMIT_NOFILE, limits["open_files"])),
            (resource.RLIMIT_CORE, (0, 0)),
        ]

        def setup() -> None:
            for res, value in wanted:
                resource.setrlimit(res, value)
            seccomp_filter.install()

        log = os.open(f"/tmp/{name}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            proc = subprocess.Popen(
                spec.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=spec.env,
                cwd=spec.cwd,
                start_new_session=True,
                preexec_fn=setup,  # noqa: PLW1509 - rlimits and the filter, nothing that locks
            )
        finally:
            os.close(log)
        return Resident(name, proc)

    def call(self, spec: Any, name: str) -> dict[str, Any]:
        """The RESULT of one call to resident `name` (started first when it is not running).
        An empty stdin with ``resident_stop`` stops it."""
        started = time.monotonic()
        if name not in RESIDENTS:
            return _result(error=("invalid_args", f"unknown resident {name!r}"))
        current = self._running.get(name)
        if current is not None and not current.alive():
            current.stop()
            current = None
            self._running.pop(name, None)
        if spec.resident_stop:
            if current is not None:
                current.stop()
                self._running.pop(name, None)
            return _result(exit_code=0, duration_ms=int((time.monotonic() - started) * 1000))
        if current is None:
            try:
                current = self._running[name] = self._start(name, spec)
            except Exception as exc:  # noqa: BLE001 - reported; the supervisor must go on
                msg = f"the {name} could not start: {getattr(exc, 'strerror', None) or exc}"
                return _result(exit_code=None, error=("sandbox_error", msg))
        answer, why = current.call(spec.stdin, spec.timeout_s, self._host_fd)
        took = int((time.monotonic() - started) * 1000)
        if answer is None:
            current.stop()
            self._running.pop(name, None)
            if why == OWNER_GONE:
                # nobody will read the result; the supervisor's end stops the sandbox
                self.stop_all()
                os._exit(0)
            if why == "timeout":
                return _result(exit_code=None, sig=SIGKILL, duration_ms=took, timed_out=True)
            return _result(exit_code=None, duration_ms=took, error=("sandbox_error", why))
        return _result(exit_code=0, stdout=answer, duration_ms=took)

    def process_allowance(self) -> int:
        """Processes (threads) the running residents may hold. RLIMIT_NPROC counts every
        process of the sandbox's uid, so a command started beside a resident gets this much
        more than the session's own limit, or the browser's threads would leave it none."""
        return sum(
            RESIDENTS[name]["processes"]
            for name, resident in self._running.items()
            if resident.alive()
        )

    def stop_all(self) -> None:
        for resident in list(self._running.values()):
            resident.stop()
        self._running.clear()
