"""What the bubblewrap backend hands bwrap: the sandbox's identity, the system files it binds
read-only, the synthesised /etc files and the proxy environment (see sandbox/backends/bwrap.py)."""

from __future__ import annotations

import os

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
