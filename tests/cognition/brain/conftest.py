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


@pytest.fixture
def workspaces(settings, tmp_path):
    root = tmp_path / "workspaces"
    root.mkdir()
    settings.MOTOR_WORKSPACES_DIR = root
    return root


@pytest.fixture
def models(settings) -> dict[str, str]:
    """Distinct model names per role, so tests can tell which role a request used."""
    settings.LLM_FAST_MODEL = "fast-model"
    settings.LLM_SMART_MODEL = "smart-model"
    settings.LLM_MOTOR_MODEL = "motor-model"
    return {"fast": "fast-model", "smart": "smart-model", "motor": "motor-model"}
