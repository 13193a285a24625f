"""Run one tool call in a session and build its ToolResult.

Errors are data: a bad argument, a refused command, a failed program, an HTTP error or a broken
sandbox all come back as ``ToolResult(ok=False, error_code=...)``. Only programming errors (a
wrong type passed by the caller of this library) raise.

Output rules
------------
- Every result's ``output`` is passed through ``redact`` with the call's credentials before it
  is returned, whatever the tool and whatever the outcome.
- Output caps: code 32 KB, bash 10 KB (stdout then stderr, each kept by the sandbox up to the cap
  plus a margin so a credential cut at the edge is still recognised, then the redacted text is
  cut to the cap). A cut sets ``truncated=True`` and appends a marker line; it does not by itself
  make the call fail: ``ok`` follows the exit status and ``error_code`` stays None when the
  program succeeded.
- Provenance: ``fetch`` is always "web"; ``bash`` is "web" when the command uses a
  network-capable program (curl, wget, ...); ``code`` is "web" when the run has network access
  (the program may print what it downloaded), else "internal"; file tools are "internal".
- Timeouts: ``code`` and ``bash`` timeouts are not retryable (the same program would run out the
  clock again); fetch timeouts and sandbox errors are.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sandbox.tools.bash import DEFAULT_BASH_ALLOWLIST, BashRefused, allowlist_from, validate_bash
from sandbox.tools.redact import (
    UnknownCredential,
    placeholders_in,
    placeholders_to_env_refs,
    redact,
    substitute_placeholders,
)
from sandbox.tools.registry import (
    BASH_OUTPUT_BYTES,
    BASH_TIMEOUT_S,
    CODE_NETWORK_TIMEOUT_S,
    CODE_OUTPUT_BYTES,
    CODE_TIMEOUT_S,
    FETCH_TIMEOUT_S,
    FILE_TIMEOUT_S,
    TOOLS,
    WRITE_MAX_BYTES,
    ToolSpec,
)
from sandbox.types import (
    ErrorCode,
    ExecRequest,
    ExecResult,
    Provenance,
    SandboxError,
    Session,
    ToolResult,
)

#: the in-sandbox interpreter and helper script (sandbox/inside is mounted read-only there)
PYTHON = "/usr/bin/python3"
INSIDE_TOOLS = "/opt/motor-cortex/tools.py"

#: extra bytes kept beyond a cap so a credential straddling the cut is still redacted
_REDACT_MARGIN = 4096
#: what the in-sandbox helper may print for one file/fetch call (JSON-escaped output)
_HELPER_OUTPUT_BYTES = 8 * 1024 * 1024

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: credential names never exported as environment variables: they would change how programs
#: in the sandbox run or where they connect
_RESERVED_ENV = re.compile(
    r"^(PATH|HOME|USER|SHELL|PWD|TMPDIR|LANG|LC_.*|TERM|IFS|PS\d|ENV|BASH_.*|BASHOPTS|SHELLOPTS"
    r"|LD_.*|PYTHON.*|MOTOR_.*|SSL_.*|CURL_.*|REQUESTS_CA_BUNDLE|(?i:[a-z_]*_proxy)|NO_PROXY)$"
)


def credential_env(credentials: Mapping[str, str]) -> dict[str, str]:
    """The environment variables that carry `credentials` into one call: a credential named
    NAME becomes ``$NAME`` when NAME is a valid, non-reserved variable name."""
    return {
        name: value
        for name, value in credentials.items()
        if _ENV_NAME.fullmatch(name) and not _RESERVED_ENV.match(name) and "\x00" not in value
    }


@dataclass(frozen=True, slots=True)
class _Outcome:
    ok: bool
    output: str
    error_code: ErrorCode | None = None
    retryable: bool = False
    provenance: Provenance = "internal"
    exit_code: int | None = None
    timed_out: bool = False
    truncated: bool = False


class _InvalidArgs(Exception):
    pass


def execute_tool(
    session: Session,
    name: str,
    args: Mapping[str, Any],
    *,
    credentials: Mapping[str, str] | None = None,
    bash_allowlist: Sequence[str] = DEFAULT_BASH_ALLOWLIST,
    network_enabled: bool,
) -> ToolResult:
    """Validate `args`, run tool `name` in `session` and return its redacted result envelope.

    `credentials` (name → value) are exposed to `code`, `bash` and `fetch` as environment
    variables of this one call; ``<credential:NAME>`` placeholders in their arguments are
    replaced (see the tool descriptions); file tools get neither. `network_enabled` says whether
    the session's egress policy allows any domain: it sets the `code` timeout and makes `fetch`
    answer network_blocked without trying when False.
    """
    creds: Mapping[str, str] = credentials or {}
    started = time.monotonic()
    try:
        spec = TOOLS.get(name)
        if spec is None:
            raise _InvalidArgs(f"unknown tool {name!r}; known tools: {', '.join(TOOLS)}")
        clean = validate_args(spec, args)
        outcome = _dispatch(session, name, clean, creds, bash_allowlist, network_enabled)
    except _InvalidArgs as exc:
        outcome = _Outcome(ok=False, output=str(exc), error_code=ErrorCode.INVALID_ARGS)
    except UnknownCredential as exc:
        outcome = _Outcome(ok=False, output=str(exc), error_code=ErrorCode.INVALID_ARGS)
    except SandboxError as exc:
        outcome = _Outcome(
            ok=False,
            output=f"the sandbox failed: {exc}",
            error_code=ErrorCode.SANDBOX_ERROR,
            retryable=True,
        )
    return ToolResult(
        ok=outcome.ok,
        output=redact(outcome.output, creds),
        error_code=outcome.error_code,
        retryable=outcome.retryable,
        provenance=outcome.provenance,
        duration_ms=int((time.monotonic() - started) * 1000),
        exit_code=outcome.exit_code,
        timed_out=outcome.timed_out,
        truncated=outcome.truncated,
    )


# --------------------------------------------------------------------------- arguments


def validate_args(spec: ToolSpec, args: object) -> dict[str, Any]:
    """Check `args` against the tool's JSON schema subset; raise _InvalidArgs naming the rule."""
    if not isinstance(args, Mapping):
        raise _InvalidArgs(f"{spec.name}: arguments must be a JSON object")
    unknown = sorted(str(k) for k in args if k not in spec.parameters)
    if unknown:
        raise _InvalidArgs(
            f"{spec.name}: unknown argument(s) {', '.join(unknown)}; "
            f"accepted: {', '.join(spec.parameters)}"
        )
    for key in spec.required:
        if args.get(key) is None:
            raise _InvalidArgs(f"{spec.name}: missing required argument {key!r}")
    clean: dict[str, Any] = {}
    for key, value in args.items():
        if value is None:
            continue
        _check_value(spec.name, key, spec.parameters[key], value)
        clean[key] = value
    return clean


def _check_value(tool: str, key: str, schema: Mapping[str, Any], value: object) -> None:
    kind = schema.get("type")
    where = f"{tool}: argument {key!r}"
    if kind == "string":
        if not isinstance(value, str):
            raise _InvalidArgs(f"{where} must be a string")
        if "enum" in schema and value.upper() not in schema["enum"]:
            raise _InvalidArgs(f"{where} must be one of {', '.join(schema['enum'])}")
        if len(value) < int(schema.get("minLength", 0)):
            raise _InvalidArgs(f"{where} must not be empty")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise _InvalidArgs(
                f"{where} is {len(value)} characters long; the limit is {schema['maxLength']}"
            )
    elif kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _InvalidArgs(f"{where} must be an integer")
        if "minimum" in schema and value < schema["minimum"]:
            raise _InvalidArgs(f"{where} must be at least {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            raise _InvalidArgs(f"{where} must be at most {schema['maximum']}")
    elif kind == "boolean":
        if not isinstance(value, bool):
            raise _InvalidArgs(f"{where} must be true or false")
    elif kind == "object":
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise _InvalidArgs(f"{where} must be an object whose values are strings")


# --------------------------------------------------------------------------- dispatch


def _dispatch(
    session: Session,
    name: str,
    args: dict[str, Any],
    creds: Mapping[str, str],
    bash_allowlist: Sequence[str],
    network_enabled: bool,
) -> _Outcome:
    if name == "code":
        return _run_code(session, args, creds, network_enabled)
    if name == "bash":
        return _run_bash(session, args, creds, bash_allowlist)
    if name == "fetch":
        return _run_fetch(session, args, creds, network_enabled)
    if name == "write" and len(str(args["content"]).encode()) > WRITE_MAX_BYTES:
        size = len(str(args["content"]).encode())
        return _Outcome(
            ok=False,
            output=f"write: content is {size} bytes; the limit is {WRITE_MAX_BYTES} bytes",
            error_code=ErrorCode.TOO_LARGE,
        )
    return _run_helper(session, name, args, env={}, timeout_s=FILE_TIMEOUT_S)


def _run_code(
    session: Session, args: dict[str, Any], creds: Mapping[str, str], network_enabled: bool
) -> _Outcome:
    source = substitute_placeholders(str(args["code"]), creds)
    timeout = CODE_NETWORK_TIMEOUT_S if network_enabled else CODE_TIMEOUT_S
    result = session.exec(
        ExecRequest(
            # -P -s rather than -I: the same isolation from the workspace (not on sys.path) and
            # the user site, but the session's PYTHONPATH (a dependency layer,
            # sandbox.layers) is honoured; a credential never sets a PYTHON* variable.
            argv=[PYTHON, "-P", "-s", "-"],
            stdin=source.encode("utf-8"),
            timeout_s=timeout,
            env=credential_env(creds),
            output_limit=CODE_OUTPUT_BYTES + _REDACT_MARGIN,
        )
    )
    outcome = _process_outcome(result, creds, cap=CODE_OUTPUT_BYTES, timeout_s=timeout)
    if network_enabled:
        # a program that can reach the web may print what it fetched: treat it as untrusted
        return dataclasses.replace(outcome, provenance="web")
    return outcome


def _run_bash(
    session: Session,
    args: dict[str, Any],
    creds: Mapping[str, str],
    bash_allowlist: Sequence[str],
) -> _Outcome:
    try:
        allowlist = allowlist_from(bash_allowlist)
    except ValueError as exc:
        raise _InvalidArgs(f"bash: {exc}") from None
    command = str(args["command"])
    exported = credential_env(creds)
    unusable = [n for n in placeholders_in(command) if n in creds and n not in exported]
    if unusable:
        raise _InvalidArgs(
            "bash: credential(s) "
            + ", ".join(unusable)
            + " cannot be used in a shell command (the name is not a usable environment variable)"
        )
    command = placeholders_to_env_refs(command, creds)
    try:
        check = validate_bash(command, allowlist)
    except BashRefused as exc:
        code = ErrorCode.INVALID_ARGS if exc.rule == "parse" else ErrorCode.DENIED
        return _Outcome(
            ok=False, output=f"bash: refused by rule '{exc.rule}': {exc.message}", error_code=code
        )
    request = json.dumps({"command": command, "allowlist": list(allowlist)})
    result = session.exec(
        ExecRequest(
            argv=[PYTHON, "-I", "-B", INSIDE_TOOLS, "bash"],
            stdin=request.encode("utf-8"),
            timeout_s=BASH_TIMEOUT_S,
            env=exported,
            output_limit=BASH_OUTPUT_BYTES + _REDACT_MARGIN,
        )
    )
    outcome = _process_outcome(result, creds, cap=BASH_OUTPUT_BYTES, timeout_s=BASH_TIMEOUT_S)
    if check.uses_network:
        return dataclasses.replace(outcome, provenance="web")
    return outcome


def _run_fetch(
    session: Session, args: dict[str, Any], creds: Mapping[str, str], network_enabled: bool
) -> _Outcome:
    if not network_enabled:
        return _Outcome(
            ok=False,
            output="this run has no network access; use ask_user to request a domain",
            error_code=ErrorCode.NETWORK_BLOCKED,
        )
    url = str(args["url"])
    if not re.match(r"(?i)https?://[^/?#]", url):
        raise _InvalidArgs(f"fetch: {url!r} is not an absolute http:// or https:// URL")
    resolved = substitute_placeholders(args, creds)
    outcome = _run_helper(
        session, "fetch", resolved, env=credential_env(creds), timeout_s=FETCH_TIMEOUT_S
    )
    return dataclasses.replace(outcome, provenance="web")


def _run_helper(
    session: Session, op: str, args: Mapping[str, Any], *, env: Mapping[str, str], timeout_s: float
) -> _Outcome:
    result = session.exec(
        ExecRequest(
            argv=[PYTHON, "-I", "-B", INSIDE_TOOLS, op],
            stdin=json.dumps(dict(args)).encode("utf-8"),
            timeout_s=timeout_s,
            env=env,
            output_limit=_HELPER_OUTPUT_BYTES,
        )
    )
    if result.workspace_exceeded:
        return _Outcome(
            ok=False,
            output=f"{op}: the workspace went over its disk quota",
            error_code=ErrorCode.TOO_LARGE,
        )
    if result.timed_out:
        return _Outcome(
            ok=False,
            output=f"{op}: timed out after {timeout_s:.0f} s",
            error_code=ErrorCode.TIMEOUT,
            retryable=True,
            timed_out=True,
        )
    try:
        payload = json.loads(result.stdout.decode("utf-8"))
        if not isinstance(payload, dict):
            raise ValueError("not an object")
    except ValueError:
        tail = result.stderr.decode("utf-8", errors="replace")[-2000:]
        code = ErrorCode.OOM if result.oom else ErrorCode.SANDBOX_ERROR
        return _Outcome(
            ok=False,
            output=f"{op}: the in-sandbox helper failed (exit {result.exit_code}): {tail}".strip(),
            error_code=code,
            retryable=code is ErrorCode.SANDBOX_ERROR,
            exit_code=result.exit_code,
        )
    raw_code = payload.get("error_code")
    try:
        error_code = ErrorCode(raw_code) if raw_code else None
    except ValueError:
        error_code = ErrorCode.SANDBOX_ERROR
    return _Outcome(
        ok=bool(payload.get("ok")),
        output=str(payload.get("output", "")),
        error_code=error_code,
        retryable=bool(payload.get("retryable")),
        truncated=bool(payload.get("truncated")),
    )


# --------------------------------------------------------------------------- output


def _cut(text: str, cap: int) -> tuple[str, bool]:
    data = text.encode("utf-8")
    if len(data) <= cap:
        return text, False
    return data[:cap].decode("utf-8", errors="ignore"), True


def _process_outcome(
    result: ExecResult, creds: Mapping[str, str], *, cap: int, timeout_s: float
) -> _Outcome:
    stdout = result.stdout.decode("utf-8", errors="replace")
    stderr = result.stderr.decode("utf-8", errors="replace")
    text = stdout
    if stderr:
        text += ("\n" if text and not text.endswith("\n") else "") + "[stderr]\n" + stderr
    text, cut = _cut(redact(text, creds), cap)
    truncated = cut or result.truncated
    if truncated:
        text += f"\n[output truncated at {cap} bytes]"
    if result.timed_out:
        return _Outcome(
            ok=False,
            output=f"timed out after {timeout_s:.0f} s and was killed\n{text}".rstrip(),
            error_code=ErrorCode.TIMEOUT,
            timed_out=True,
            truncated=truncated,
            exit_code=result.exit_code,
        )
    if result.workspace_exceeded:
        return _Outcome(
            ok=False,
            output=f"the workspace went over its disk quota; the command was killed\n{text}".rstrip(),
            error_code=ErrorCode.TOO_LARGE,
            truncated=truncated,
            exit_code=result.exit_code,
        )
    if result.oom:
        return _Outcome(
            ok=False,
            output=f"ran out of memory and was killed\n{text}".rstrip(),
            error_code=ErrorCode.OOM,
            truncated=truncated,
            exit_code=result.exit_code,
        )
    if result.exit_code == 0:
        return _Outcome(ok=True, output=text, truncated=truncated, exit_code=0)
    status = (
        f"exit status {result.exit_code}"
        if result.exit_code is not None
        else f"killed by signal {result.signal}"
    )
    return _Outcome(
        ok=False,
        output=f"{text.rstrip()}\n[{status}]".lstrip("\n"),
        error_code=ErrorCode.EXIT_NONZERO,
        truncated=truncated,
        exit_code=result.exit_code,
    )
