"""Host side of the supervisor protocol shared by the bwrap and docker backends."""

from __future__ import annotations

import base64
from typing import Any

from sandbox.types import ExecRequest, Limits


def exec_message(request: ExecRequest, limits: Limits) -> dict[str, Any]:
    """Validate `request` and build the supervisor's `exec` frame, filling the session's defaults
    (timeout in seconds, output cap in bytes).

    Raises ValueError for a malformed request; nothing is sent then.
    """
    if isinstance(request.argv, str | bytes) or not request.argv:
        raise ValueError("ExecRequest.argv must be a non-empty sequence of strings")
    if not all(isinstance(a, str) for a in request.argv):
        raise ValueError("ExecRequest.argv must hold only strings")
    timeout_s = request.timeout_s if request.timeout_s is not None else limits.default_timeout_s
    if timeout_s <= 0:
        raise ValueError("ExecRequest.timeout_s must be positive")
    output_limit = request.output_limit if request.output_limit is not None else limits.output_bytes
    return {
        "op": "exec",
        "argv": list(request.argv),
        "stdin_b64": base64.b64encode(request.stdin).decode(),
        "timeout_s": timeout_s,
        "env": dict(request.env),
        "cwd": request.cwd,
        "output_limit": output_limit,
        "resident": request.resident,
        "resident_stop": request.resident_stop,
    }
