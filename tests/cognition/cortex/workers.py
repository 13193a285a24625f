"""Real Celery worker processes for tests of the cortex and the skill index: a prefork worker
with one child on the test database (PostgreSQL or SQLite), the stub LLM, and whatever
environment the test adds; and the SQLite teardown that lets a transactional test that wrote
policy audit rows be flushed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from runs.mutex import redis_client
from tests.fixtures.llm import LLMStubServer

REPO = Path(__file__).resolve().parents[3]
#: the cortex's retry wait in the worker (MOTOR_CORTEX_RETRY_WAIT_SECONDS)
WAIT_S = 1.5


def _database_url() -> str:
    params = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{params['NAME']}"
    user = params.get("USER") or "postgres"
    password = f":{params['PASSWORD']}" if params.get("PASSWORD") else ""
    host = params.get("HOST") or "127.0.0.1"
    port = params.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{params['NAME']}"


def _clean() -> None:
    """No mutex key and no queued task of another test."""
    from config.celery import app

    client = redis_client()
    for key in client.scan_iter(match="motor:mutex:*"):
        client.delete(key)
    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge("celery")


# Registered under its name by the decorator, so a module importing it may take `start_worker`
# as a test argument without shadowing an imported name.
@pytest.fixture(name="start_worker")
def start_worker_fixture(
    llm_stub_server: LLMStubServer, tmp_path: Path
) -> Iterator[Callable[..., subprocess.Popen]]:
    """Start a Celery worker (prefork, one child) on the test database and the stub LLM;
    keyword arguments become environment variables of the worker."""
    started: list[tuple[subprocess.Popen, object]] = []
    _clean()

    def start(**extra_env: str) -> subprocess.Popen:
        env = {
            **os.environ,
            "DATABASE_URL": _database_url(),
            "LLM_BASE_URL": llm_stub_server.base_url,
            "LLM_API_KEY": "stub",
            "CELERY_TASK_ALWAYS_EAGER": "false",
            "CELERY_WORKER_POOL": "prefork",
            "MOTOR_WORKSPACES_DIR": str(settings.MOTOR_WORKSPACES_DIR),
            "MOTOR_FAILURE_HINT_SECONDS": "0",
            "MOTOR_CORTEX_RETRY_WAIT_SECONDS": str(WAIT_S),
            **extra_env,
        }
        log = (tmp_path / f"worker{len(started)}.log").open("w")
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool=prefork",
             "--concurrency=1", "--loglevel=INFO", "--without-gossip", "--without-mingle",
             "--without-heartbeat"],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        started.append((process, log))
        return process

    try:
        yield start
    finally:
        for process, log in started:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
            log.close()  # type: ignore[attr-defined]
        _clean()
