"""Sandbox backends, chosen by name only.

``bwrap`` (bubblewrap, the default on Linux), ``docker`` (one container per session) and
``local`` (no isolation at all; refused unless the caller passes ``allow_local=True``). Nothing
here picks a backend on its own or falls back to another one when the named one cannot start.
"""

from __future__ import annotations

import os
import threading

from sandbox.egress.addresses import Resolver, static_hosts, static_resolver
from sandbox.types import Backend, SandboxError

BACKEND_NAMES = ("bwrap", "docker", "local")

# Environment variables a backend reads when it is created: a change makes a new instance.
_CONFIG_VARS = (
    "MOTOR_SANDBOX_UID_RANGE",
    "MOTOR_SANDBOX_RUNTIME_DIR",
    "MOTOR_SANDBOX_LAUNCHER",
    "SANDBOX_DOCKER_IMAGE",
    "DOCKER_HOST",
    "DOCKER_TLS_VERIFY",
    "DOCKER_CERT_PATH",
    "MOTOR_SANDBOX_EGRESS_HOSTS",
)
_cache: dict[tuple[object, ...], Backend] = {}
_cache_lock = threading.Lock()


def get_backend(name: str, *, allow_local: bool = False) -> Backend:
    """Return the backend called `name`. Raises SandboxError for an unknown name, for "local"
    without `allow_local`, and when the backend's runtime is missing (never a fallback).

    One instance per (name, options, configuration) is kept per process, so opening a session
    does not ping the engine, inspect the image or sweep orphans again (a backend does those
    once, when it is created). A failure is never cached: the next call tries again."""
    key = (name, allow_local, os.getpid(), tuple(os.environ.get(v) for v in _CONFIG_VARS))
    with _cache_lock:
        cached = _cache.get(key)
        if cached is None:
            cached = _create_backend(name, allow_local=allow_local)
            _cache[key] = cached
        return cached


def _configured_resolver() -> Resolver | None:
    """The egress proxy's resolver: MOTOR_SANDBOX_EGRESS_HOSTS (``name=address,…``, like an
    /etc/hosts only the sandboxes see) in front of the system resolver; None when unset."""
    spec = os.environ.get("MOTOR_SANDBOX_EGRESS_HOSTS", "").strip()
    if not spec:
        return None
    try:
        table = static_hosts(spec)
    except ValueError as exc:
        raise SandboxError(f"MOTOR_SANDBOX_EGRESS_HOSTS: {exc}") from None
    return static_resolver(table)


def _create_backend(name: str, *, allow_local: bool) -> Backend:
    if name == "bwrap":
        from sandbox.backends.bwrap import BwrapBackend

        return BwrapBackend(egress_resolver=_configured_resolver())
    if name == "docker":
        try:
            from sandbox.backends import docker as docker_module
        except ImportError as exc:
            raise SandboxError(f"the docker sandbox backend is not available: {exc}") from exc
        backend_cls = getattr(docker_module, "DockerBackend", None)
        if backend_cls is None:
            raise SandboxError("sandbox.backends.docker defines no DockerBackend")
        backend: Backend = backend_cls(egress_resolver=_configured_resolver())
        return backend
    if name == "local":
        if not allow_local:
            raise SandboxError(
                "the 'local' sandbox backend runs commands without any isolation and is off; "
                "enable it explicitly (allow_local=True) on a development machine only"
            )
        from sandbox.backends.local import LocalBackend

        return LocalBackend()
    raise SandboxError(
        f"unknown sandbox backend {name!r}; choose one of {', '.join(BACKEND_NAMES)}"
    )


__all__ = ["BACKEND_NAMES", "get_backend"]
