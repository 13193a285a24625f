"""Fixtures for the runtime tests: agents, the scripted LLM, Redis and the run queue."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from urllib.parse import urlparse

import pytest
import redis
from django.conf import settings
from django.contrib.auth import get_user_model

from cognition.models import Agent
from runs.mutex import redis_client
from tests.fixtures.llm import llm_stub_server, scripted_llm  # noqa: F401 - fixtures
from tests.runs.faults import (  # noqa: F401 - fixtures
    broker_is_private_redis,
    database_proxy,
    private_redis,
    processes,
)

_agent_numbers = iter(range(1, 1_000_000))


@pytest.fixture
def make_agent(db: None) -> Callable[[], Agent]:
    def make() -> Agent:
        number = next(_agent_numbers)
        owner = get_user_model().objects.create_user(username=f"owner{number}", password="x")
        return Agent.objects.create(name=f"agent-{number}", owner=owner)

    return make


@pytest.fixture
def agent(make_agent: Callable[[], Agent]) -> Agent:
    return make_agent()


@pytest.fixture
def test_redis() -> redis.Redis:
    """The Redis database the runtime uses in this test run; never database 0 (development)."""
    db = int(urlparse(settings.REDIS_URL).path.lstrip("/") or 0)
    assert db != 0, "tests must not run against Redis database 0"
    return redis_client()


@pytest.fixture(autouse=True)
def _clean_mutex_keys_and_queue(request: pytest.FixtureRequest) -> Iterator[None]:
    """Start and end each test without mutex keys or queued slices from other tests."""
    client = redis_client()

    def clean() -> None:
        for key in client.scan_iter(match="motor:mutex:*"):
            client.delete(key)
        from config.celery import app

        with app.connection_for_write() as connection:
            queue = getattr(settings, "MOTOR_RUN_QUEUE", "") or "celery"
            connection.default_channel.queue_purge(queue)

    clean()
    yield
    clean()
