"""The supervisor's wire format: JSON without importing json, length-prefixed frames, the
CONFIG and EXEC requests it accepts and the RESULT it answers (described in supervisor.py).

Standard library only, and only modules written in C: every sandbox start imports it."""

from __future__ import annotations

import binascii
import struct

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from collections.abc import Callable, Mapping
    from typing import Any, BinaryIO


#: the biggest frame either side accepts (64 MiB)
MAX_FRAME_BYTES = 64 * 1024 * 1024
#: the most output kept per stream, whatever a request asks for (16 MiB)
MAX_OUTPUT_BYTES = 16 * 1024 * 1024

_HEADER = struct.Struct(">I")
_READ_CHUNK = 1024 * 1024

#: what an allocation failure under the memory limits prints (Python, libc, C++, V8/node)
_OOM_MARKERS = (
    b"MemoryError",
    b"Cannot allocate memory",
    b"std::bad_alloc",
    b"out of memory",
    b"Array buffer allocation failed",
)


class ProtocolError(Exception):
    """A frame or request that does not follow the protocol."""


# ---------------------------------------------------------------------------- JSON


class _DecodeContext:
    """What `_json.make_scanner` reads from a JSONDecoder: json.loads's defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {
        "-Infinity": float("-inf"),
        "Infinity": float("inf"),
        "NaN": float("nan"),
    }.__getitem__


def _not_serializable(obj: object) -> Any:
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


try:
    import _json

    # it reads the attributes of a JSONDecoder from whatever it is given
    _context: Any = _DecodeContext
    _scan_once: Callable[[str, int], tuple[Any, int]] | None = _json.make_scanner(_context)
except (ImportError, AttributeError):  # an interpreter without json's C half
    _scan_once = None
#: what JSON counts as white space around a value
_JSON_SPACE = " \t\n\r"


def json_loads(data: bytes | str) -> Any:
    """json.loads(data) for UTF-8 `data`: the same parser (json's C scanner), without
    importing json."""
    if _scan_once is None:
        import json

        return json.loads(data)
    text = data.decode("utf-8", "surrogatepass") if isinstance(data, bytes) else data
    start = len(text) - len(text.lstrip(_JSON_SPACE))
    try:
        value, end = _scan_once(text, start)
    except StopIteration as exc:
        from json.decoder import JSONDecodeError  # json.loads's errors, word for word

        raise JSONDecodeError("Expecting value", text, exc.value) from None
    rest = text[end:]
    if rest.strip(_JSON_SPACE):
        from json.decoder import JSONDecodeError

        raise JSONDecodeError("Extra data", text, end + len(rest) - len(rest.lstrip(_JSON_SPACE)))
    return value


def json_dumps(obj: object, *, compact: bool = True) -> str:
    """json.dumps(obj, separators=(",", ":")), or json.dumps(obj) when not `compact`: the same
    encoder (json's C encoder), without importing json."""
    item_separator, key_separator = (",", ":") if compact else (", ", ": ")
    if _scan_once is None:
        import json

        return json.dumps(obj, separators=(item_separator, key_separator))
    encode = _ENCODERS.get(compact)
    if encode is None:
        # (markers, default, encoder, indent, key and item separators, sort_keys, skipkeys,
        # allow_nan)
        encode = _ENCODERS[compact] = _json.make_encoder(
            {},
            _not_serializable,
            _json.encode_basestring_ascii,
            None,
            key_separator,
            item_separator,
            False,
            False,
            True,
        )
    try:
        return "".join(encode(obj, 0))
    except BaseException:
        # its markers (for circular references) may keep what the failed call left there
        _ENCODERS.pop(compact, None)
        raise


#: json_dumps's C encoders (by `compact`), made once per process: one encodes every frame
_ENCODERS: dict[bool, Any] = {}


def _json_dumps_spaced(obj: object) -> str:
    """json.dumps(obj) with its default separators (what tools.py prints when run alone)."""
    return json_dumps(obj, compact=False)


# ---------------------------------------------------------------------------- framing


def encode_frame(message: Mapping[str, Any]) -> bytes:
    body = json_dumps(message).encode()
    if len(body) > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {len(body)} bytes exceeds {MAX_FRAME_BYTES} bytes")
    return _HEADER.pack(len(body)) + body


def _read_exact(stream: BinaryIO, size: int) -> bytes | None:
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        chunk = stream.read(remaining)
        if not chunk:
            if chunks:
                raise ProtocolError("stream ended inside a frame")
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_frame(stream: BinaryIO) -> dict[str, Any] | None:
    """Read one frame; None on a clean EOF before a header."""
    header = _read_exact(stream, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {size} bytes exceeds {MAX_FRAME_BYTES} bytes")
    body = _read_exact(stream, size) if size else b""
    if body is None:
        raise ProtocolError("stream ended inside a frame")
    try:
        message = json_loads(body)
    except ValueError as exc:
        raise ProtocolError(f"frame is not JSON: {exc}") from exc
    if not isinstance(message, dict):
        raise ProtocolError("frame must hold a JSON object")
    return message


def write_frame(stream: BinaryIO, message: Mapping[str, Any]) -> None:
    stream.write(encode_frame(message))
    stream.flush()


# ---------------------------------------------------------------------------- config


class Config:
    """The session's settings (plain classes, not dataclasses: importing dataclasses would add
    milliseconds to every sandbox start)."""

    def __init__(self) -> None:
        self.memory_bytes = 512 * 1024 * 1024
        self.max_processes = 64
        self.file_size_bytes = 64 * 1024 * 1024
        self.open_files = 256
        self.cpu_seconds = 600
        self.output_bytes = 32 * 1024
        self.workspace_bytes = 256 * 1024 * 1024
        self.default_timeout_s = 60.0
        #: seconds between two measurements of the workspace while a command runs
        self.quota_interval_s = 0.05
        self.env: dict[str, str] = {}
        self.workspace = "/workspace"
        self.sweep = True
        self.bridge: dict[str, Any] | None = None
        #: commands may make socketpair(AF_UNIX) (asyncio's self-pipe; see seccomp.py)
        self.unix_pairs = False


class ExecSpec:
    def __init__(
        self,
        *,
        argv: list[str],
        stdin: bytes,
        timeout_s: float,
        env: dict[str, str],
        cwd: str,
        output_limit: int,
        resident: str | None = None,
        resident_stop: bool = False,
    ) -> None:
        self.argv = argv
        self.stdin = stdin
        self.timeout_s = timeout_s
        self.env = env
        self.cwd = cwd
        self.output_limit = output_limit
        #: the resident helper this call talks to (resident.py), None for a command
        self.resident = resident
        #: stop that resident instead of calling it
        self.resident_stop = resident_stop


def _str_map(value: object, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProtocolError(f"{what} must be an object of strings")
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise ProtocolError(f"{what} must map strings to strings")
        if not key or "=" in key or "\0" in key or "\0" in item:
            raise ProtocolError(f"{what} has an invalid variable name or a NUL byte: {key!r}")
        out[key] = item
    return out


def _int(value: object, what: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ProtocolError(f"{what} must be an integer >= {minimum}")
    return value


def parse_config(raw: object) -> Config:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ProtocolError("config must be an object")
    config = Config()
    limits = raw.get("limits") or {}
    if not isinstance(limits, dict):
        raise ProtocolError("config.limits must be an object")
    for name in (
        "memory_bytes",
        "max_processes",
        "file_size_bytes",
        "open_files",
        "cpu_seconds",
        "output_bytes",
        "workspace_bytes",
    ):
        if name in limits:
            setattr(config, name, _int(limits[name], f"limits.{name}"))
    if "default_timeout_s" in limits:
        timeout = limits["default_timeout_s"]
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ProtocolError("limits.default_timeout_s must be a positive number")
        config.default_timeout_s = float(timeout)
    if "quota_interval_s" in limits:
        interval = limits["quota_interval_s"]
        if (
            isinstance(interval, bool)
            or not isinstance(interval, int | float)
            or not (0.01 <= interval <= 60)
        ):
            raise ProtocolError("limits.quota_interval_s must be a number from 0.01 to 60")
        config.quota_interval_s = float(interval)
    config.env = _str_map(raw.get("env"), "config.env")
    workspace = raw.get("workspace", config.workspace)
    if not isinstance(workspace, str) or not workspace.startswith("/"):
        raise ProtocolError("config.workspace must be an absolute path")
    config.workspace = workspace
    config.sweep = bool(raw.get("sweep", True))
    config.unix_pairs = raw.get("unix_pairs", False) is True
    bridge = raw.get("bridge")
    if bridge is not None:
        if not isinstance(bridge, dict) or not isinstance(bridge.get("unix_path"), str):
            raise ProtocolError("config.bridge must be an object with unix_path")
        config.bridge = dict(bridge)
    return config


def parse_exec(raw: Mapping[str, Any], config: Config) -> ExecSpec:
    argv = raw.get("argv")
    if (
        not isinstance(argv, list)
        or not argv
        or not all(isinstance(a, str) and "\0" not in a for a in argv)
        or not argv[0]
    ):
        raise ProtocolError("argv must be a non-empty list of strings without NUL bytes")
    try:
        # what base64.b64decode(..., validate=True) does, without importing base64
        stdin = binascii.a2b_base64(raw.get("stdin_b64") or "", strict_mode=True)
    except (ValueError, TypeError) as exc:
        raise ProtocolError(f"stdin_b64 is not base64: {exc}") from exc
    timeout = raw.get("timeout_s")
    if timeout is None:
        timeout = config.default_timeout_s
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise ProtocolError("timeout_s must be a positive number")
    cwd = raw.get("cwd") or config.workspace
    if not isinstance(cwd, str) or not cwd.startswith("/") or "\0" in cwd:
        raise ProtocolError("cwd must be an absolute path")
    limit = raw.get("output_limit")
    output_limit = config.output_bytes if limit is None else _int(limit, "output_limit")
    output_limit = min(output_limit, MAX_OUTPUT_BYTES)
    env = dict(config.env)
    env.update(_str_map(raw.get("env"), "env"))
    resident = raw.get("resident")
    if resident is not None and not isinstance(resident, str):
        raise ProtocolError("resident must be a string or null")
    return ExecSpec(
        argv=list(argv),
        stdin=stdin,
        timeout_s=float(timeout),
        env=env,
        cwd=cwd,
        output_limit=output_limit,
        resident=resident,
        resident_stop=bool(raw.get("resident_stop", False)),
    )


def _result(
    *,
    exit_code: int | None = None,
    sig: int | None = None,
    stdout: bytes = b"",
    stderr: bytes = b"",
    duration_ms: int = 0,
    timed_out: bool = False,
    truncated: bool = False,
    oom: bool = False,
    workspace_exceeded: bool = False,
    error: tuple[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "op": "result",
        "exit_code": exit_code,
        "signal": sig,
        "stdout_b64": binascii.b2a_base64(stdout, newline=False).decode(),
        "stderr_b64": binascii.b2a_base64(stderr, newline=False).decode(),
        "duration_ms": duration_ms,
        "timed_out": timed_out,
        "truncated": truncated,
        "oom": oom,
        "workspace_exceeded": workspace_exceeded,
        "error": None if error is None else {"code": error[0], "message": error[1]},
    }
