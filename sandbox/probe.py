"""Whether a sandbox backend can work on this host, without opening a session.

Used by readiness checks: it starts nothing that lasts, sweeps nothing and touches no other
session's files. A backend that passes here can still fail for one session (a full disk, a uid
range used up); one that fails here cannot run any.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

#: seconds the namespace probe (bwrap) or the engine ping (docker) may take
PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class ProbeResult:
    ok: bool
    detail: str


def backend_probe(name: str, *, allow_local: bool = False, docker_image: str = "") -> ProbeResult:
    """Probe the backend called `name` (bwrap, docker or local) on this host."""
    if name == "bwrap":
        return _probe_bwrap()
    if name == "docker":
        return _probe_docker(docker_image)
    if name == "local":
        if allow_local:
            return ProbeResult(True, "local backend (no isolation) allowed by SANDBOX_ALLOW_LOCAL")
        return ProbeResult(False, "the local backend is off (SANDBOX_ALLOW_LOCAL=false)")
    return ProbeResult(False, f"unknown sandbox backend {name!r}")


def _probe_bwrap() -> ProbeResult:
    path = shutil.which("bwrap", path="/usr/local/bin:/usr/bin:/bin")
    if path is None:
        return ProbeResult(False, "bubblewrap (bwrap) is not installed")
    # The namespaces every session needs (user, pid, net, ipc, uts); a host or a container that
    # forbids them (seccomp, AppArmor, sysctl) fails here exactly as a session would.
    args = [path, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "--", "true"]
    try:
        done = subprocess.run(args, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return ProbeResult(False, f"bwrap did not start a sandbox within {PROBE_TIMEOUT_S:g} s")
    except OSError as exc:
        return ProbeResult(False, f"bwrap cannot be run: {exc}")
    if done.returncode != 0:
        reason = done.stderr.decode(errors="replace").strip().splitlines()
        return ProbeResult(False, f"bwrap cannot create namespaces: {reason[-1] if reason else ''}")
    return ProbeResult(True, f"bwrap at {path} creates namespaces")


def _probe_docker(image: str) -> ProbeResult:
    try:
        import docker  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return ProbeResult(False, "the docker Python package is not installed")
    try:
        client = docker.from_env(timeout=int(PROBE_TIMEOUT_S))
        client.ping()
        if image:
            client.images.get(image)
    except Exception as exc:  # the docker SDK raises many kinds (connection, API, not found)
        return ProbeResult(False, f"docker engine or image unusable: {exc.__class__.__name__}")
    return ProbeResult(True, f"docker engine answers, image {image or '(any)'} present")
