"""Escape suite, disk: every place a sandboxed process can write is bounded (bwrap and docker).

The rule (sandbox/backends/mounts.py): a sandboxed process may write only to the workspace,
whose size the supervisor's quota caps, and to tmpfs mounts with an explicit size. These tests
look from the inside — they enumerate every mount the process sees, find each one it can create
or grow a file in, and then try to fill each — so a writable bind added anywhere, by any code
path (the egress socket directory of a networked session, a read-only mount list gone wrong),
shows up here as an unbounded mount.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbox.types import ExecRequest, Limits, NetworkPolicy, Session
from tests.sandbox.conftest import SandboxFactory

pytestmark = pytest.mark.slow

MIB = 1024 * 1024
LIMITS = Limits(
    tmp_bytes=4 * MIB,
    workspace_bytes=8 * MIB,
    # big enough that no single-file cap hides an unbounded mount: the filler writes many files
    file_size_bytes=64 * MIB,
)
#: the filler gives up after this much; every bound of LIMITS (and the 16 MiB /dev/shm) is below
FILL_CAP_BYTES = 48 * MIB

# Kernel interfaces that are not storage: their files are fixed-size knobs or objects charged to
# the sandbox's own memory limits, never to a disk.
PSEUDO_FS = {"proc", "sysfs", "cgroup", "cgroup2", "devpts", "mqueue", "securityfs", "debugfs"}

# Prints every mount this process can write to: a directory of the mount accepting a new file, or
# a bind-mounted single file opening for append. Mount points come from /proc/self/mountinfo;
# directories are walked within their own mount (bounded), because a read-only-looking mount
# point may hold a writable subdirectory.
ENUMERATE = r"""
import json, os, sys
pseudo = set(sys.argv[1].split(","))
mounts = []
with open("/proc/self/mountinfo") as fh:
    for line in fh:
        left, _, right = line.partition(" - ")
        fields = left.split()
        point = fields[4].encode().decode("unicode_escape")
        fstype, source, superopts = (right.split() + ["", "", ""])[:3]
        mounts.append((point, fields[5].split(","), fstype, superopts.split(",")))
points = {m[0] for m in mounts}
found = {}
for point, opts, fstype, superopts in mounts:
    if fstype in pseudo or not os.path.lexists(point):
        continue
    entry = {"fstype": fstype, "size": [o for o in superopts if o.startswith("size=")]}
    if os.path.isfile(point):
        try:
            with open(point, "ab"):
                found[point] = dict(entry, kind="file", where=point)
        except OSError:
            pass
        continue
    dev = os.stat(point).st_dev
    seen = 0
    for dirpath, dirnames, _ in os.walk(point):
        dirnames[:] = [
            d for d in dirnames
            if os.path.join(dirpath, d) not in points
            and os.lstat(os.path.join(dirpath, d)).st_dev == dev
        ]
        seen += 1
        if seen > 5000:
            break
        probe = os.path.join(dirpath, ".motor-probe")
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError:
            continue
        os.close(fd)
        os.unlink(probe)
        found[point] = dict(entry, kind="dir", where=dirpath)
        break
print(json.dumps(found))
"""

# Writes 1 MiB files (or appends 1 MiB chunks to a file) at argv[2] until an error or the cap;
# prints how many bytes landed and the errno that stopped it (null when the cap was reached).
FILL = r"""
import errno, json, os, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
kind, where, cap = sys.argv[1], sys.argv[2], int(sys.argv[3])
chunk = b"x" * (1024 * 1024)
written, stopped = 0, None
n = 0
while written < cap:
    path = where if kind == "file" else os.path.join(where, f".motor-fill-{n}")
    try:
        with open(path, "ab" if kind == "file" else "wb") as fh:
            while True:
                count = fh.write(chunk)
                fh.flush()
                os.fsync(fh.fileno())
                written += count
                if kind == "dir" or written >= cap:
                    break
    except OSError as exc:
        stopped = exc.errno
        break
    n += 1
print(json.dumps({"written": written, "errno": stopped}))
"""


def writable_mounts(session: Session) -> dict[str, dict[str, object]]:
    result = session.exec(
        ExecRequest(argv=["python3", "-c", ENUMERATE, ",".join(sorted(PSEUDO_FS))], timeout_s=60)
    )
    assert result.exit_code == 0, result.stderr.decode(errors="replace")
    found = json.loads(result.stdout)
    assert isinstance(found, dict)
    return found


def fill(session: Session, kind: str, where: str) -> tuple[int, int | None, bool]:
    """(bytes written, errno that stopped the writer or None, whether the call was killed for
    going over the workspace quota)."""
    result = session.exec(
        ExecRequest(argv=["python3", "-c", FILL, kind, where, str(FILL_CAP_BYTES)], timeout_s=60)
    )
    if result.workspace_exceeded:
        return -1, None, True
    assert result.exit_code == 0, result.stderr.decode(errors="replace")
    outcome = json.loads(result.stdout)
    return int(outcome["written"]), outcome["errno"], False


def assert_every_writable_mount_is_bounded(session: Session) -> dict[str, dict[str, object]]:
    # when the sandbox lists every mount it can write to
    found = writable_mounts(session)
    # then each is the workspace or a tmpfs with an explicit size...
    for point, info in found.items():
        assert point == "/workspace" or (info["fstype"] == "tmpfs" and info["size"]), (
            f"{point} is writable from inside but is neither the workspace nor a sized tmpfs: "
            f"{info}"
        )
    # ...and filling each one stops at its bound, far below the filler's cap (the workspace
    # last: a full workspace leaves the next calls no file size at all)
    for point, info in sorted(found.items(), key=lambda item: item[0] == "/workspace"):
        written, stopped, over_quota = fill(session, str(info["kind"]), str(info["where"]))
        if point == "/workspace":
            assert over_quota or stopped is not None, f"/workspace took {written} bytes"
        else:
            assert written < FILL_CAP_BYTES, f"{point} took {written} bytes without an error"
            assert stopped is not None
    return found


def test_every_writable_mount_of_a_session_is_bounded(
    open_sandbox: SandboxFactory, backend_name: str
) -> None:
    # given a session without network
    session = open_sandbox(backend_name, limits=LIMITS)
    # when every writable mount is listed and filled, then each is bounded
    found = assert_every_writable_mount_is_bounded(session)
    # and the writable set is exactly the workspace, /tmp and /dev/shm
    assert {"/workspace", "/tmp"} <= set(found) <= {"/workspace", "/tmp", "/dev/shm"}


def test_every_writable_mount_of_a_networked_session_is_bounded(
    open_sandbox: SandboxFactory, backend_name: str, tmp_path: Path
) -> None:
    # given a session with network, whose egress socket directory is mounted inside
    session = open_sandbox(
        backend_name,
        limits=LIMITS,
        network=NetworkPolicy(allowed_domains=("allowed.test",)),
    )
    # and the egress socket inside it, which the proxy still answers through the bridge
    probe = session.exec(
        ExecRequest(
            argv=[
                "python3",
                "-c",
                "import os, socket, stat;"
                " print(stat.S_ISSOCK(os.stat('/run/motor-cortex/egress.sock').st_mode));"
                " s = socket.create_connection(('127.0.0.1', 3128), timeout=10);"
                " s.sendall(b'CONNECT evil.test:443 HTTP/1.1\\r\\n\\r\\n');"
                " print(s.recv(12).decode())",
            ]
        )
    )
    assert (probe.exit_code, probe.stdout.split()) == (0, [b"True", b"HTTP/1.1", b"403"])
    # when every writable mount is listed and filled, then each is bounded
    found = assert_every_writable_mount_is_bounded(session)
    # and the egress socket's directory is not among them
    assert "/run/motor-cortex" not in found
    assert {"/workspace", "/tmp"} <= set(found) <= {"/workspace", "/tmp", "/dev/shm"}
