"""Who owns a docker sandbox (labels naming the owner's host, pid and its start time) and the
sweep that removes the containers and runtime dirs of owners that died without closing."""

from __future__ import annotations

import logging
import os
import shutil
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.types import SandboxError

log = logging.getLogger(__name__)

LABEL_SESSION = "motor-cortex.session"
LABEL_OWNER_HOST = "motor-cortex.owner-host"
LABEL_OWNER_PID = "motor-cortex.owner-pid"
LABEL_OWNER_START = "motor-cortex.owner-start"
LABEL_RUNTIME_DIR = "motor-cortex.runtime-dir"
_RUNTIME_PREFIX = "mc-docker-"


@dataclass(frozen=True, slots=True)
class _Owner:
    host: str
    pid: int
    start: str


def _process_start(pid: int) -> str:
    """The kernel's start time of `pid` (clock ticks since boot), "" when it does not exist.

    A pid alone can be reused after its process dies; pid + start time cannot."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # the command name may contain spaces and parentheses; fields resume after the last ')'
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[19]


def _current_owner() -> _Owner:
    pid = os.getpid()
    return _Owner(host=socket.gethostname(), pid=pid, start=_process_start(pid))


def _owner_alive(owner: _Owner) -> bool:
    return _process_start(owner.pid) == owner.start and owner.start != ""


def _connect(client: Any | None) -> Any:
    import docker
    from docker.errors import DockerException

    try:
        engine = client if client is not None else docker.from_env(timeout=60)
        engine.ping()
    except DockerException as exc:
        raise SandboxError(
            f"docker backend: no Docker engine answers ({exc}); start dockerd or set DOCKER_HOST"
        ) from exc
    return engine


def sweep_orphans(client: Any | None = None) -> list[str]:
    """Remove sandbox containers (and their runtime dirs) whose owner process on this host is
    gone. Returns the removed session ids. Containers of live owners or other hosts are kept."""
    from docker.errors import DockerException, NotFound

    engine = _connect(client)
    removed: list[str] = []
    here = socket.gethostname()
    try:
        # sparse: no per-container inspect, so a container removed meanwhile (by its owner or
        # another sweeper) cannot fail the listing
        containers = engine.containers.list(all=True, sparse=True, filters={"label": LABEL_SESSION})
    except DockerException as exc:
        raise SandboxError(f"docker backend: cannot list sandbox containers: {exc}") from exc
    for container in containers:
        labels: Mapping[str, str] = container.attrs.get("Labels") or {}
        try:
            owner = _Owner(
                host=labels.get(LABEL_OWNER_HOST, ""),
                pid=int(labels.get(LABEL_OWNER_PID, "0")),
                start=labels.get(LABEL_OWNER_START, ""),
            )
        except ValueError:
            continue
        if owner.host != here or _owner_alive(owner):
            continue
        try:
            container.remove(force=True)
        except NotFound:
            pass
        except DockerException as exc:
            log.error("docker backend: cannot remove orphaned sandbox %s: %s", container.id, exc)
            continue
        runtime_dir = Path(labels.get(LABEL_RUNTIME_DIR) or "/nonexistent")
        # only ever delete a directory this backend created (the label is data, not authority)
        if runtime_dir.name.startswith(_RUNTIME_PREFIX) and runtime_dir.is_dir():
            shutil.rmtree(runtime_dir, ignore_errors=True)
        removed.append(labels.get(LABEL_SESSION, container.id))
        log.warning("docker backend: removed orphaned sandbox %s", labels.get(LABEL_SESSION))
    return removed
