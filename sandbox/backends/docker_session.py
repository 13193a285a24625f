"""One running docker sandbox: the supervisor's frames over the container's attach socket, calls
and teardown."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import select
import shutil
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

from sandbox.backends._protocol import exec_message
from sandbox.egress import EgressProxy
from sandbox.inside.protocol import MAX_FRAME_BYTES, ProtocolError, encode_frame
from sandbox.types import ExecRequest, ExecResult, SandboxError, SessionSpec

log = logging.getLogger(__name__)

_SUPERVISOR_GRACE_S = 10.0  # beyond a call's own timeout, before the supervisor counts as hung
#: how long a supervisor may take to answer its configuration (seconds)
_START_TIMEOUT_S = 15.0
#: how long close() waits for a running call to notice its container is gone (seconds)
_CLOSE_WAIT_S = 10.0
_READ_CHUNK = 64 * 1024


def _cgroup_file(container_id: str, controller: str, name: str) -> Path | None:
    """The host path of one cgroup file of a container (cgroup v1 or v2, cgroupfs or systemd)."""
    candidates = (
        Path("/sys/fs/cgroup") / controller / "docker" / container_id / name,
        Path("/sys/fs/cgroup")
        / controller
        / "system.slice"
        / f"docker-{container_id}.scope"
        / name,
        Path("/sys/fs/cgroup/docker") / container_id / name,
        Path("/sys/fs/cgroup/system.slice") / f"docker-{container_id}.scope" / name,
    )
    for candidate in candidates:
        if candidate.exists():
            return candidate
    return None


def _read_oom_kills(path: Path | None) -> int:
    if path is None:
        return 0
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


class _AttachedStream:
    """The supervisor's stdin/stdout over the container's attach socket.

    Writes go straight to the process's stdin. Reads demultiplex Docker's stream frames (8-byte
    header: stream id, 3 zero bytes, big-endian length): stdout bytes feed the supervisor's frame
    protocol, stderr bytes (its diagnostics) are kept in a short tail for error messages."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self.sock: socket.socket = getattr(raw, "_sock", raw)
        self._pending = b""
        self._stdout = bytearray()
        self.stderr_tail = bytearray()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self, deadline: float) -> bool:
        """Read more from the socket; False on EOF or deadline."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        ready, _, _ = select.select([self.sock], [], [], remaining)
        if not ready:
            return False
        chunk = self.sock.recv(_READ_CHUNK)
        if not chunk:
            return False
        self._pending += chunk
        while len(self._pending) >= 8:
            stream, size = struct.unpack(">BxxxL", self._pending[:8])
            if len(self._pending) < 8 + size:
                break
            payload = self._pending[8 : 8 + size]
            self._pending = self._pending[8 + size :]
            if stream == 2:
                self.stderr_tail += payload
                del self.stderr_tail[:-4096]
            else:
                self._stdout += payload
        return True

    def read_exact(self, size: int, deadline: float) -> bytes | None:
        while len(self._stdout) < size:
            if not self._fill(deadline):
                return None
        data = bytes(self._stdout[:size])
        del self._stdout[:size]
        return data

    def read_message(self, deadline: float) -> dict[str, Any] | None:
        """One supervisor frame, or None when the stream ended or the deadline passed."""
        header = self.read_exact(4, deadline)
        if header is None:
            return None
        (size,) = struct.unpack(">I", header)
        if size > MAX_FRAME_BYTES:
            raise SandboxError(f"docker backend: supervisor frame of {size} bytes is too large")
        body = self.read_exact(size, deadline)
        if body is None:
            return None
        message = json.loads(body)
        if not isinstance(message, dict):
            raise SandboxError("docker backend: supervisor sent a frame that is not an object")
        return message

    def ended(self) -> bool:
        """Whether the engine has closed the stream (without waiting or consuming anything)."""
        try:
            ready, _, _ = select.select([self.sock], [], [], 0)
            return bool(ready) and self.sock.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(Exception):
            self._raw.close()


class DockerSession:
    """One running sandbox container with a resident supervisor. One call at a time."""

    backend = "docker"

    def __init__(
        self,
        *,
        client: Any,
        container: Any,
        stream: _AttachedStream,
        session_id: str,
        spec: SessionSpec,
        proxy: EgressProxy | None,
        runtime_dir: Path | None,
    ) -> None:
        self.id = session_id
        self._client = client
        self._container = container
        self._stream = stream
        self._spec = spec
        self._proxy = proxy
        self._runtime_dir = runtime_dir
        self._closed = False
        # the container's pids limit has room for the residents' processes (see _make_room)
        self._resident_room = False
        # `_lock` serialises calls and guards the attach stream; `_state_lock` only the closed
        # flag, so close() never waits for a running call
        self._lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._stream_closed = False
        self._caller: int | None = None
        self._configure_frame = b""
        self._oom_file = _cgroup_file(container.id, "memory", "memory.oom_control") or (
            _cgroup_file(container.id, "", "memory.events")
        )

    @property
    def closed(self) -> bool:
        return self._closed

    def _make_room(self) -> None:
        """Before the first call to a resident (the browser), raise the container's pids limit by
        the residents' process allowance (sandbox/inside/resident.py RESIDENTS).

        The pids cgroup counts threads, and a browser (Chromium, Playwright's driver) runs
        hundreds of them: within the session's own `max_processes` it could not start. On the
        bwrap backend the resident gets this allowance as its own RLIMIT_NPROC; a container has
        one pids limit for everything in it, so it is raised only once a resident is wanted —
        a session that never starts one keeps exactly its own limit."""
        if self._resident_room:
            return
        from sandbox.backends.docker import _RESIDENT_PROCESSES
        from sandbox.inside.resident import RESIDENTS

        allowance = sum(int(limits["processes"]) for limits in RESIDENTS.values())
        total = self._spec.limits.max_processes + _RESIDENT_PROCESSES + allowance
        api = self._client.api
        try:
            # docker-py's update_container() predates PidsLimit; the Engine API has it (1.40+)
            response = api._post_json(
                api._url("/containers/{0}/update", self._container.id), data={"PidsLimit": total}
            )
            api._raise_for_status(response)
        except Exception as exc:  # noqa: BLE001 - any engine failure is the session's error
            raise SandboxError(
                f"docker backend: could not give the browser its processes: {exc}"
            ) from exc
        self._resident_room = True

    @property
    def runtime_dir(self) -> Path | None:
        return self._runtime_dir

    def alive(self) -> bool:
        """Whether the container's attach stream is still open (a spare waiting in a pool can
        be removed from outside meanwhile); no engine round trip."""
        return not self._closed and not self._stream.ended()

    def adopted(self, spec: SessionSpec, proxy: EgressProxy | None, config: dict[str, Any]) -> None:
        """This pooled session now serves `spec` (its id, its limits) with `proxy`, which it
        closes with it; the supervisor's configuration `config` goes with the first call (no
        round trip of its own), which fails with SandboxError when it is refused."""
        self.id = spec.session_id or self.id
        self._spec = spec
        self._proxy = proxy
        self._configure_frame = encode_frame({"op": "configure", "config": config})

    def _ready_wait(self) -> None:
        """Read the supervisor's answer to a configure frame sent with the first call."""
        try:
            ready = self._stream.read_message(time.monotonic() + _START_TIMEOUT_S)
        except (OSError, ValueError) as exc:
            self._break(f"reading the supervisor's answer failed: {exc}")
        if ready is None or ready.get("op") != "ready":
            detail = ready.get("message") if ready else "no answer"
            self._break(f"the sandbox supervisor did not start: {detail}")

    @property
    def container_id(self) -> str:
        return str(self._container.id)

    def exec(self, request: ExecRequest) -> ExecResult:
        """Run `request.argv` inside the container (as uid 10001, under the supervisor's per-call
        rlimits, seccomp filter, timeout, output cap and process sweep) and wait for it.

        Raises ValueError for a malformed request, SandboxError when the session is closed or its
        supervisor stopped answering (the session is then closed, never reused)."""
        message = exec_message(request, self._spec.limits)
        with self._lock:
            if self._closed:
                raise SandboxError(f"docker backend: session {self.id} is closed")
            if request.resident and not request.resident_stop:
                self._make_room()
            self._caller = threading.get_ident()
            try:
                oom_before = _read_oom_kills(self._oom_file)
                configure, self._configure_frame = self._configure_frame, b""
                try:
                    self._stream.send(configure + encode_frame(message))
                except (OSError, ProtocolError) as exc:
                    self._break(f"cannot send the call to the supervisor: {exc}")
                if configure:
                    self._ready_wait()
                # the supervisor enforces the timeout itself; the margin only catches a hung one
                deadline = time.monotonic() + message["timeout_s"] + _SUPERVISOR_GRACE_S
                try:
                    reply = self._stream.read_message(deadline)
                except (OSError, ValueError) as exc:
                    self._break(f"reading the supervisor's answer failed: {exc}")
                if reply is None:
                    self._break("the supervisor stopped answering")
                assert reply is not None
                oom_kills = _read_oom_kills(self._oom_file) - oom_before
            finally:
                self._caller = None
                if self._closed:
                    self._close_stream()
        op = reply.get("op")
        if op == "error":
            if reply.get("code") == "invalid_args":
                raise ValueError(f"invalid exec request: {reply.get('message')}")
            raise SandboxError(f"docker backend: sandbox error: {reply.get('message')}")
        if op != "result":
            self.close()
            raise SandboxError(f"docker backend: the supervisor answered {op!r} to an exec request")
        error = reply.get("error")
        if isinstance(error, dict) and error.get("code") == "sandbox_error":
            raise SandboxError(f"docker backend: {error.get('message')}")
        sig = reply.get("signal")
        exit_code = reply.get("exit_code")
        return ExecResult(
            exit_code=exit_code if isinstance(exit_code, int) else None,
            stdout=base64.b64decode(reply.get("stdout_b64") or ""),
            stderr=base64.b64decode(reply.get("stderr_b64") or ""),
            duration_ms=int(reply.get("duration_ms") or 0),
            timed_out=bool(reply.get("timed_out")),
            truncated=bool(reply.get("truncated")),
            # the container's memory cgroup also counts kills the supervisor cannot attribute
            oom=bool(reply.get("oom")) or oom_kills > 0,
            signal=sig if isinstance(sig, int) else None,
            workspace_exceeded=bool(reply.get("workspace_exceeded")),
        )

    def _break(self, why: str) -> None:
        was_closed = self._closed
        tail = bytes(self._stream.stderr_tail).decode(errors="replace").strip()
        self.close()
        if was_closed:
            raise SandboxError(f"docker backend: session {self.id} was closed during the call")
        raise SandboxError(
            f"docker backend: session {self.id} broke down: {why}"
            + (f" (supervisor said: {tail[-500:]})" if tail else "")
        )

    # -- lifetime -----------------------------------------------------------------------------

    def close(self) -> None:
        """Remove the container, stop the egress proxy and delete the runtime dir. Idempotent;
        safe from any thread, also while a call runs: the container is killed at once, the
        running call sees its stream end and fails with SandboxError."""
        from docker.errors import DockerException, NotFound

        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._container.remove(force=True)
        except NotFound:
            pass
        except DockerException as exc:
            log.error("docker backend: could not remove container of %s: %s", self.id, exc)
        if self._proxy is not None:
            with contextlib.suppress(Exception):
                self._proxy.close()
        if self._runtime_dir is not None:
            shutil.rmtree(self._runtime_dir, ignore_errors=True)
        # The attach socket is closed only while no call reads it: closing it under a reader
        # would fail that read with EBADF, or worse let the fd number be reused by another file
        # the reader then reads. The container is gone, so a running call sees EOF promptly and
        # closes the stream itself on its way out (exec's finally) if we cannot take the lock.
        if self._caller == threading.get_ident():
            return
        if self._lock.acquire(timeout=_CLOSE_WAIT_S):
            try:
                self._close_stream()
            finally:
                self._lock.release()
        else:
            log.error(
                "docker backend: a call of %s did not end after its container was removed", self.id
            )

    def _close_stream(self) -> None:
        """Close the attach stream; the caller holds `_lock`."""
        if not self._stream_closed:
            self._stream_closed = True
            self._stream.close()

    def __enter__(self) -> DockerSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
