"""The chat's runs panel lists the runs of its own conversation only: not those of another
conversation with the same agent, nor those of another agent of the same person (the page and
its live state, through Django's test client)."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from cognition.brain.models import ConversationRun
from cognition.models import Agent, Conversation
from runs.models import MotorRun, RunStatus
from runs.services import run_start
from tests.cognition.conftest import World
from tests.runs.helpers import new_workspace
from tests.skills.admin_support import make_agent

pytestmark = pytest.mark.django_db


def _run_in(conversation: Conversation, agent: Agent, task: str) -> str:
    """A run of `agent` started from `conversation`, finished so the agent may start another."""
    run_id = run_start(
        agent_id=agent.pk, task=task, actor="test", tools=["read"], workspace=new_workspace()
    )["run_id"]
    ConversationRun.objects.create(run_id=run_id, conversation=conversation)
    MotorRun.objects.filter(pk=run_id).update(status=RunStatus.COMPLETED)
    return run_id


def test_the_runs_panel_shows_only_the_conversations_own_runs(world: World, settings, tmp_path):
    settings.MOTOR_WORKSPACES_DIR = tmp_path / "workspaces"
    settings.MOTOR_WORKSPACES_DIR.mkdir()
    # given olivia's two chats with alpha and one with her second agent, each with a run
    here = Conversation.objects.create(agent=world.alpha, user=world.olivia)
    other_chat = Conversation.objects.create(agent=world.alpha, user=world.olivia)
    second_agent = make_agent("alpha-two", owner=world.olivia)
    other_agent_chat = Conversation.objects.create(agent=second_agent, user=world.olivia)
    own = _run_in(here, world.alpha, "own task")
    _run_in(other_chat, world.alpha, "other chat's task")
    _run_in(other_agent_chat, second_agent, "other agent's task")
    client = Client()
    client.force_login(world.olivia)

    # when she opens the first chat, and when its live state is polled
    page = client.get(reverse("chat-detail", args=[here.pk])).content.decode()
    state = client.get(reverse("chat-state", args=[here.pk])).json()

    # then the panel holds that chat's run and no other, on the page and in the state
    embedded = re.search(
        r'<script id="runs-data" type="application/json">(.*?)</script>', page, flags=re.S
    )
    assert embedded is not None
    assert [(row["id"], row["task"]) for row in json.loads(embedded[1])] == [(own, "own task")]
    assert [(row["id"], row["task"]) for row in state["runs"]] == [(own, "own task")]
