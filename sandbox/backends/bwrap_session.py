"""One resident bwrap sandbox: the framed conversation with its supervisor, calls and teardown."""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import select
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sandbox.backends._protocol import exec_message
from sandbox.backends.bwrap_uids import _chown_tree, _processes_of_uid, _UidLease
from sandbox.inside.protocol import MAX_FRAME_BYTES, ProtocolError, encode_frame
from sandbox.types import ExecRequest, ExecResult, SandboxError, SessionSpec

logger = logging.getLogger(__name__)

#: how long bwrap + the supervisor may take to come up (seconds)
STARTUP_TIMEOUT_S = 15.0
#: extra time over a call's own timeout before the supervisor is declared hung (seconds)
RESULT_GRACE_S = 15.0
#: how long close() waits for a running call to notice that its sandbox died (seconds)
CLOSE_WAIT_S = 10.0


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(p) for p in fh.read().split()]
    except (OSError, ValueError):
        return []


class BwrapSession:
    """One resident bwrap sandbox. Thread-safe: calls are serialised."""

    backend = "bwrap"

    def __init__(
        self,
        *,
        spec: SessionSpec,
        session_id: str,
        proc: subprocess.Popen[bytes],
        runtime_dir: Path,
        lease: _UidLease | None,
        proxy: Any,
        log_path: Path,
        sandbox_uids: range | None = None,
    ) -> None:
        self.id = session_id
        self.spec = spec
        self._sandbox_uids = sandbox_uids if sandbox_uids is not None else range(0)
        self.host_uid = lease.uid if lease else os.geteuid()
        self._proc = proc
        self._runtime_dir = runtime_dir
        self._lease = lease
        self._proxy = proxy
        self._log_path = log_path
        self._call_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._closed = False
        self._pipes_closed = False
        self._caller: int | None = None
        self.last_used = time.monotonic()
        self._on_close: list[Callable[[BwrapSession], None]] = []
        assert proc.stdin is not None and proc.stdout is not None
        self._wfd = proc.stdin.fileno()
        self._rfd = proc.stdout.fileno()
        self._rbuf = bytearray()
        #: a configure frame sent ahead of the first call (an adopted pooled sandbox)
        self._configure_frame = b""
        #: the supervisor answered (prepared or ready): bwrap had set the sandbox up and only
        #: waits for it (see `_left_nothing_behind`)
        self._supervisor_started = False

    # ------------------------------------------------------------------ protocol plumbing

    def _send(self, message: Mapping[str, Any]) -> None:
        self._send_bytes(encode_frame(message))

    def _send_bytes(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                written = os.write(self._wfd, view)
            except (BrokenPipeError, OSError) as exc:
                raise SandboxError(f"sandbox supervisor is gone: {exc}{self._log_tail()}") from exc
            view = view[written:]

    def _recv(self, deadline: float) -> dict[str, Any]:
        import json
        import struct

        while True:
            if len(self._rbuf) >= 4:
                (size,) = struct.unpack(">I", self._rbuf[:4])
                if size > MAX_FRAME_BYTES:
                    raise SandboxError("sandbox supervisor sent an oversized frame")
                if len(self._rbuf) >= 4 + size:
                    body = bytes(self._rbuf[4 : 4 + size])
                    del self._rbuf[: 4 + size]
                    try:
                        message = json.loads(body)
                    except ValueError as exc:
                        raise SandboxError(f"sandbox supervisor sent garbage: {exc}") from exc
                    if not isinstance(message, dict):
                        raise SandboxError("sandbox supervisor sent a non-object frame")
                    return message
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxError("sandbox supervisor did not answer in time")
            try:
                ready, _, _ = select.select([self._rfd], [], [], remaining)
                if not ready:
                    continue
                chunk = os.read(self._rfd, 1024 * 1024)
            except (OSError, ValueError) as exc:
                raise SandboxError(f"reading from the sandbox supervisor failed: {exc}") from exc
            if not chunk:
                raise SandboxError(f"sandbox supervisor exited{self._log_tail()}")
            self._rbuf += chunk

    def _log_tail(self) -> str:
        try:
            with open(self._log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - 2000))
                tail = fh.read().decode(errors="replace").strip()
        except OSError:
            return ""
        return f": {tail}" if tail else ""

    def prepare(self, config: Mapping[str, Any]) -> None:
        """Have the supervisor of a pooled sandbox harden itself and load what it needs (with
        `config`: the limits its run will have, nothing of the run), and wait until it has (it
        then waits for its configuration)."""
        self._send({"op": "prepare", "config": dict(config)})
        reply = self._recv(time.monotonic() + STARTUP_TIMEOUT_S)
        if reply.get("op") != "prepared":
            raise SandboxError(f"sandbox failed to start: {reply.get('message', reply)}")
        self._supervisor_started = True

    @property
    def lease(self) -> _UidLease | None:
        return self._lease

    @property
    def runtime_dir(self) -> Path:
        return self._runtime_dir

    @property
    def pid(self) -> int:
        """bwrap's pid (the sandbox's processes are below it)."""
        return self._proc.pid

    def alive(self) -> bool:
        """Whether bwrap still runs and the supervisor's stdout is still open (a spare waiting
        in a pool can be killed from outside meanwhile); no round trip."""
        if self._closed or self._proc.poll() is not None:
            return False
        try:
            ready, _, _ = select.select([self._rfd], [], [], 0)
        except (OSError, ValueError):
            return False
        # a prepared supervisor says nothing until it is configured: readable means EOF
        return not ready

    def set_proxy(self, proxy: Any) -> None:
        """The egress proxy this session closes with it (set once, when a run adopts it)."""
        self._proxy = proxy

    def configure_with_first_call(self, config: Mapping[str, Any]) -> None:
        """Configure a prepared (pooled) supervisor in the same write as the session's first
        call, so the call costs no extra round trip; the call fails with SandboxError (and the
        session is closed) when the supervisor does not answer it with `ready`."""
        self._configure_frame = encode_frame({"op": "configure", "config": dict(config)})

    def handshake(self, config: Mapping[str, Any]) -> None:
        self._send({"op": "configure", "config": dict(config)})
        reply = self._recv(time.monotonic() + STARTUP_TIMEOUT_S)
        if reply.get("op") != "ready":
            raise SandboxError(f"sandbox failed to start: {reply.get('message', reply)}")
        self._supervisor_started = True

    def _reclaim_workspace(self) -> None:
        """Give the workspace back to this session's uid when another session took it.

        Two sessions may share a workspace one call at a time: a run's session stays warm in
        one worker process while a slice of the same run in another process opens its own, with
        another leased uid, and chowns the workspace to it. Back in the first session, the
        sandbox uid could no longer enter /workspace (mode 0700) or change the files the other
        one made. Whoever runs a call owns the workspace for it: one lstat per call, a chown of
        the tree only when the owner changed."""
        if self._lease is None:
            return
        workspace = Path(self.spec.workspace)
        try:
            owner = os.lstat(workspace).st_uid
        except OSError:
            return  # gone: the call reports it
        if owner != self._lease.uid:
            logger.info(
                "session %s: workspace %s belonged to uid %s; handing it back to uid %s",
                self.id,
                workspace,
                owner,
                self._lease.uid,
            )
            try:
                _chown_tree(workspace, self._lease.uid, self._lease.uid, self._sandbox_uids)
            except OSError as exc:
                raise SandboxError(
                    f"cannot hand workspace {workspace} to the sandbox uid: {exc}"
                ) from exc

    # ------------------------------------------------------------------ Session API

    @property
    def closed(self) -> bool:
        return self._closed

    def add_close_callback(self, callback: Callable[[BwrapSession], None]) -> None:
        self._on_close.append(callback)

    def exec(self, request: ExecRequest) -> ExecResult:
        message = exec_message(request, self.spec.limits)
        with self._call_lock:
            if self._closed:
                raise SandboxError(f"sandbox session {self.id} is closed")
            self.last_used = time.monotonic()
            self._reclaim_workspace()
            try:
                frame = encode_frame(message)
            except ProtocolError as exc:
                raise ValueError(f"exec request too large: {exc}") from exc
            self._caller = threading.get_ident()
            configure, self._configure_frame = self._configure_frame, b""
            try:
                self._send_bytes(configure + frame)
                if configure:
                    ready = self._recv(time.monotonic() + STARTUP_TIMEOUT_S)
                    if ready.get("op") != "ready":
                        raise SandboxError(
                            f"sandbox failed to start: {ready.get('message', ready)}"
                        )
                reply = self._recv(time.monotonic() + message["timeout_s"] + RESULT_GRACE_S)
            except SandboxError as exc:
                closed_meanwhile = self._closed
                self.close()
                if closed_meanwhile:
                    raise SandboxError(
                        f"sandbox session {self.id} was closed during the call"
                    ) from exc
                raise
            finally:
                self._caller = None
                self.last_used = time.monotonic()
                if self._closed:
                    self._close_pipes()
        op = reply.get("op")
        if op == "error":
            if reply.get("code") == "invalid_args":
                raise ValueError(f"invalid exec request: {reply.get('message')}")
            raise SandboxError(f"sandbox error: {reply.get('message')}")
        if op != "result":
            self.close()
            raise SandboxError(f"sandbox supervisor answered {op!r} to an exec request")
        error = reply.get("error")
        if isinstance(error, dict) and error.get("code") == "sandbox_error":
            raise SandboxError(str(error.get("message")))
        return ExecResult(
            exit_code=reply.get("exit_code"),
            stdout=base64.b64decode(reply.get("stdout_b64") or ""),
            stderr=base64.b64decode(reply.get("stderr_b64") or ""),
            duration_ms=int(reply.get("duration_ms") or 0),
            timed_out=bool(reply.get("timed_out")),
            truncated=bool(reply.get("truncated")),
            oom=bool(reply.get("oom")),
            signal=reply.get("signal"),
            workspace_exceeded=bool(reply.get("workspace_exceeded")),
        )

    def close(self) -> None:
        """Kill the sandbox and everything in it, stop the proxy, remove the runtime dir.
        Idempotent; safe to call from any thread, also while a call is running (that call then
        fails with SandboxError)."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        # Kill the sandbox's init first: the death of a PID namespace's init kills every process
        # in it, and bwrap (its parent) then exits and reaps it, so no zombie is left to the
        # host's init. Killing bwrap's group afterwards covers a bwrap that is still setting up.
        for child in _children(self._proc.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(child, signal.SIGKILL)
        try:
            self._proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                logger.error("bwrap pid %s did not exit after SIGKILL", self._proc.pid)
        clean = False
        if self._lease is not None:
            clean = self._left_nothing_behind()
            deadline = time.monotonic() + 5.0
            while not clean and time.monotonic() < deadline:
                pids = _processes_of_uid(self._lease.uid)
                if not pids:
                    clean = True
                    break
                for pid in pids:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.01)
        if self._proxy is not None:
            try:
                self._proxy.close()
            except Exception:  # noqa: BLE001 - closing must finish the rest of the teardown
                logger.exception("closing the egress proxy of session %s failed", self.id)
        shutil.rmtree(self._runtime_dir, ignore_errors=True)
        if self._lease is not None:
            self._lease.release(clean=clean)
        # The pipes are closed only while no call uses them: closing them under a reader would
        # fail its read with EBADF, or let the fd number be reused by another file the reader
        # then reads. The sandbox is dead, so a running call sees EOF promptly; if the lock
        # cannot be had, that call closes them on its way out (exec's finally).
        if self._caller != threading.get_ident():
            if self._call_lock.acquire(timeout=CLOSE_WAIT_S):
                try:
                    self._close_pipes()
                finally:
                    self._call_lock.release()
            else:
                logger.error("a call of session %s did not end after its sandbox died", self.id)
        for callback in self._on_close:
            with contextlib.suppress(Exception):
                callback(self)

    def _left_nothing_behind(self) -> bool:
        """Whether bwrap's exit shows that no process of the sandbox is left, without a look
        through /proc. The supervisor is the init of the sandbox's PID namespace, and the
        kernel lets an init finish exiting only after every other process of its namespace was
        killed and reaped; bwrap, once the sandbox is set up, only waits for that init and
        exits with its status (128 + the signal that killed it). So a bwrap that ran the
        supervisor (it answered) and exited with the status of a supervisor that ended well (0)
        or was killed (128 + SIGKILL) left nothing of the sandbox uid running. Anything else
        (bwrap killed, still running, failed with an error of its own: status 1) needs the
        look."""
        returncode = self._proc.returncode
        return self._supervisor_started and returncode in (0, 128 + signal.SIGKILL)

    def _close_pipes(self) -> None:
        """Close the supervisor's pipes; the caller holds `_call_lock`."""
        if self._pipes_closed:
            return
        self._pipes_closed = True
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def __enter__(self) -> BwrapSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
