"""One long-lived stdio process inside a sandbox session of its own, its stdin and stdout carried
by two FIFOs in the session's workspace.

A session's calls are request/response (`Session.exec` returns when the command ends), so a
server that must stay up runs as one long call in a thread of the host while the host talks to
it through named pipes: ``/workspace/.stdio/in`` and ``/workspace/.stdio/out``. A FIFO is a file
of the bind-mounted workspace, reachable from both sides of every namespace the sandbox has,
and opening one needs no socket (the command seccomp filter refuses AF_UNIX). The process gets
the session's limits, uid, hardening and egress exactly like any command; its stderr is what
the call captured (kept up to the output limit); whatever it starts dies with the call (the
supervisor's sweep) or with the session.

The host opens both FIFOs read-write and non-blocking, so neither side ever waits for the other
to open its end, and the host never reads an end-of-file while the server lives: the end of
the call (`exited`) is what says the process is gone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sandbox.session import ManagedSession, SessionRegistry, open_session
from sandbox.types import Backend, ExecRequest, ExecResult, SandboxError, SessionSpec

logger = logging.getLogger(__name__)

#: where the FIFOs live inside the sandbox (in the workspace)
STDIO_DIR = "/workspace/.stdio"
#: how much of the process's stderr a report keeps (characters, the end of it)
STDERR_TAIL_CHARS = 4000


@dataclass(frozen=True)
class ProcessSpec:
    """What to run and where. `session` is the sandbox (its workspace is created and removed
    here: leave `session.workspace` empty — any value is replaced). `lifetime_s` is the call's
    wall-clock limit: the process is killed then, like any command at its timeout."""

    argv: Sequence[str]
    session: SessionSpec
    env: Mapping[str, str]
    cwd: str = "/workspace"
    lifetime_s: float = 24 * 3600.0
    stderr_bytes: int = 64 * 1024


class SandboxedProcess:
    """A process started with `start`, read from `out_fd`, written to through `in_fd`, ended by
    `close` (idempotent; kills the session and everything in it)."""

    def __init__(
        self,
        spec: ProcessSpec,
        *,
        backend: str | Backend = "bwrap",
        workspace_root: Path | None = None,
        session_registry: SessionRegistry | None = None,
    ) -> None:
        self.spec = spec
        self._backend = backend
        self._workspace_root = workspace_root
        self._registry = session_registry
        self.session: ManagedSession | None = None
        self.workspace: Path | None = None
        self.in_fd = -1
        self.out_fd = -1
        self.result: ExecResult | None = None
        self.error: str | None = None
        self.exited = threading.Event()
        self._thread: threading.Thread | None = None
        self._on_exit: list[Callable[[], None]] = []
        self._closed = False
        self.started_at = 0.0

    def on_exit(self, callback: Callable[[], None]) -> None:
        """Call `callback` (from the call's thread) once the process has ended."""
        self._on_exit.append(callback)
        if self.exited.is_set():
            callback()

    def start(self) -> None:
        """Open the sandbox, create the FIFOs and start the process. Raises SandboxError when
        the sandbox cannot start (nothing is left behind then)."""
        self.started_at = time.monotonic()
        self.workspace = Path(tempfile.mkdtemp(prefix="mcp-", dir=self._workspace_root))
        try:
            stdio = self.workspace / ".stdio"
            stdio.mkdir(mode=0o700)
            os.mkfifo(stdio / "in", 0o600)
            os.mkfifo(stdio / "out", 0o600)
            session_spec = _with_workspace(self.spec.session, self.workspace)
            self.session = open_session(
                session_spec, self._backend, session_registry=self._registry
            )
            # read-write and non-blocking: no open waits for the other side (see the module)
            self.in_fd = os.open(stdio / "in", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
            self.out_fd = os.open(stdio / "out", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        except BaseException:
            self.close()
            raise
        request = ExecRequest(
            argv=[
                "/bin/sh",
                "-c",
                f'exec "$@" <{STDIO_DIR}/in >{STDIO_DIR}/out',
                "sh",
                *self.spec.argv,
            ],
            timeout_s=self.spec.lifetime_s,
            env=dict(self.spec.env),
            cwd=self.spec.cwd,
            output_limit=self.spec.stderr_bytes,
        )
        self._thread = threading.Thread(
            target=self._run, args=(request,), name="sandboxed-stdio", daemon=True
        )
        self._thread.start()

    def _run(self, request: ExecRequest) -> None:
        session = self.session
        assert session is not None
        try:
            self.result = session.exec(request)
        except (SandboxError, ValueError) as exc:
            self.error = str(exc)
        except Exception as exc:  # noqa: BLE001 - reported to whoever waits on the process
            logger.exception("sandboxed stdio process failed")
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.exited.set()
            for callback in list(self._on_exit):
                with contextlib.suppress(Exception):
                    callback()

    @property
    def alive(self) -> bool:
        return self._thread is not None and not self.exited.is_set() and not self._closed

    def stderr_tail(self) -> str:
        """The end of what the process wrote to stderr (empty while it runs)."""
        if self.result is None:
            return ""
        return self.result.stderr.decode("utf-8", "replace")[-STDERR_TAIL_CHARS:]

    def exit_summary(self) -> str:
        """How the process ended, in words: its status or signal, a timeout, OOM, or the
        sandbox's error."""
        if self.error is not None:
            return f"the sandbox failed: {self.error}"
        result = self.result
        if result is None:
            return "still running"
        if result.timed_out:
            return "killed at its time limit"
        if result.oom:
            return "killed: out of memory"
        if result.signal:
            return f"killed by signal {result.signal}"
        return f"exited with status {result.exit_code}"

    def close(self) -> None:
        """Kill the process and its sandbox; close the FIFOs; remove the workspace."""
        if self._closed:
            return
        self._closed = True
        if self.session is not None:
            with contextlib.suppress(Exception):
                self.session.close()
        if self._thread is not None:
            self._thread.join(timeout=15)
        for fd in (self.in_fd, self.out_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.in_fd = self.out_fd = -1
        if self.workspace is not None:
            shutil.rmtree(self.workspace, ignore_errors=True)


def _with_workspace(spec: SessionSpec, workspace: Path) -> SessionSpec:
    # an asyncio server needs its self-pipe: socketpair(AF_UNIX), never socket(AF_UNIX)
    return dataclasses.replace(spec, workspace=workspace, allow_unix_pairs=True)


__all__ = ["STDIO_DIR", "ProcessSpec", "SandboxedProcess"]
