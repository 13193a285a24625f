"""How an MCP skill's server is sandboxed: its files, its runtime, limits, egress and environment.

The same spec serves the throwaway test sandbox (forge.probe) and a deployed server
(forge.runtime), so what was tested is what runs. The skill's files are written to a host
directory bound read-only at /skill; the skill runtime (MOTOR_SKILL_RUNTIME, built from
sandbox/image/runtime-requirements.txt) is bound read-only at its own path under bwrap and is
part of the docker image; the workspace holds only the two FIFOs of the server's stdio.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from django.conf import settings

from sandbox.mcp import ProcessSpec
from sandbox.types import ConnectionReport, Limits, NetworkPolicy, SessionSpec
from skills.bundle import Bundle, McpManifest, bundle_from_directory

#: where the skill's files appear inside the sandbox (read-only)
SKILL_DIR = "/skill"
#: the workspace holds only the FIFOs: a tiny quota is enough (bytes)
WORKSPACE_BYTES = 1024 * 1024


def runtime_path() -> Path:
    """The skill runtime's path, the same on the host and inside the sandbox."""
    return Path(getattr(settings, "MOTOR_SKILL_RUNTIME", "/opt/motor-cortex-runtime"))


def backend_name() -> str:
    return str(settings.SANDBOX_BACKEND)


def write_files(files: Mapping[str, bytes] | Bundle | Path) -> Path:
    """Write the skill's files (a mapping, a Bundle, or a skill directory, validated as a
    bundle) to a fresh host directory the sandbox uid can read (not write). The caller removes
    it (`remove_files`)."""
    if isinstance(files, Path):
        files = bundle_from_directory(files, check_dir_name=False)
    mapping = files.file_map() if isinstance(files, Bundle) else dict(files)
    root = Path(tempfile.mkdtemp(prefix="skill-", dir=_files_root()))
    os.chmod(root, 0o755)  # noqa: S103 - the sandbox uid reads the skill, never writes it
    for rel, data in mapping.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        target.write_bytes(data)
        target.chmod(0o644)
    for directory in root.rglob("*"):
        if directory.is_dir():
            directory.chmod(0o755)
    return root


def remove_files(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)


def _files_root() -> Path:
    root = Path(settings.MOTOR_DATA_DIR) / "forge"
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o711)  # noqa: S103 - traverse only: the sandbox uid reaches its own dir
    return root


def limits_for(proposal: Mapping[str, Any]) -> Limits:
    """The server's limits: the run sessions' defaults, with what the approved manifest set."""
    base = Limits()
    memory = proposal.get("memory_bytes") or base.memory_bytes
    tmp = proposal.get("tmp_bytes") or base.tmp_bytes
    if proposal.get("allow_tmp") is False:
        tmp = 1024 * 1024  # /tmp always exists; without the grant it is next to nothing
    return replace(
        base,
        memory_bytes=int(memory),
        tmp_bytes=int(tmp),
        max_processes=int(proposal.get("max_processes") or base.max_processes),
        cpu_seconds=int(
            proposal.get("cpu_seconds") or getattr(settings, "FORGE_SERVER_CPU_SECONDS", 3600)
        ),
        workspace_bytes=WORKSPACE_BYTES,
        # the workspace holds only the FIFOs: measuring it once a second keeps an idle server
        # at ~0 CPU (FSIZE already caps any file it writes there at the 1 MiB quota)
        quota_interval_s=1.0,
        # the session is closed by its owner (forge.runtime), never by the sandbox's reaper
        idle_timeout_s=365 * 24 * 3600.0,
    )


def call_timeout_s(proposal: Mapping[str, Any]) -> float:
    """How long one tools/call may take (seconds)."""
    return float(
        proposal.get("call_timeout_s") or getattr(settings, "FORGE_CALL_TIMEOUT_SECONDS", 60)
    )


def process_spec(
    *,
    files_dir: Path,
    manifest: McpManifest,
    allowed_domains: tuple[str, ...] | list[str],
    limits: Limits,
    credentials: Mapping[str, str],
    on_connection: Callable[[ConnectionReport], None] | None = None,
) -> ProcessSpec:
    """The ProcessSpec of the manifest's server. `credentials` maps the server's environment
    variables to their values (resolved by the caller from the vault, never stored)."""
    runtime = runtime_path()
    mounts: list[tuple[Path, str]] = [(files_dir, SKILL_DIR)]
    if backend_name() != "docker":
        # docker's image carries the same runtime at the same path (sandbox/image/Dockerfile)
        mounts.append((runtime, str(runtime)))
    env = {
        "PATH": f"{runtime}/bin:/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        **dict(credentials),
    }
    cwd = SKILL_DIR if manifest.working_dir == "." else f"{SKILL_DIR}/{manifest.working_dir}"
    script, *rest = manifest.args
    return ProcessSpec(
        argv=[f"{runtime}/bin/python3", f"{SKILL_DIR}/{script}", *rest],
        session=SessionSpec(
            workspace=Path("/nonexistent"),  # SandboxedProcess makes its own
            network=NetworkPolicy(allowed_domains=tuple(allowed_domains)),
            limits=limits,
            readonly_mounts=tuple(mounts),
            on_connection=on_connection,
        ),
        env=env,
        cwd=cwd,
    )


__all__ = [
    "SKILL_DIR",
    "backend_name",
    "call_timeout_s",
    "limits_for",
    "process_spec",
    "remove_files",
    "runtime_path",
    "write_files",
]
