"""The deployment docker-compose.yml uses: gunicorn with gthread workers. Long-polls waiting for
signals hold threads, not the process, so other requests are still served; a signal committed
while they wait wakes every one of them."""

from __future__ import annotations

import os
import signal as os_signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.db import connection

from cognition.delivery import wakeup_channel, wakeup_redis
from cognition.services import agent_issue_token
from config.celery import app as celery_app
from runs.outbox import signal_emit
from tests.skills.admin_support import make_agent, make_user

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]
QUEUE = "h-test-gunicorn-signals"
WAITERS = 3


def _database_url() -> str:
    params = connection.settings_dict
    user = params.get("USER") or "postgres"
    password = f":{params['PASSWORD']}" if params.get("PASSWORD") else ""
    host = params.get("HOST") or "127.0.0.1"
    port = params.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{params['NAME']}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def gunicorn(tmp_path: Path, settings) -> Iterator[str]:
    settings.MOTOR_SIGNAL_QUEUE = QUEUE
    port = _free_port()
    log = (tmp_path / "gunicorn.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "config.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
            "--worker-class",
            "gthread",
            "--threads",
            str(WAITERS + 2),
        ],
        cwd=REPO,
        env={**os.environ, "DATABASE_URL": _database_url(), "MOTOR_SIGNAL_QUEUE": QUEUE},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert process.poll() is None, (tmp_path / "gunicorn.log").read_text()
            assert time.monotonic() < deadline, "gunicorn did not start"
            time.sleep(0.2)
        yield base
    finally:
        os.killpg(process.pid, os_signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, os_signal.SIGKILL)
            process.wait()
        log.close()
        with celery_app.connection_for_write() as conn:
            conn.default_channel.queue_purge(QUEUE)


def _subscribers(agent_id: int) -> int:
    channel = wakeup_channel(agent_id)
    return dict(wakeup_redis().pubsub_numsub(channel)).get(channel.encode(), 0)


def test_waiting_long_polls_do_not_block_other_requests_and_all_wake(gunicorn: str) -> None:
    owner = make_user("olivia")
    agent = make_agent("scout", owner=owner)
    token = agent_issue_token(agent=agent, actor=owner).raw
    headers = {"Authorization": f"Bearer {token}"}
    pages: list[dict] = []

    def long_poll() -> None:
        response = httpx.get(
            f"{gunicorn}/api/v1/signals/",
            params={"after": 0, "wait": 30},
            headers=headers,
            timeout=60,
        )
        pages.append(response.json())

    threads = [threading.Thread(target=long_poll) for _ in range(WAITERS)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    while _subscribers(agent.pk) < WAITERS:
        assert time.monotonic() < deadline, "the long-polls did not start waiting"
        time.sleep(0.05)

    # while all of them wait, another request of the same worker process is answered
    me = httpx.get(f"{gunicorn}/api/v1/agents/me/", headers=headers, timeout=10)
    assert me.status_code == 200 and me.json()["name"] == "scout"
    assert _subscribers(agent.pk) == WAITERS  # and they are all still waiting

    # when a signal commits, every waiter returns it
    signal = signal_emit(agent_id=agent.pk, kind="motor_result", payload={"status": "completed"})
    for thread in threads:
        thread.join(timeout=60)
    assert [(p["next"], [s["id"] for s in p["results"]]) for p in pages] == [
        (1, [signal.pk])
    ] * WAITERS
