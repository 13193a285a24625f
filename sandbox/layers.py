"""Dependency layers: a skill's declared packages, installed once inside a sandbox into a
directory that runs then mount read-only.

A layer directory holds `python/` (what `pip install --target` wrote) and `node/node_modules/`
(what `npm install --prefix` wrote). A session that mounts it at `LAYER_MOUNT` gets
`layer_environment()`: PYTHONPATH and NODE_PATH pointing into the mount, so `python3` and
`node` started by the code and bash tools import the packages without any further step.

`layer_build` runs the installers in a session of the same backends and hardening as a run's
(`sandbox.session.open_session`): the directory being built is the session's workspace, the
only writable place, and the egress allowlist holds the configured package index alone (plus
the hosts it serves its files from). The installers are the sandbox's own `python3 -m pip`
and `npm`; nothing here picks an interpreter, so a different runtime in the sandbox installs
with its own pip. This module only builds into the directory it is given: where layers live,
who builds which one, the atomic rename and garbage collection belong to the caller.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from sandbox.session import SessionRegistry, open_session
from sandbox.types import (
    ExecRequest,
    Limits,
    NetworkPolicy,
    SandboxError,
    Session,
    SessionSpec,
)

#: where a session sees its layer (read-only)
LAYER_MOUNT = "/opt/motor-layer"
PYTHON_DIR = "python"
NODE_DIR = "node"
#: scratch space of the installers inside the layer being built, removed before it is used
_SCRATCH = ".install-tmp"
#: characters of the installers' output kept for the caller (the end: where the error is)
OUTPUT_CHARS = 4000
#: memory an installer process may write to (bytes; sandbox Limits.memory_bytes): twice a run's
#: default, as resolving and unpacking a large tree is an installer's normal work
_INSTALL_MEMORY = 1024 * 1024 * 1024
#: the ecosystems an installer exists for
ECOSYSTEMS = ("pip", "npm")


def layer_environment() -> dict[str, str]:
    """The variables that put a mounted layer on the import paths of python3 and node."""
    return {
        "PYTHONPATH": f"{LAYER_MOUNT}/{PYTHON_DIR}",
        "NODE_PATH": f"{LAYER_MOUNT}/{NODE_DIR}/node_modules",
    }


@dataclass(frozen=True, slots=True)
class Package:
    """One pinned package: `ecosystem` (pip or npm), a plain `name` and an exact `version`.
    The caller has validated both (no URLs, no shell characters); they become installer
    arguments, never shell text."""

    ecosystem: str
    name: str
    version: str

    def spec(self) -> str:
        return (
            f"{self.name}=={self.version}"
            if self.ecosystem == "pip"
            else f"{self.name}@{self.version}"
        )


@dataclass(frozen=True, slots=True)
class PackageIndex:
    """Where installers get packages: the pip index (simple API) URL, the npm registry URL,
    and the hosts the pip index serves its files from when those differ (PyPI's are on
    files.pythonhosted.org)."""

    pip_index_url: str = "https://pypi.org/simple/"
    npm_registry_url: str = "https://registry.npmjs.org/"
    pip_download_hosts: tuple[str, ...] = ("files.pythonhosted.org",)


@dataclass(frozen=True, slots=True)
class InstallOutcome:
    """What an install did: `ok`, the installers' output (its last OUTPUT_CHARS characters;
    on failure the installer's own message), and how long it took."""

    ok: bool
    output: str
    duration_ms: int
    timed_out: bool = False
    #: the caller's `should_stop` said stop: the installers were killed mid-way
    stopped: bool = False


def _authority(url: str) -> tuple[str, bool]:
    """(host or host:port as the egress allowlist writes it, whether the URL is plain http)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SandboxError(f"package index URL {url!r} is not an http(s) URL")
    default = 443 if parts.scheme == "https" else 80
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    port = parts.port or default
    return (host if port == default else f"{host}:{port}"), parts.scheme == "http"


def index_domains(packages: Sequence[Package], index: PackageIndex) -> tuple[str, ...]:
    """The egress allowlist of an install of `packages`: the index of each ecosystem used."""
    domains: list[str] = []
    if any(p.ecosystem == "pip" for p in packages):
        domains.append(_authority(index.pip_index_url)[0])
        domains.extend(index.pip_download_hosts)
    if any(p.ecosystem == "npm" for p in packages):
        domains.append(_authority(index.npm_registry_url)[0])
    return tuple(dict.fromkeys(domains))


def install_commands(packages: Sequence[Package], index: PackageIndex) -> list[list[str]]:
    """The installer command lines (argv, no shell) for `packages`, run with /workspace as the
    layer being built: one pip command for the pip packages, one npm command for the npm ones."""
    commands: list[list[str]] = []
    pip = [p.spec() for p in packages if p.ecosystem == "pip"]
    npm = [p.spec() for p in packages if p.ecosystem == "npm"]
    unknown = sorted({p.ecosystem for p in packages} - set(ECOSYSTEMS))
    if unknown:
        raise SandboxError(f"no installer for {', '.join(unknown)}")
    if pip:
        authority, plain_http = _authority(index.pip_index_url)
        argv = ["python3", "-m", "pip", "install", "--no-input", "--disable-pip-version-check"]
        argv += ["--no-cache-dir", "--target", f"/workspace/{PYTHON_DIR}"]
        argv += ["--index-url", index.pip_index_url]
        if plain_http:
            # pip ignores a plain-http index unless told to trust it; the operator chose it
            argv += ["--trusted-host", authority]
        commands.append([*argv, *pip])
    if npm:
        argv = ["npm", "install", "--prefix", f"/workspace/{NODE_DIR}"]
        argv += ["--registry", index.npm_registry_url]
        # no lifecycle scripts: a package's install hooks never run, only its files land
        argv += ["--ignore-scripts", "--no-audit", "--no-fund", "--no-update-notifier"]
        argv += ["--cache", f"/workspace/{_SCRATCH}/npm-cache"]
        commands.append([*argv, *npm])
    return commands


#: the probe that the sandbox has node and npm (a constant command line: no input reaches it)
_NODE_PROBE = ["sh", "-c", "command -v node >/dev/null && command -v npm >/dev/null"]


def no_node_message(backend: str, packages: Sequence[Package]) -> str:
    """Why npm `packages` cannot be installed on `backend`: its sandbox has no node or npm."""
    specs = ", ".join(p.spec() for p in packages if p.ecosystem == "npm")
    return (
        f"npm dependencies ({specs}) cannot be installed: the {backend} sandbox has no node "
        "and npm (the sandbox image must include the nodejs and npm packages, "
        "sandbox/image/packages.txt)"
    )


def _installer_env() -> dict[str, str]:
    """Per-call environment of the installers: scratch space and config inside the layer's
    scratch directory (removed afterwards), never a user config file."""
    scratch = f"/workspace/{_SCRATCH}"
    return {
        "HOME": scratch,
        "TMPDIR": scratch,
        "PIP_CONFIG_FILE": "/dev/null",
        # files that do not exist: npm reads no configuration but its command line
        "npm_config_userconfig": f"{scratch}/user-npmrc",
        "npm_config_globalconfig": f"{scratch}/global-npmrc",
    }


def layer_build(
    *,
    packages: Sequence[Package],
    index: PackageIndex,
    target: Path,
    backend: str,
    allow_local: bool = False,
    timeout_s: float = 300.0,
    max_bytes: int = 1024 * 1024 * 1024,
    session_id: str = "",
    should_stop: Callable[[], bool] | None = None,
) -> InstallOutcome:
    """Install `packages` into the empty directory `target` from a sandbox on `backend`.

    On success `target` holds the layer, owned by this process's uid and read-only; on failure
    it may hold anything and the caller discards it. A sandbox that cannot start is a failed
    install too (its message says so); nothing ever installs outside a sandbox. npm packages on
    a sandbox without node and npm fail at once, saying so (`no_node_message`).

    `should_stop` is asked every STOP_POLL_S while the install runs; once it answers True the
    install's sandbox is closed, which kills the installers and every process they started,
    and the outcome is `stopped` (never ok).
    """
    if should_stop is not None and should_stop():
        return _outcome(
            False, ["the install was stopped before it started"], time.monotonic(), stopped=True
        )
    started = time.monotonic()
    (target / _SCRATCH).mkdir(parents=True, exist_ok=True)
    spec = SessionSpec(
        workspace=target,
        network=NetworkPolicy(allowed_domains=index_domains(packages, index)),
        limits=replace(
            Limits(),
            workspace_bytes=max_bytes,
            memory_bytes=_INSTALL_MEMORY,
            file_size_bytes=min(max_bytes, 512 * 1024 * 1024),
            cpu_seconds=max(60, int(timeout_s)),
            default_timeout_s=timeout_s,
            idle_timeout_s=timeout_s + 60,
        ),
        session_id=session_id,
    )
    outputs: list[str] = []
    watch = _StopWatch(should_stop)
    try:
        commands = install_commands(packages, index)
        registry = SessionRegistry()
        with (
            open_session(spec, backend, allow_local=allow_local, session_registry=registry) as s,
            watch.guarding(s),
        ):
            if any(p.ecosystem == "npm" for p in packages):
                probe = s.exec(ExecRequest(argv=_NODE_PROBE, timeout_s=30))
                if watch.stopped:
                    return _outcome(False, outputs, started, stopped=True)
                if probe.exit_code != 0:
                    outputs.append(no_node_message(backend, packages))
                    return _outcome(False, outputs, started)
            for argv in commands:
                remaining = timeout_s - (time.monotonic() - started)
                if remaining <= 1:
                    return _outcome(False, outputs, started, timed_out=True)
                result = s.exec(
                    ExecRequest(
                        argv=argv,
                        env=_installer_env(),
                        timeout_s=remaining,
                        output_limit=256 * 1024,
                    )
                )
                if watch.stopped:
                    outputs.append("the install was stopped")
                    return _outcome(False, outputs, started, stopped=True)
                text = (result.stdout + result.stderr).decode("utf-8", "replace")
                outputs.append(f"$ {' '.join(argv[:4])} ...\n{text}")
                if result.timed_out:
                    outputs.append(f"the install took longer than {timeout_s:.0f} s")
                    return _outcome(False, outputs, started, timed_out=True)
                if result.workspace_exceeded:
                    outputs.append(f"the layer grew past {max_bytes} bytes")
                    return _outcome(False, outputs, started)
                if result.exit_code != 0:
                    return _outcome(False, outputs, started)
    except SandboxError as exc:
        if watch.stopped:
            # the session was closed under the call: that is the stop, not a sandbox failure
            outputs.append("the install was stopped")
            return _outcome(False, outputs, started, stopped=True)
        outputs.append(f"sandbox error: {exc}")
        return _outcome(False, outputs, started)
    _settle(target)
    return _outcome(True, outputs, started)


#: seconds between two questions to `should_stop` while an install runs
STOP_POLL_S = 0.1
#: seconds a stopped install waits for its sandbox's close (see _StopWatch.__exit__)
STOP_CLOSE_WAIT_S = 3.0


class _StopWatch:
    """While entered, a thread asks `should_stop` every STOP_POLL_S and closes `session` (which
    kills every process in it) the first time the answer is True."""

    def __init__(self, should_stop: Callable[[], bool] | None) -> None:
        self._should_stop = should_stop
        self._session: Session | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self.stopped = False

    def guarding(self, session: Session) -> _StopWatch:
        self._session = session
        return self

    def __enter__(self) -> _StopWatch:
        if self._should_stop is not None:
            self._thread = threading.Thread(
                target=self._watch, name="motor-layer-stop", daemon=True
            )
            self._thread.start()
        return self

    def _watch(self) -> None:
        assert self._should_stop is not None and self._session is not None
        while not self._done.wait(STOP_POLL_S):
            try:
                stop = self._should_stop()
            except Exception:  # noqa: BLE001, S112 - a failed question is asked again
                continue
            if stop:
                self.stopped = True
                self._session.close()
                return

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            # a close kills the sandbox's processes first; what follows (the egress proxy
            # joining a connection stuck in connect(), up to its connect timeout) finishes in
            # the background instead of holding the caller
            self._thread.join(timeout=STOP_CLOSE_WAIT_S if self.stopped else None)


def _outcome(
    ok: bool,
    outputs: list[str],
    started: float,
    *,
    timed_out: bool = False,
    stopped: bool = False,
) -> InstallOutcome:
    text = "\n".join(outputs).strip()
    return InstallOutcome(
        ok=ok,
        output=text[-OUTPUT_CHARS:],
        duration_ms=int((time.monotonic() - started) * 1000),
        timed_out=timed_out,
        stopped=stopped,
    )


def _settle(target: Path) -> None:
    """Remove the installers' scratch space, then hand every file to this process's uid and
    take away every write bit: the sandbox uid that built it keeps no hold on the layer."""
    scratch = target / _SCRATCH
    if scratch.exists():
        _remove_tree(scratch)
    uid, gid = os.geteuid(), os.getegid()
    for _root, dirs, files, dirfd in os.fwalk(target, follow_symlinks=False):
        for name in (*dirs, *files):
            _settle_one(name, dirfd, uid, gid)
    _settle_one(str(target), None, uid, gid)


def _settle_one(name: str, dirfd: int | None, uid: int, gid: int) -> None:
    st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    if st.st_uid != uid or st.st_gid != gid:
        os.chown(name, uid, gid, dir_fd=dirfd, follow_symlinks=False)
    if not stat.S_ISLNK(st.st_mode):
        # readable by every sandbox uid that mounts it, writable by none
        readable = 0o555 if stat.S_ISDIR(st.st_mode) else 0o444
        os.chmod(name, stat.S_IMODE(st.st_mode) & ~0o222 | readable, dir_fd=dirfd)  # noqa: S103


def _remove_tree(path: Path) -> None:
    """Remove a tree the sandbox wrote (directories may have lost their write bit)."""
    import shutil

    for root, dirs, _files in os.walk(path):
        for name in dirs:
            full = os.path.join(root, name)
            if not os.path.islink(full):
                os.chmod(full, 0o700)
    os.chmod(path, 0o700)
    shutil.rmtree(path)


def layer_remove(path: Path) -> None:
    """Delete a layer directory (its directories are read-only; write bits come back first)."""
    if path.exists() or path.is_symlink():
        _remove_tree(path)


__all__ = [
    "ECOSYSTEMS",
    "LAYER_MOUNT",
    "InstallOutcome",
    "Package",
    "PackageIndex",
    "index_domains",
    "install_commands",
    "layer_build",
    "layer_environment",
    "layer_remove",
    "no_node_message",
]
