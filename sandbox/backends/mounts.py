"""The writable-mount rule, in one place, checked against what each backend is about to start.

A sandboxed process may write to two kinds of place only:
  * the workspace at /workspace, whose disk use the supervisor's quota caps
    (Limits.workspace_bytes) and which the project created for the session;
  * a tmpfs with an explicit size (/tmp: Limits.tmp_bytes; /dev/shm: a fixed cap), so memory,
    not a host disk, pays for it, and never more than the size.
Everything else it sees is read-only: the root, /usr and the /etc files, the in-sandbox scripts,
read-only mounts a caller asks for, and the egress socket's directory (a socket on a read-only
mount can still be connected to). A backend builds its mount list and hands it to the check for
its kind before it starts anything; a list that breaks the rule is a SandboxError, never a
warning. tests/sandbox/test_writable_mounts.py checks the same rule from inside a session.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sandbox.types import SandboxError

#: the one writable bind mount a session has
WORKSPACE_TARGET = "/workspace"

# bwrap options and how many values follow each. An option missing from this table is refused
# by check_bwrap_args, so a new one is classified (read-only or bounded) before it can be used.
_BWRAP_ARITY = {
    "--unshare-all": 0,
    "--unshare-user": 0,
    "--disable-userns": 0,
    "--die-with-parent": 0,
    "--as-pid-1": 0,
    "--new-session": 0,
    "--clearenv": 0,
    "--uid": 1,
    "--gid": 1,
    "--hostname": 1,
    "--cap-drop": 1,
    "--chdir": 1,
    "--setenv": 2,
    "--symlink": 2,
    "--ro-bind": 2,
    "--ro-bind-try": 2,
    "--ro-bind-data": 2,
    "--proc": 1,
    "--dev": 1,
    "--size": 1,
    "--perms": 1,
    "--tmpfs": 1,
    "--remount-ro": 1,
    "--bind": 2,
}
# options creating something the sandbox could write to, other than --bind and --tmpfs (which the
# rule handles): a fresh /dev is a tmpfs without a size, so it must be remounted read-only
_BWRAP_REMOUNTED = {"--dev"}


def check_bwrap_args(args: Sequence[str]) -> None:
    """Raise SandboxError unless every writable path the bwrap arguments create is the workspace
    bind or a tmpfs given a --size, and the root and any --dev are remounted read-only.

    `args` may start with the bwrap executable; parsing stops at the command (the first token
    that is not an option)."""
    tokens = list(args)
    if tokens and not tokens[0].startswith("--"):
        tokens = tokens[1:]
    sized = False
    writable_binds: list[str] = []
    must_be_read_only: set[str] = {"/"}
    remounted: set[str] = set()
    i = 0
    while i < len(tokens) and tokens[i].startswith("--"):
        option = tokens[i]
        arity = _BWRAP_ARITY.get(option)
        if arity is None:
            raise SandboxError(
                f"bwrap option {option} is not classified by the writable-mount rule "
                "(sandbox/backends/mounts.py)"
            )
        values = tokens[i + 1 : i + 1 + arity]
        if len(values) != arity:
            raise SandboxError(f"bwrap option {option} is missing its value")
        if option == "--bind":
            writable_binds.append(values[1])
        elif option == "--tmpfs" and not sized:
            raise SandboxError(
                f"tmpfs {values[0]} has no --size: a writable tmpfs must be size-limited"
            )
        elif option in _BWRAP_REMOUNTED:
            must_be_read_only.add(values[0])
        elif option == "--remount-ro":
            remounted.add(values[0])
        # --size applies to the option right after it only
        sized = option == "--size"
        i += 1 + arity
    for target in writable_binds:
        if target.rstrip("/") != WORKSPACE_TARGET:
            raise SandboxError(
                f"writable bind mount at {target}: only {WORKSPACE_TARGET} (under the workspace "
                "quota) may be bound read-write"
            )
    if len(writable_binds) > 1:
        raise SandboxError(f"{WORKSPACE_TARGET} is bound read-write more than once")
    missing = sorted(must_be_read_only - remounted)
    if missing:
        raise SandboxError(
            f"{', '.join(missing)} must be remounted read-only: an unsized tmpfs the sandbox "
            "could write to"
        )


def check_docker_mounts(
    *, mounts: Sequence[Mapping[str, Any]], tmpfs: Mapping[str, str], read_only_root: bool
) -> None:
    """Raise SandboxError unless a container's only writable places are the workspace bind and
    tmpfs mounts with a size= option, on a read-only root filesystem.

    `mounts` are docker Mount specs (Target, Type, ReadOnly); `tmpfs` maps a target to its
    mount options."""
    if not read_only_root:
        raise SandboxError("the container's root filesystem must be read-only")
    writable = [str(mount.get("Target")) for mount in mounts if not mount.get("ReadOnly", False)]
    for target in writable:
        if target.rstrip("/") != WORKSPACE_TARGET:
            raise SandboxError(
                f"writable mount at {target}: only {WORKSPACE_TARGET} (under the workspace "
                "quota) may be mounted read-write"
            )
    if len(writable) > 1:
        raise SandboxError(f"{WORKSPACE_TARGET} is mounted read-write more than once")
    for target, options in tmpfs.items():
        if not any(option.startswith("size=") for option in options.split(",")):
            raise SandboxError(
                f"tmpfs {target} has no size= option: a writable tmpfs must be size-limited"
            )


__all__ = ["WORKSPACE_TARGET", "check_bwrap_args", "check_docker_mounts"]
