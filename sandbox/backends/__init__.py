"""Sandbox backends, chosen by name only.

``bwrap`` (bubblewrap, the default on Linux), ``docker`` (one container per session) and
``local`` (no isolation at all; refused unless the caller passes ``allow_local=True``). Nothing
here picks a backend on its own or falls back to another one when the named one cannot start.
"""

from __future__ import annotations

from sandbox.types import Backend, SandboxError

BACKEND_NAMES = ("bwrap", "docker", "local")


def get_backend(name: str, *, allow_local: bool = False) -> Backend:
    """Return the backend called `name`. Raises SandboxError for an unknown name, for "local"
    without `allow_local`, and when the backend's runtime is missing (never a fallback)."""
    if name == "bwrap":
        from sandbox.backends.bwrap import BwrapBackend

        return BwrapBackend()
    if name == "docker":
        try:
            from sandbox.backends import docker as docker_module
        except ImportError as exc:
            raise SandboxError(f"the docker sandbox backend is not available: {exc}") from exc
        backend_cls = getattr(docker_module, "DockerBackend", None)
        if backend_cls is None:
            raise SandboxError("sandbox.backends.docker defines no DockerBackend")
        backend: Backend = backend_cls()
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
