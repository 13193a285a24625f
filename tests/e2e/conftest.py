"""The end-to-end stack: one real Celery worker process for the whole tests/e2e package, a stub
LLM with one script per model (the brain's fast and smart roles, and the motor), and the
namespaced test upstream standing in for the outside services.

Everything between the scripts is real: the conversation endpoint, the brain's turns, core.*,
PostgreSQL, Redis, the worker running run slices, signal delivery and the brain's wake-ups, bwrap
sandboxes whose egress proxy resolves the fake service names (MOTOR_SANDBOX_EGRESS_HOSTS) to the
upstream, post-run extraction and the skill lifecycle.

The worker lives as long as the package's tests (scope "package"): starting one costs seconds,
and tests elsewhere must not find it consuming their queue. Tests are transactional (the worker
sees every commit) and each starts with empty scripts, routes, locks and queue.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from runs.mutex import redis_client
from tests.cognition.conftest import (  # noqa: F401 - fixtures
    World,
    as_agent,
    session_client,
    world,
)
from tests.fixtures.llm import RoutedLLMStubServer, Script
from tests.fixtures.upstream import Upstream
from tests.skills.admin_support import fast_password_hashing  # noqa: F401 - autouse fixture

REPO = Path(__file__).resolve().parents[2]
#: the outside world of the scenarios, all served by the test upstream over plain HTTP
SERVICE_HOSTS = (
    "agentmail.to",
    "docs.agentmail.to",
    "api.agentmail.to",
    "api-v2.agentmail.to",
    "cdn.agentmail.to",
    "skills.sh",
    "files.example.com",
)
MODELS = {"fast": "fast-model", "smart": "smart-model", "motor": "motor-model"}
#: seconds a scenario waits for the worker to reach a state (a bound, not a timing assertion)
WAIT_S = 90.0


@dataclass
class Stack:
    llm: RoutedLLMStubServer
    fast: Script  # the brain's user_message turns and most wake-ups
    smart: Script  # wake-ups that present new or updated skills
    motor: Script  # the motor runtime
    upstream: Upstream
    workspaces: Path
    worker: subprocess.Popen[bytes]
    log: Path

    def reset(self) -> None:
        for script in (self.fast, self.smart, self.motor, self.llm):
            with script._lock:
                script.responses.clear()
                script.requests.clear()
        self.upstream.routes_clear()

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def wait_for(self, predicate: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
        """Poll `predicate` until it returns something truthy; fail naming `what` otherwise."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            if self.worker.poll() is not None:
                raise AssertionError(f"the worker died waiting for {what}:\n{self.log_tail()}")
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}; worker log:\n{self.log_tail()}")

    def scripts_spent(self) -> dict[str, int]:
        """Responses left unplayed per script (all zero when a scenario went as written)."""
        return {
            "fast": self.fast.remaining,
            "smart": self.smart.remaining,
            "motor": self.motor.remaining,
        }


def _database_url() -> str:
    params = connection.settings_dict
    user = params.get("USER") or "postgres"
    password = f":{params['PASSWORD']}" if params.get("PASSWORD") else ""
    host = params.get("HOST") or "127.0.0.1"
    return f"postgres://{user}{password}@{host}:{params.get('PORT') or 5432}/{params['NAME']}"


def _purge_queues() -> None:
    from config.celery import app

    names = {
        "celery",
        settings.MOTOR_RUN_QUEUE,
        settings.COGNITION_BRAIN_QUEUE,
        settings.MOTOR_SIGNAL_QUEUE,
    } - {""}
    with app.connection_for_write() as conn:
        for name in names:
            conn.default_channel.queue_purge(name)


def _clean_redis() -> None:
    client = redis_client()
    for pattern in ("motor:mutex:*", "cognition:conversation:*"):
        for key in client.scan_iter(match=pattern):
            client.delete(key)


@pytest.fixture(scope="package")
def e2e_stack(
    django_db_setup: None,
    django_db_blocker: Any,
    upstream: Upstream,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    fast, smart, motor = Script(), Script(), Script()
    llm = RoutedLLMStubServer(
        {MODELS["fast"]: fast, MODELS["smart"]: smart, MODELS["motor"]: motor}
    ).start()
    root = tmp_path_factory.mktemp("e2e")
    workspaces = root / "workspaces"
    workspaces.mkdir()
    log_path = root / "worker.log"
    with django_db_blocker.unblock():
        database_url = _database_url()
    _purge_queues()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "LLM_BASE_URL": llm.base_url,
        "LLM_API_KEY": "stub",
        "LLM_FAST_MODEL": MODELS["fast"],
        "LLM_SMART_MODEL": MODELS["smart"],
        "LLM_MOTOR_MODEL": MODELS["motor"],
        "LLM_MAX_RETRIES": "0",
        "MOTOR_WORKSPACES_DIR": str(workspaces),
        "MOTOR_SANDBOX_EGRESS_HOSTS": ",".join(f"{h}={upstream.ip}" for h in SERVICE_HOSTS),
        "CELERY_TASK_ALWAYS_EAGER": "false",
        # no failure hints: their LLM calls would take the scenarios' scripted answers
        "MOTOR_FAILURE_HINT_SECONDS": "0",
        # The setting, not only --pool: a configured pool wins over --pool=prefork.
        "CELERY_WORKER_POOL": "prefork",
    }
    log = log_path.open("w")
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "--pool=prefork",
            "--concurrency=2",
            "--loglevel=INFO",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    stack = Stack(
        llm=llm,
        fast=fast,
        smart=smart,
        motor=motor,
        upstream=upstream,
        workspaces=workspaces,
        worker=worker,
        log=log_path,
    )
    try:
        stack.wait_for(lambda: " ready." in log_path.read_text(errors="replace"), "the worker")
        yield stack
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
        log.close()
        llm.stop()


@pytest.fixture
def stack(e2e_stack: Stack, transactional_db: None, settings: Any) -> Iterator[Stack]:
    """The shared stack, reset for one scenario; this process talks to the same stub LLM."""
    settings.LLM_BASE_URL = e2e_stack.llm.base_url
    settings.LLM_API_KEY = "stub"
    settings.LLM_FAST_MODEL = MODELS["fast"]
    settings.LLM_SMART_MODEL = MODELS["smart"]
    settings.LLM_MOTOR_MODEL = MODELS["motor"]
    settings.LLM_MAX_RETRIES = 0
    settings.MOTOR_WORKSPACES_DIR = e2e_stack.workspaces
    e2e_stack.reset()
    _clean_redis()
    _purge_queues()
    yield e2e_stack
    _clean_redis()
