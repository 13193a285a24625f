"""Flower in docker-compose, behind basic auth from the environment (a real Flower on the test
Redis), and workers sending the task events it shows."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_runs_flower_through_the_guarded_command_on_localhost_only(compose: dict) -> None:
    flower = compose["services"]["flower"]
    assert flower["command"][:3] == ["python", "manage.py", "flower"]
    assert flower["ports"] == ["127.0.0.1:5555:5555"]
    assert flower["profiles"] == ["monitoring"]


def test_compose_workers_send_task_events_and_have_a_health_check(compose: dict) -> None:
    worker = compose["services"]["worker"]
    assert "-E" in worker["command"]
    assert worker["healthcheck"]["test"][:4] == ["CMD", "python", "manage.py", "worker_health"]
    assert compose["services"]["web"]["healthcheck"]["test"][-1].endswith("/readyz")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _flower(port: int, **env: str) -> subprocess.Popen:
    environment = {k: v for k, v in os.environ.items() if k != "FLOWER_BASIC_AUTH"}
    return subprocess.Popen(
        [sys.executable, "manage.py", "flower", "--port", str(port)],
        cwd=ROOT,
        env={**environment, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


@pytest.mark.slow
def test_flower_answers_only_with_the_configured_login() -> None:
    port = _free_port()
    process = _flower(port, FLOWER_BASIC_AUTH="ops:correct-horse")
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                anonymous = httpx.get(f"{base}/", timeout=2)
                break
            except httpx.TransportError:
                assert process.poll() is None, process.stdout.read() if process.stdout else ""
                assert time.monotonic() < deadline, "Flower did not start"
                time.sleep(0.3)
        assert anonymous.status_code == 401
        assert httpx.get(f"{base}/", auth=("ops", "wrong"), timeout=5).status_code == 401
        assert (
            httpx.get(f"{base}/workers", auth=("ops", "correct-horse"), timeout=5).status_code
            == 200
        )
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


@pytest.mark.parametrize("auth", [None, "", "no-password", "ops:"])
def test_flower_refuses_to_start_without_a_login(auth: str | None) -> None:
    env = {} if auth is None else {"FLOWER_BASIC_AUTH": auth}
    process = _flower(_free_port(), **env)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 1
    assert "FLOWER_BASIC_AUTH must be set to user:password" in output


def test_compose_serves_mcp_with_the_projects_command(compose: dict) -> None:
    from django.core.management import get_commands

    mcp = compose["services"]["mcp"]
    assert mcp["command"][:3] == ["python", "manage.py", "serve_mcp"]
    assert "serve_mcp" in get_commands()
    assert mcp["image"] == compose["services"]["web"]["image"]
    assert mcp["ports"] == ["8001:8001"]
