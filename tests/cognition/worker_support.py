"""Real Celery worker processes for the API tests (the LLM played by the local stub server).

The `start_worker` and `worker` fixtures are the runtime tests' (tests/runs/test_worker_process);
this module re-exports them with the helpers the API tests need around a live run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runs.models import MotorRun
from runs.mutex import redis_client
from tests.runs.test_worker_process import start_worker, worker  # noqa: F401 - fixtures


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def run_status(run_id: str) -> str:
    return MotorRun.objects.filter(pk=run_id).values_list("status", flat=True).get()


def worker_logs(tmp_path: Path) -> str:
    """Everything the worker processes of this test printed (stdout and stderr)."""
    return "".join(p.read_text(errors="replace") for p in sorted(tmp_path.glob("worker*.log")))


@pytest.fixture
def clean_run_queue() -> Iterator[None]:
    """No mutex key or queued slice from another test before and after this one."""
    from django.conf import settings

    from config.celery import app

    def clean() -> None:
        client = redis_client()
        for key in client.scan_iter(match="motor:mutex:*"):
            client.delete(key)
        with app.connection_for_write() as connection:
            connection.default_channel.queue_purge(
                getattr(settings, "MOTOR_RUN_QUEUE", "") or "celery"
            )

    clean()
    yield
    clean()
