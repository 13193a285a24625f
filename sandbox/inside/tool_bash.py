"""The bash tool of tools.py: a command under bash with only the allowlisted programs on PATH."""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any

if TYPE_CHECKING or __package__:
    from .tool_paths import (
        ToolError,
        _str_arg,
    )
else:  # inside the sandbox, where this directory is first on sys.path (see tools.py)
    from tool_paths import (
        ToolError,
        _str_arg,
    )


BIN_DIRS = ("/usr/local/bin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/sbin", "/sbin")
#: variables that make bash or the dynamic loader run something before the command (compiled
#: where bash runs: compiling a pattern costs milliseconds of a file call's start)
_UNSAFE_ENV = r"^(BASH_ENV|ENV|SHELLOPTS|BASHOPTS|PS4|CDPATH|GLOBIGNORE|LD_.*|BASH_FUNC_.*)$"


def op_bash(request: dict[str, Any]) -> int:
    """Run the command under bash with PATH = a fresh directory of allowlisted symlinks."""
    import re
    import shutil
    import subprocess
    import tempfile

    command = _str_arg(request, "command")
    allowlist = request.get("allowlist")
    if not isinstance(allowlist, list) or not all(
        isinstance(n, str) and re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._+-]*", n) for n in allowlist
    ):
        raise ToolError("invalid_args", "allowlist must be a list of plain command names")
    try:
        bin_dir = tempfile.mkdtemp(prefix="motor-bin-")
    except OSError as exc:
        sys.stderr.write(f"cannot prepare the command directory in /tmp: {exc.strerror}\n")
        return 126
    try:
        for name in allowlist:
            for directory in BIN_DIRS:
                candidate = os.path.join(directory, name)
                if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                    os.symlink(candidate, os.path.join(bin_dir, name))
                    break
        unsafe = re.compile(_UNSAFE_ENV)
        env = {k: v for k, v in os.environ.items() if not unsafe.match(k)}
        env["PATH"] = bin_dir
        sys.stdout.flush()
        completed = subprocess.run(
            ["/bin/bash", "--noprofile", "--norc", "-c", command],
            env=env,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        code = completed.returncode
        return code if code >= 0 else 128 - code
    finally:
        shutil.rmtree(bin_dir, ignore_errors=True)
