"""GET /api/v1/signals/ (long-poll) and /api/v1/signals/stream/ (server-sent events), against the
real PostgreSQL and Redis: signals committed by other transactions while a reader waits."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import close_old_connections, connection
from rest_framework.test import APIClient

from cognition.delivery import wakeup_channel, wakeup_redis
from cognition.models import Agent
from cognition.services import personal_token_create
from config.celery import app as celery_app
from runs.models import Signal
from runs.outbox import signal_emit
from tests.skills.admin_support import make_user

from .conftest import World, bearer

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "h-test-signals"


@pytest.fixture(autouse=True)
def _private_signal_queue(settings) -> Iterator[None]:
    """Dispatch messages of the signals emitted here go to a queue no worker reads; purged."""
    settings.MOTOR_SIGNAL_QUEUE = QUEUE
    yield
    with celery_app.connection_for_write() as conn:
        conn.default_channel.queue_purge(QUEUE)


def emit(agent: Agent, n: int = 1, status: str = "completed") -> list[Signal]:
    return [
        signal_emit(agent_id=agent.pk, kind="motor_result", payload={"status": status, "n": i})
        for i in range(n)
    ]


def _subscribers(agent: Agent) -> int:
    channel = wakeup_channel(agent.pk)
    return dict(wakeup_redis().pubsub_numsub(channel)).get(channel.encode(), 0)


def emit_when_waiting(agent: Agent, *, readers: int = 1, payload_n: int = 99) -> threading.Thread:
    """In another thread (its own connection and transaction): wait until `readers` requests
    listen on the agent's channel, then commit one signal."""

    def run() -> None:
        try:
            deadline = time.monotonic() + 30
            while _subscribers(agent) < readers and time.monotonic() < deadline:
                time.sleep(0.02)
            signal_emit(
                agent_id=agent.pk, kind="motor_result", payload={"status": "late", "n": payload_n}
            )
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def get_page(client: APIClient, **params: Any) -> dict[str, Any]:
    response = client.get("/api/v1/signals/", params)
    assert response.status_code == 200, response.content
    return response.json()


# --- long-poll -----------------------------------------------------------------------------------


def test_signals_after_a_cursor_come_back_at_once_in_seq_order(world: World) -> None:
    signals = emit(world.alpha, 3)
    client = bearer(world.alpha_token)

    page = get_page(client, after=1, wait=30)

    assert [s["seq"] for s in page["results"]] == [2, 3]
    assert page["next"] == 3
    first = page["results"][0]
    assert first == {
        "id": signals[1].id,
        "seq": 2,
        "kind": "motor_result",
        "run_id": None,
        "agent": world.alpha.pk,
        "created_at": first["created_at"],
        "payload": {"status": "completed", "n": 1},
    }
    assert get_page(client, after=3, limit=5) == {"results": [], "next": 3}
    assert [s["seq"] for s in get_page(client, after=0, limit=2)["results"]] == [1, 2]


def test_a_long_poll_waits_and_returns_the_signal_that_commits_during_the_wait(
    world: World,
) -> None:
    emit(world.alpha, 1)
    thread = emit_when_waiting(world.alpha)

    page = get_page(bearer(world.alpha_token), after=1, wait=30)
    thread.join()

    assert [(s["seq"], s["payload"]["status"]) for s in page["results"]] == [(2, "late")]
    assert page["next"] == 2


def test_a_long_poll_that_sees_nothing_returns_empty_with_the_same_cursor(
    world: World, settings
) -> None:
    # the wait is capped by the setting (30 s in production); one second keeps the test short
    settings.MOTOR_SIGNAL_LONG_POLL_MAX_SECONDS = 1
    emit(world.alpha, 2)

    assert get_page(bearer(world.alpha_token), after=2, wait=30) == {"results": [], "next": 2}
    assert _subscribers(world.alpha) == 0


def test_a_second_agent_never_sees_the_first_agents_signals(world: World) -> None:
    emit(world.alpha, 2)
    bravo = bearer(world.bravo_token)

    assert get_page(bravo, after=0) == {"results": [], "next": 0}
    # naming the other agent is a 404, never a peek
    response = bravo.get("/api/v1/signals/", {"agent": world.alpha.pk})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "agent_not_found"
    stream = bravo.get("/api/v1/signals/stream/", {"agent": world.alpha.name})
    assert stream.status_code == 404


def test_humans_read_the_signals_of_agents_they_own_only(world: World, session_client) -> None:
    emit(world.alpha, 1)
    emit(world.bravo, 2)
    olivia = session_client(world.olivia)

    page = get_page(olivia, agent=world.alpha.pk)
    assert [(s["agent"], s["seq"]) for s in page["results"]] == [(world.alpha.pk, 1)]
    assert olivia.get("/api/v1/signals/", {"agent": world.bravo.pk}).status_code == 404
    # a personal token works the same; a superuser may read any agent
    bob = bearer(personal_token_create(user=world.bob, name="t", actor=world.bob).raw)
    assert [s["seq"] for s in get_page(bob, agent=world.bravo.name)["results"]] == [1, 2]
    root = make_user("root", superuser=True)
    root_client = bearer(personal_token_create(user=root, name="t", actor=root).raw)
    assert [s["seq"] for s in get_page(root_client, agent=world.bravo.pk)["results"]] == [1, 2]
    # a human with several agents must say which
    response = root_client.get("/api/v1/signals/")
    assert response.status_code == 400
    assert response.json()["error"]["details"]["parameter"] == "agent"


@pytest.mark.parametrize(
    "params, field",
    [
        ({"after": "-1"}, "after"),
        ({"after": "x"}, "after"),
        ({"after": str(2**63)}, "after"),
        ({"wait": "-5"}, "wait"),
        ({"wait": "1.5"}, "wait"),
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
    ],
)
def test_bad_parameters_are_a_400_naming_the_parameter(world: World, params, field) -> None:
    response = bearer(world.alpha_token).get("/api/v1/signals/", params)
    assert response.status_code == 400
    body = response.json()["error"]
    assert body["code"] == "invalid"
    assert field in body["details"]["fields"]


def test_without_credentials_nothing_is_returned(world: World) -> None:
    emit(world.alpha, 1)
    assert APIClient().get("/api/v1/signals/").status_code == 401
    assert APIClient().get("/api/v1/signals/stream/").status_code == 401


# --- server-sent events --------------------------------------------------------------------------


def read_stream(client: APIClient, *, headers: dict[str, str] | None = None, **params: Any):
    """(events as (id, data), heartbeat count, final comment) of one whole stream."""
    response = client.get("/api/v1/signals/stream/", params, headers=headers or {})
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "text/event-stream; charset=utf-8"
    assert response["Cache-Control"] == "no-cache"
    text = b"".join(response.streaming_content).decode()
    events, heartbeats, comments = [], 0, []
    for block in text.split("\n\n"):
        if not block:
            continue
        if block.startswith(": heartbeat"):
            heartbeats += 1
        elif block.startswith(":"):
            comments.append(block)
        elif block.startswith("id: "):
            id_line, data_line = block.split("\n")
            events.append((int(id_line[4:]), json.loads(data_line[len("data: ") :])))
        else:
            assert block == "retry: 1000"
    return events, heartbeats, comments


@pytest.fixture
def short_streams(settings) -> None:
    settings.MOTOR_SIGNAL_STREAM_MAX_SECONDS = 2
    settings.MOTOR_SIGNAL_STREAM_HEARTBEAT_SECONDS = 0.4


def test_the_stream_sends_each_signal_once_and_resumes_after_last_event_id(
    world: World, short_streams
) -> None:
    signals = emit(world.alpha, 3)
    client = bearer(world.alpha_token)
    thread = emit_when_waiting(world.alpha)

    events, heartbeats, comments = read_stream(client)
    thread.join()

    assert [seq for seq, _ in events] == [1, 2, 3, 4]
    assert [data["id"] for _, data in events[:3]] == [s.id for s in signals]
    assert events[3][1]["payload"] == {"status": "late", "n": 99}
    assert heartbeats >= 1  # the idle stream was kept alive
    assert comments == [": stream ends after 2 s; reconnect with Last-Event-ID: 4"]

    # a reconnect with Last-Event-ID gets only what came after it; ?after is overridden
    resumed, _, _ = read_stream(client, headers={"Last-Event-ID": "2"}, after=0)
    assert [seq for seq, _ in resumed] == [3, 4]
    caught_up, _, _ = read_stream(client, headers={"Last-Event-ID": "4"})
    assert caught_up == []


def test_a_bad_last_event_id_is_a_400(world: World) -> None:
    response = bearer(world.alpha_token).get(
        "/api/v1/signals/stream/", headers={"Last-Event-ID": "abc"}
    )
    assert response.status_code == 400
    assert "Last-Event-ID" in response.json()["error"]["details"]["fields"]


# --- concurrency ---------------------------------------------------------------------------------


def test_signals_committed_concurrently_reach_every_cursor_reader_exactly_once(
    world: World, settings
) -> None:
    # given 4 writers committing 10 signals each in their own transactions, all at once,
    settings.MOTOR_SIGNAL_LONG_POLL_MAX_SECONDS = 2
    settings.MOTOR_SIGNAL_STREAM_MAX_SECONDS = 4
    settings.MOTOR_SIGNAL_STREAM_HEARTBEAT_SECONDS = 1
    writers, per_writer = 4, 10
    total = writers * per_writer
    start = threading.Barrier(writers + 2)
    errors: list[BaseException] = []

    def guarded(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # reported by the assertion below
                errors.append(exc)
            finally:
                close_old_connections()
                connection.close()

        return run

    def write(w: int) -> Callable[[], None]:
        def run() -> None:
            start.wait()
            for i in range(per_writer):
                signal_emit(
                    agent_id=world.alpha.pk,
                    kind="motor_result",
                    payload={"status": "completed", "writer": w, "i": i},
                )

        return run

    polled: list[int] = []

    def poll() -> None:
        # a long-poll reader that keeps its cursor = `next`
        client = bearer(world.alpha_token)
        cursor = 0
        start.wait()
        while len(polled) < total:
            page = client.get("/api/v1/signals/", {"after": cursor, "wait": 2, "limit": 7}).json()
            polled.extend(s["seq"] for s in page["results"])
            cursor = page["next"]
            if not page["results"] and len(polled) < total:
                break  # a whole wait with nothing new while writers are done: stop

    threads = [threading.Thread(target=guarded(write(w))) for w in range(writers)]
    threads.append(threading.Thread(target=guarded(poll)))
    for thread in threads:
        thread.start()
    # when an event stream reads alongside them (in this thread)
    start.wait()
    streamed, _, _ = read_stream(bearer(world.alpha_token))
    for thread in threads:
        thread.join()

    # then both readers saw every signal exactly once, in seq order
    assert errors == []
    expected = list(range(1, total + 1))
    assert polled == expected
    assert [seq for seq, _ in streamed][: len(expected)] == expected[: len(streamed)]
    # the stream may end before the last commits; resuming from its last id completes it
    last = streamed[-1][0] if streamed else 0
    rest, _, _ = read_stream(bearer(world.alpha_token), headers={"Last-Event-ID": str(last)})
    assert [seq for seq, _ in streamed] + [seq for seq, _ in rest] == expected
    assert sorted(
        Signal.objects.filter(agent=world.alpha).values_list("payload__writer", flat=True)
    ) == sorted(w for w in range(writers) for _ in range(per_writer))
