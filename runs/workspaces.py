"""Which directories a run may be given as its workspace.

The sandbox binds a run's workspace read-write and, under a root worker, gives every file in it
to the sandbox uid. So a workspace must be a directory the project made for that run: an existing
directory strictly inside MOTOR_WORKSPACES_DIR, reached without a symlink, and not in its
`.pool` directory (the spare sandboxes' slots, runs.sessions). An empty path (which
would open the session on the worker's current directory), the workspaces dir itself, or any
other directory of the host — a project checkout, a home directory, another service's data — is
refused, by run_start before a run exists and again where a session is opened.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from django.conf import settings

RULE = "project_workspace"


class NotAProjectWorkspace(ValueError):
    """The path is not a workspace the project created for a run; the message names the rule."""


#: the directory inside MOTOR_WORKSPACES_DIR holding the spare sandboxes' slots (runs.sessions)
POOL_DIR = ".pool"


def workspaces_root() -> Path:
    return Path(settings.MOTOR_WORKSPACES_DIR)


def check_run_workspace(workspace: object) -> str:
    """`workspace` as an absolute path when it is a directory inside MOTOR_WORKSPACES_DIR, else
    NotAProjectWorkspace saying why."""
    root = workspaces_root()
    rule = (
        f"a run's workspace must be a directory the project created inside MOTOR_WORKSPACES_DIR "
        f"({root})"
    )
    if not isinstance(workspace, str) or not workspace.strip():
        raise NotAProjectWorkspace(f"workspace: none was given; {rule}")
    path = Path(workspace)
    if not path.is_absolute():
        raise NotAProjectWorkspace(f"workspace: {workspace!r} is not an absolute path; {rule}")
    try:
        real_root = root.resolve(strict=True)
    except OSError:
        raise NotAProjectWorkspace(
            f"workspace: {workspace!r} cannot be used, MOTOR_WORKSPACES_DIR ({root}) does not exist"
        ) from None
    # normpath first: a "..", even one that ends up back inside, is not how the project names one
    if os.path.normpath(workspace) != workspace.rstrip("/") or ".." in path.parts:
        raise NotAProjectWorkspace(f"workspace: {workspace!r} is not a normalised path; {rule}")
    try:
        real = path.resolve(strict=True)
        st = os.lstat(path)
    except OSError:
        raise NotAProjectWorkspace(f"workspace: {workspace!r} does not exist; {rule}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise NotAProjectWorkspace(
            f"workspace: {workspace!r} is not a directory (symlinks are refused); {rule}"
        )
    if real == real_root or real_root not in real.parents:
        raise NotAProjectWorkspace(f"workspace: {workspace!r} is outside the workspaces; {rule}")
    if real.relative_to(real_root).parts[0] == POOL_DIR:
        # a spare sandbox's slot: it becomes another run's workspace when that run adopts it
        raise NotAProjectWorkspace(
            f"workspace: {workspace!r} is a spare sandbox's directory, not a run's; {rule}"
        )
    return str(path)
