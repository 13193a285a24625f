"""The `local` backend: NO isolation. Commands run as the worker's own user with subprocess.

For development machines that have neither bubblewrap nor Docker. It is only reachable through
``get_backend("local", allow_local=True)`` and warns (logging + warnings.warn) on every session.
What it still does: a clean environment built only from the session and call, the workspace as
working directory, a wall-clock timeout that kills the command's whole process group, and output
caps. What it cannot do: contain anything.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import subprocess
import threading
import time
import warnings
from pathlib import Path

from sandbox.types import ExecRequest, ExecResult, SandboxError, SessionSpec

logger = logging.getLogger(__name__)

WARNING = (
    "sandbox backend 'local' runs commands WITHOUT isolation, as the worker's own user; "
    "use it on a development machine only"
)


class LocalSession:
    backend = "local"

    def __init__(self, spec: SessionSpec, session_id: str) -> None:
        self.id = session_id
        self.spec = spec
        self.last_used = time.monotonic()
        self._closed = False
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        return self._closed

    def _cwd(self, cwd: str) -> Path:
        workspace = Path(self.spec.workspace).resolve()
        if cwd == "/workspace" or cwd.startswith("/workspace/"):
            return workspace / cwd[len("/workspace") :].lstrip("/")
        return workspace

    def exec(self, request: ExecRequest) -> ExecResult:
        if isinstance(request.argv, str | bytes) or not request.argv:
            raise ValueError("ExecRequest.argv must be a non-empty sequence of strings")
        limits = self.spec.limits
        timeout = request.timeout_s if request.timeout_s is not None else limits.default_timeout_s
        limit = request.output_limit if request.output_limit is not None else limits.output_bytes
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
        env["HOME"] = str(Path(self.spec.workspace).resolve())
        env.update(self.spec.environment)
        env.update(request.env)
        with self._lock:
            if self._closed:
                raise SandboxError(f"sandbox session {self.id} is closed")
            self.last_used = time.monotonic()
            started = time.monotonic()
            try:
                proc = subprocess.Popen(
                    list(request.argv),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=self._cwd(request.cwd),
                    env=env,
                    start_new_session=True,
                )
            except FileNotFoundError:
                msg = f"{request.argv[0]}: command not found".encode()
                return ExecResult(exit_code=127, stdout=b"", stderr=msg, duration_ms=0)
            except PermissionError as exc:
                msg = f"{request.argv[0]}: {exc.strerror}".encode()
                return ExecResult(exit_code=126, stdout=b"", stderr=msg, duration_ms=0)
            timed_out = False
            try:
                out, err = proc.communicate(request.stdin, timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                out, err = proc.communicate()
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.returncode
            self.last_used = time.monotonic()
        truncated = len(out) > limit or len(err) > limit
        return ExecResult(
            exit_code=rc if rc >= 0 else None,
            stdout=out[:limit],
            stderr=err[:limit],
            duration_ms=int((time.monotonic() - started) * 1000),
            timed_out=timed_out,
            truncated=truncated,
            signal=-rc if rc < 0 else None,
        )

    def close(self) -> None:
        self._closed = True


class LocalBackend:
    name = "local"

    def open(self, spec: SessionSpec) -> LocalSession:
        if not Path(spec.workspace).is_dir():
            raise SandboxError(f"workspace {spec.workspace} is not a directory")
        logger.warning(WARNING)
        warnings.warn(WARNING, RuntimeWarning, stacklevel=2)
        return LocalSession(spec, spec.session_id or secrets.token_hex(8))
