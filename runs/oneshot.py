"""Oneshot: a quick, synchronous Python computation in a fresh sandbox (seed 001, core.act).

No run, no attempt, no mutex, no database row. Each call gets its own sandbox session on an empty
throwaway workspace, with no network (NetworkPolicy() allows no domain), no tools and no
credentials; the session is closed and the workspace removed whatever happens. A sandbox that
cannot start makes the call fail with ``sandbox_error``; the program never runs outside one.

The program's result is what it prints to stdout, followed — as in an interactive interpreter —
by the ``repr`` of its last statement when that is an expression whose value is not None
(so ``2 + 2`` and ``print(2 + 2)`` both give ``"4"``).
"""

from __future__ import annotations

import math
import secrets
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from os import PathLike
from pathlib import Path

from django.conf import settings

from runs.errors import InvalidRunParams

#: the oneshot wall-clock limit (seed 001: core.act timeout max 5000 ms for oneshot), seconds
ONESHOT_MAX_TIMEOUT_S = 5.0
#: most output the caller gets back, bytes (the code tool's cap)
ONESHOT_OUTPUT_BYTES = 32 * 1024
#: longest program accepted, characters (the code tool's cap)
ONESHOT_MAX_CODE_CHARS = 1_000_000
#: how much of a traceback the error keeps (its end: the exception and the innermost frames)
TRACEBACK_TAIL_CHARS = 2000
#: disk the throwaway workspace and /tmp may use inside the sandbox, bytes each
ONESHOT_DISK_BYTES = 16 * 1024 * 1024
#: CPU time rlimit of the program, seconds (above the wall-clock cap, which acts first)
ONESHOT_CPU_SECONDS = 10

PYTHON = "/usr/bin/python3"

# Runs inside the sandbox (`python3 -I -c`), reading the program from stdin. It executes the
# program as a module named __main__ in a file called <oneshot>, prints the repr of a final
# expression, and prints tracebacks without its own frame so the caller sees only their code.
_RUNNER = r"""
import ast, linecache, os, sys, traceback
source = sys.stdin.buffer.read().decode("utf-8", "replace")
sys.stdin = open(os.devnull)
name = "<oneshot>"
linecache.cache[name] = (len(source), None, source.splitlines(True), name)
def fail(skip_own_frame):
    kind, value, tb = sys.exc_info()
    traceback.print_exception(kind, value, tb.tb_next if skip_own_frame and tb else None)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)
try:
    tree = ast.parse(source, name)
except (SyntaxError, ValueError):
    fail(False)
last = None
if tree.body and isinstance(tree.body[-1], ast.Expr):
    last = ast.Expression(tree.body.pop().value)
namespace = {"__name__": "__main__", "__builtins__": __builtins__}
try:
    exec(compile(tree, name, "exec"), namespace)
    if last is not None:
        value = eval(compile(last, name, "eval"), namespace)
        if value is not None:
            print(repr(value))
except SystemExit:
    raise
except BaseException:
    fail(True)
"""


@dataclass(frozen=True, slots=True)
class OneshotResult:
    """What a oneshot call returns. `error` is ``"<code>: <message>"`` when `ok` is False, with
    code one of sandbox_error, timeout, exception, exit_nonzero, oom, too_large, killed."""

    ok: bool
    result: str
    duration_ms: int
    error: str | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def oneshot_run(
    *,
    code: str,
    timeout_s: float = ONESHOT_MAX_TIMEOUT_S,
    scratch_dir: str | PathLike[str] | None = None,
) -> OneshotResult:
    """Run the Python program `code` once in a fresh sandbox and return what it produced.

    `timeout_s` is the program's wall-clock limit (at most 5 s); `scratch_dir` is where the
    throwaway workspace is created (the system temp dir by default). Raises InvalidRunParams,
    before anything is created, for an empty or oversized program or a timeout outside
    (0, 5] seconds. Every other failure — including a sandbox that cannot start — comes back as
    ``ok=False`` with an error.
    """
    _validate(code=code, timeout_s=timeout_s)
    started = time.monotonic()
    workspace: Path | None = None
    session = None
    try:
        from sandbox.backends import get_backend
        from sandbox.types import ExecRequest, Limits, NetworkPolicy, SandboxError, SessionSpec

        try:
            root = Path(scratch_dir) if scratch_dir is not None else Path(tempfile.gettempdir())
            workspace = Path(tempfile.mkdtemp(prefix="motor-oneshot-", dir=root))
            backend = get_backend(
                settings.SANDBOX_BACKEND,
                allow_local=bool(getattr(settings, "SANDBOX_ALLOW_LOCAL", False)),
            )
            session = backend.open(
                SessionSpec(
                    workspace=workspace,
                    network=NetworkPolicy(),  # no allowed domain: no network at all
                    limits=Limits(
                        output_bytes=ONESHOT_OUTPUT_BYTES,
                        workspace_bytes=ONESHOT_DISK_BYTES,
                        tmp_bytes=ONESHOT_DISK_BYTES,
                        cpu_seconds=ONESHOT_CPU_SECONDS,
                        default_timeout_s=timeout_s,
                    ),
                    environment={},
                    session_id=f"oneshot-{secrets.token_hex(6)}",
                )
            )
            outcome = session.exec(
                ExecRequest(
                    argv=[PYTHON, "-I", "-c", _RUNNER],
                    stdin=code.encode("utf-8", errors="replace"),
                    timeout_s=timeout_s,
                    env={},
                    output_limit=ONESHOT_OUTPUT_BYTES,
                )
            )
        except (SandboxError, OSError) as exc:
            return OneshotResult(
                ok=False,
                result="",
                duration_ms=_elapsed_ms(started),
                error=f"sandbox_error: {exc}",
            )
    finally:
        if session is not None:
            session.close()
        if workspace is not None:
            shutil.rmtree(workspace, ignore_errors=True)

    stdout = outcome.stdout.decode("utf-8", errors="replace")
    stderr = outcome.stderr.decode("utf-8", errors="replace")
    duration_ms = _elapsed_ms(started)
    error: str | None = None
    if outcome.timed_out:
        error = f"timeout: the program ran longer than {timeout_s:g} s and was killed"
    elif outcome.oom:
        error = "oom: the program ran out of memory and was killed"
    elif outcome.workspace_exceeded:
        error = (
            f"too_large: the program wrote more than {ONESHOT_DISK_BYTES // (1024 * 1024)} MB "
            "to its workspace and was killed"
        )
    elif outcome.exit_code is None:
        error = f"killed: the program was killed by signal {outcome.signal}"
    elif outcome.exit_code != 0:
        tail = stderr.strip()[-TRACEBACK_TAIL_CHARS:]
        # The runner exits with status 1 after printing an uncaught exception's traceback.
        if outcome.exit_code == 1 and tail:
            error = f"exception: {tail}"
        else:
            error = f"exit_nonzero: the program exited with status {outcome.exit_code}"
            if tail:
                error += f"\n{tail}"
    text = stdout.removesuffix("\n")
    if error is None and stderr:
        text += ("\n" if text else "") + "[stderr]\n" + stderr.removesuffix("\n")
    text, cut = _cut(text, ONESHOT_OUTPUT_BYTES)
    if cut or outcome.truncated:
        text += f"\n[output truncated at {ONESHOT_OUTPUT_BYTES} bytes]"
    return OneshotResult(ok=error is None, result=text, duration_ms=duration_ms, error=error)


def _validate(*, code: object, timeout_s: object) -> None:
    if not isinstance(code, str) or not code.strip():
        raise InvalidRunParams("code: must be a non-empty Python program", field="code")
    if len(code) > ONESHOT_MAX_CODE_CHARS:
        raise InvalidRunParams(
            f"code: {len(code)} characters is over the oneshot limit of "
            f"{ONESHOT_MAX_CODE_CHARS} characters",
            field="code",
        )
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float):
        raise InvalidRunParams("timeout_s: must be a number of seconds", field="timeout_s")
    if not math.isfinite(timeout_s) or timeout_s <= 0:
        raise InvalidRunParams(f"timeout_s: {timeout_s} must be more than 0 s", field="timeout_s")
    if timeout_s > ONESHOT_MAX_TIMEOUT_S:
        raise InvalidRunParams(
            f"timeout_s: {timeout_s:g} s is above the oneshot limit of "
            f"{ONESHOT_MAX_TIMEOUT_S:g} s (5000 ms); longer work needs an agentic run",
            field="timeout_s",
        )


def _cut(text: str, cap: int) -> tuple[str, bool]:
    data = text.encode("utf-8")
    if len(data) <= cap:
        return text, False
    return data[:cap].decode("utf-8", errors="ignore"), True


def _elapsed_ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
