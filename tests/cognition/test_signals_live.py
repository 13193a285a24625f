"""The signal endpoints over a real HTTP server (threaded WSGI): events reach an open stream as
they commit, not when the stream ends; the sweeper is on celery-beat's schedule."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from django.conf import settings as django_settings
from pytest_django.live_server_helper import LiveServer

from cognition.services import agent_issue_token
from config.celery import app as celery_app
from runs.outbox import signal_emit
from tests.skills.admin_support import make_agent, make_user

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "h-test-live-signals"


@pytest.fixture(autouse=True)
def _private_queue(settings) -> Iterator[None]:
    settings.MOTOR_SIGNAL_QUEUE = QUEUE
    settings.MOTOR_SIGNAL_STREAM_MAX_SECONDS = 20
    settings.MOTOR_SIGNAL_STREAM_HEARTBEAT_SECONDS = 0.5
    yield
    with celery_app.connection_for_write() as conn:
        conn.default_channel.queue_purge(QUEUE)


def _events(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    """(kind, text) per SSE block: ("event", data JSON) or ("comment", text)."""
    block: list[str] = []
    for line in lines:
        if line:
            block.append(line)
            continue
        if not block:
            continue
        if block[0].startswith(":"):
            yield "comment", block[0]
        elif block[0].startswith("id: "):
            yield "event", block[1][len("data: ") :]
        block = []


def test_an_open_stream_receives_each_signal_as_it_commits(live_server: LiveServer) -> None:
    owner = make_user("olivia")
    agent = make_agent("scout", owner=owner)
    token = agent_issue_token(agent=agent, actor=owner).raw
    signal_emit(agent_id=agent.pk, kind="motor_result", payload={"status": "first"})
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}

    with (
        httpx.Client(base_url=live_server.url, timeout=30) as client,
        client.stream("GET", "/api/v1/signals/stream/", headers=headers) as response,
    ):
        assert response.status_code == 200
        events = _events(response.iter_lines())
        # the backlog arrives first
        kind, data = next(events)
        assert (kind, json.loads(data)["payload"]) == ("event", {"status": "first"})
        # an idle stream gets a heartbeat while it stays open
        assert next(events) == ("comment", ": heartbeat")
        # a signal committed now arrives on the same open connection
        signal_emit(agent_id=agent.pk, kind="motor_result", payload={"status": "second"})
        received = next((d for k, d in events if k == "event"), None)
        assert received is not None
        assert (json.loads(received)["seq"], json.loads(received)["payload"]) == (
            2,
            {"status": "second"},
        )


def test_the_delivery_sweeper_runs_on_celery_beat() -> None:
    entry = django_settings.CELERY_BEAT_SCHEDULE["signal-delivery-sweeper"]
    assert entry == {
        "task": "cognition.signal_delivery_sweep",
        "schedule": float(django_settings.MOTOR_SIGNAL_SWEEP_INTERVAL_SECONDS),
    }
    celery_app.loader.import_default_modules()
    assert "cognition.signal_delivery_sweep" in celery_app.tasks
