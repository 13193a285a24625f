"""Fixtures for the built-in brain: the API world (olivia owns alpha, bob owns bravo), a
conversation of olivia's with alpha, and a clean Redis turn-lock space."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cognition.brain.services import conversation_start
from cognition.models import Conversation
from runs.mutex import redis_client
from tests.cognition.conftest import World


@pytest.fixture(autouse=True)
def _no_stale_turn_locks() -> Iterator[None]:
    client = redis_client()

    def clean() -> None:
        for key in client.scan_iter(match="cognition:conversation:*"):
            client.delete(key)
        for key in client.scan_iter(match="motor:mutex:*"):
            client.delete(key)

    clean()
    yield
    clean()


@pytest.fixture
def chat(world: World) -> Conversation:
    return conversation_start(agent=world.alpha, user=world.olivia)
