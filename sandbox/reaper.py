"""Finding the sandboxes of this host by session id and killing them from outside.

Both backends: `bwrap_sandboxes()`/`kill_sandbox()` for bwrap (processes), and
`docker_sandboxes()`/`kill_containers()` for docker (the containers of this host, found by their
session label).

A session's processes (the bwrap sandbox, its supervisor, the browser and everything they started)
normally end with the session: closing it kills the PID namespace, and a dead owner takes bwrap
with it (--die-with-parent). This module is the watchdog beside that: `bwrap_sandboxes()` lists
every bwrap sandbox on the host by session id (the id prefixes the session's runtime directory,
which bwrap's command line names; a pooled sandbox a run adopted names its run in a file there),
whichever process owns it, and `kill_sandbox()` SIGKILLs one with every process below it. The caller decides which sessions are orphans (runs: those whose
run is no longer active).
"""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path
from typing import Any

from sandbox.backends.bwrap_runtime import SESSION_FILE, _default_runtime_root
from sandbox.types import SandboxError


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of `pid`, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0].decode(), int(fields[1])


def descendants(root: int) -> list[int]:
    """Every live process below `root`, from the parent pids in /proc."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = _stat(int(name))
            if stat is not None and stat[0] not in ("Z", "X"):
                children.setdefault(stat[1], []).append(int(name))
    found: list[int] = []
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def bwrap_sandboxes(runtime_root: Path | None = None) -> dict[str, list[int]]:
    """{session id (its first 32 characters): [pid of each bwrap process of that session]}."""
    root = os.fsencode(str(runtime_root or _default_runtime_root()).rstrip("/") + "/")
    found: dict[str, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if not argv or not argv[0].endswith(b"bwrap"):
            continue
        for token in argv:
            if token.startswith(root):
                directory = token[len(root) :].split(b"/", 1)[0]
                session, sep, _suffix = directory.rpartition(b"-")
                if sep and session:
                    name_ = _adopted_by(root + directory) or session.decode("utf-8", "replace")
                    found.setdefault(name_, []).append(int(name))
                break
    return found


def _adopted_by(runtime_dir: bytes) -> str | None:
    """The session a pooled sandbox serves since a run adopted it (its runtime dir's name is
    the pool slot's), None for a sandbox started for its session."""
    try:
        with open(os.path.join(runtime_dir, SESSION_FILE.encode()), "rb") as fh:
            text = fh.read(256).decode("utf-8", "replace").strip()
    except OSError:
        return None
    return text or None


def kill_sandbox(pids: list[int]) -> list[int]:
    """SIGKILL the bwrap processes `pids` and every process below them; the pids signalled."""
    victims: list[int] = []
    for pid in pids:
        victims.extend([pid, *descendants(pid)])
    killed: list[int] = []
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
        killed.append(pid)
    return killed


def docker_sandboxes(client: Any | None = None) -> dict[str, list[str]]:
    """{session id: [container id, …]} of every docker sandbox started from this host, whichever
    process owns it (the session and owner-host labels the docker backend puts on each)."""
    from docker.errors import DockerException

    from sandbox.backends.docker_orphans import LABEL_OWNER_HOST, LABEL_SESSION, _connect

    engine = _connect(client)
    here = socket.gethostname()
    try:
        containers = engine.containers.list(all=True, sparse=True, filters={"label": LABEL_SESSION})
    except DockerException as exc:
        raise SandboxError(f"docker backend: cannot list sandbox containers: {exc}") from exc
    found: dict[str, list[str]] = {}
    for container in containers:
        labels = container.attrs.get("Labels") or {}
        if labels.get(LABEL_OWNER_HOST) != here or not labels.get(LABEL_SESSION):
            continue
        found.setdefault(str(labels[LABEL_SESSION])[:32], []).append(str(container.id))
    return found


def kill_containers(container_ids: list[str], client: Any | None = None) -> list[str]:
    """Remove (SIGKILL, then delete) the containers `container_ids` with every process in them;
    the ids removed (one already gone is not an error)."""
    from docker.errors import DockerException, NotFound

    from sandbox.backends.docker_orphans import _connect

    engine = _connect(client)
    removed: list[str] = []
    for container_id in container_ids:
        try:
            engine.api.remove_container(container_id, force=True)
        except NotFound:
            continue
        except DockerException as exc:
            raise SandboxError(f"docker backend: cannot remove {container_id}: {exc}") from exc
        removed.append(container_id)
    return removed


__all__ = ["bwrap_sandboxes", "descendants", "docker_sandboxes", "kill_containers", "kill_sandbox"]
