"""Fixtures for the sandbox tests: real bwrap (and Docker) sessions, nothing mocked."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sandbox.backends import get_backend
from sandbox.types import ExecRequest, ExecResult, Limits, Session, SessionSpec

SandboxFactory = Callable[..., Session]


def py(session: Session, code: str, *, timeout_s: float = 20.0, **kwargs: object) -> ExecResult:
    """Run a Python snippet inside `session` with the sandbox's /usr/bin/python3."""
    return session.exec(
        ExecRequest(
            argv=["python3", "-c", textwrap.dedent(code)],
            timeout_s=timeout_s,
            **kwargs,  # type: ignore[arg-type]
        )
    )


def py_json(session: Session, code: str, **kwargs: object) -> object:
    """Run a snippet that prints one JSON document; return it (fails on a bad exit)."""
    result = py(session, code, **kwargs)
    assert result.exit_code == 0, (result.exit_code, result.stderr.decode(errors="replace"))
    return json.loads(result.stdout)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.fixture
def open_sandbox(tmp_path: Path) -> Iterator[SandboxFactory]:
    """Open sessions on a named backend; every one is closed after the test."""
    opened: list[Session] = []
    counter = 0

    def factory(
        backend: str = "bwrap",
        *,
        workspace: Path | None = None,
        limits: Limits | None = None,
        **spec_kwargs: object,
    ) -> Session:
        nonlocal counter
        counter += 1
        if workspace is None:
            workspace = tmp_path / f"ws-{counter}"
            workspace.mkdir()
        spec = SessionSpec(workspace=workspace, limits=limits or Limits(), **spec_kwargs)  # type: ignore[arg-type]
        session = get_backend(backend).open(spec)
        opened.append(session)
        return session

    yield factory
    for session in opened:
        session.close()


@pytest.fixture(params=["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def backend_name(request: pytest.FixtureRequest) -> str:
    """Every containment test runs against both isolating backends. A backend that is missing
    fails the test (get_backend raises SandboxError); it is never skipped."""
    return str(request.param)


@pytest.fixture
def sandbox(open_sandbox: SandboxFactory, backend_name: str) -> Session:
    """A fresh session on the parametrised backend with default limits."""
    return open_sandbox(backend_name)


@pytest.fixture
def canary_env(monkeypatch: pytest.MonkeyPatch) -> str:
    """A secret-looking variable in the worker's own environment."""
    value = "canary-" + os.urandom(8).hex()
    monkeypatch.setenv("MOTOR_TEST_WORKER_SECRET", value)
    return value
