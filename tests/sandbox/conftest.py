"""Fixtures for the sandbox tests: real bwrap (and Docker) sessions, nothing mocked."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sandbox.backends import get_backend
from sandbox.types import ExecRequest, ExecResult, Limits, Session, SessionSpec

SandboxFactory = Callable[..., Session]

LAUNCHER_SOURCE = Path(__file__).resolve().parents[2] / "sandbox" / "launcher"


@pytest.fixture(scope="session")
def built_launcher() -> Iterator[Path]:
    """The sandbox launcher built from this checkout's source by its own build script, in a
    directory of root's that only root can write to."""
    where = Path(tempfile.mkdtemp(prefix="motor-launch-"))
    path = where / "motor-launch"
    subprocess.run([str(LAUNCHER_SOURCE / "build.sh"), str(path)], check=True)
    yield path
    shutil.rmtree(where, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def sandbox_launcher(built_launcher: Path) -> Iterator[Path]:
    """Every bwrap session of these tests (a root worker's) starts through the launcher just
    built; the tests of the other path name a missing one explicitly."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MOTOR_SANDBOX_LAUNCHER", str(built_launcher))
        yield built_launcher


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
