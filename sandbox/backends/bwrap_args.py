"""What the bubblewrap backend hands bwrap: the sandbox's identity, the system files it binds
read-only, the synthesised /etc files and the proxy environment (see sandbox/backends/bwrap.py)."""

from __future__ import annotations

import os
from pathlib import Path

from sandbox.types import SessionSpec

SANDBOX_UID = 1000
SANDBOX_GID = 1000
BRIDGE_PORT = 3128
PROXY_URL = f"http://127.0.0.1:{BRIDGE_PORT}"
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
#: size cap of /dev/shm inside (bytes)
SHM_BYTES = 16 * 1024 * 1024

# Read-only system files a Python or coreutils process may read; absent ones are skipped.
_SYSTEM_RO_BINDS = (
    "/usr",
    "/etc/alternatives",
    "/etc/ssl/certs",
    "/etc/ca-certificates",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/mime.types",
)
_MERGED_USR = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")

_PASSWD = (
    "root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n"
    f"sandbox:x:{SANDBOX_UID}:{SANDBOX_GID}:sandbox:/workspace:/bin/sh\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
)
_GROUP = f"root:x:0:\nsandbox:x:{SANDBOX_GID}:\nnogroup:x:65534:\n"
_HOSTS = "127.0.0.1 localhost sandbox\n::1 localhost\n"
_NSSWITCH = "passwd: files\ngroup: files\nhosts: files\n"


def _data_fd(text: str) -> int:
    """A pipe read end holding `text` (small: fits the pipe buffer), for --ro-bind-data."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, text.encode())
    finally:
        os.close(write_end)
    return read_end


def environment(spec: SessionSpec) -> dict[str, str]:
    """The environment every command of a session gets: the base, the session's own variables,
    and the proxy variables when (and only when) the network is on; NO_PROXY is never set."""
    env = {
        "PATH": DEFAULT_PATH,
        "HOME": "/workspace",
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",
    }
    env.update(spec.environment)
    for name in ("NO_PROXY", "no_proxy", *PROXY_VARS):
        env.pop(name, None)
    if spec.network.enabled:
        env.update(dict.fromkeys(PROXY_VARS, PROXY_URL))
    return env


def namespace_args() -> list[str]:
    """bwrap's arguments for the namespaces, the identity and the capabilities of a sandbox."""
    return [
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        # the supervisor itself is PID 1: non-dumpable (so no command can open its
        # /proc/1/mem or environ) and immune to signals sent from inside the namespace
        "--as-pid-1",
        "--new-session",
        "--clearenv",
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_GID),
        "--hostname",
        "sandbox",
        "--cap-drop",
        "ALL",
    ]


def filesystem_args() -> list[str]:
    """bwrap's arguments for the read-only system files, /proc and a minimal /dev."""
    args: list[str] = []
    for name in _MERGED_USR:
        host = Path("/") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), f"/{name}"]
        elif host.is_dir():
            args += ["--ro-bind", str(host), f"/{name}"]
    for path in _SYSTEM_RO_BINDS:
        args += ["--ro-bind-try", path, path]
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--size", str(SHM_BYTES), "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    return args
