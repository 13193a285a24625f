"""Runtime directories of bwrap sessions: where they live, who owns one (pid + start time in
``owner.json``) and which of their files a process still holds open."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from sandbox.types import SandboxError

#: the file in a session's runtime dir naming its owning process and sandbox uid
OWNER_FILE = "owner.json"
#: the file in a pooled session's runtime dir naming the run that adopted it (the dir's own
#: name, which bwrap's command line shows, names the pool slot it was started as)
SESSION_FILE = "session"


def _default_runtime_root() -> Path:
    configured = os.environ.get("MOTOR_SANDBOX_RUNTIME_DIR")
    if configured:
        return Path(configured)
    if os.geteuid() == 0 and os.path.isdir("/run") and os.access("/run", os.W_OK):
        return Path("/run/motor-cortex")
    return Path(tempfile.gettempdir()) / f"motor-cortex-{os.geteuid()}"


def _private_dir(path: Path, mode: int = 0o711) -> Path:
    """Create `path` (mode `mode`) or accept an existing directory we own; refuse symlinks and
    directories owned by someone else (another user squatting on a shared /tmp)."""
    try:
        path.mkdir(mode=mode, parents=True)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise SandboxError(f"runtime directory {path} is not a directory owned by this user")
    if st.st_mode & 0o022:
        os.chmod(path, mode)
    return path


def _process_start(pid: int) -> str:
    """The kernel's start time of `pid` (clock ticks since boot), "" when it does not exist.
    A pid alone can be reused after its process died; pid + start time cannot."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return ""
    return fields[19].decode() if len(fields) > 19 else ""


#: (pid, start time) of this process, read once per process (a forked child reads its own)
_own_start: tuple[int, str] = (0, "")


def _write_owner(runtime_dir: Path, uid: int | None) -> None:
    """Record who owns a runtime dir (this process: pid + start time) and its sandbox uid."""
    import json

    global _own_start
    pid = os.getpid()
    if _own_start[0] != pid:
        _own_start = (pid, _process_start(pid))
    record = {"pid": pid, "start": _own_start[1], "uid": uid}
    tmp = runtime_dir / f"{OWNER_FILE}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(record))
    tmp.replace(runtime_dir / OWNER_FILE)


def _read_owner(runtime_dir: Path) -> dict[str, Any] | None:
    import json

    try:
        record = json.loads((runtime_dir / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _open_files_under(root: Path) -> set[str]:
    """Paths under `root` that some process holds open."""
    prefix = f"{root}/"
    found: set[str] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{name}/fd")
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{name}/fd/{fd}")
                if target.startswith(prefix):
                    found.add(target)
    return found
