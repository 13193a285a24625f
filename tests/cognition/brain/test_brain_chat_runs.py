"""The chat page's state for the runs panel and its Cancel, through Django's test client (the
browser flow is in test_brain_chat_page.py)."""

from __future__ import annotations

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from cognition.brain.models import ConversationRun
from cognition.models import Conversation, Message
from runs.models import MotorRun, RunStatus
from runs.services import run_start
from tests.cognition.conftest import World
from tests.runs.helpers import new_workspace

pytestmark = pytest.mark.django_db


def _started(world: World, conversation: Conversation, tmp_path) -> MotorRun:
    started = run_start(
        agent_id=world.alpha.pk,
        task="count files",
        actor="test",
        tools=["read"],
        allowed_domains=[],
        credential_names=[],
        workspace=new_workspace(),
    )
    run = MotorRun.objects.get(pk=started["run_id"])
    ConversationRun.objects.create(run=run, conversation=conversation)
    return run


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_staff_who_may_view_runs_get_the_admin_run_page_as_the_link(world: World, tmp_path):
    conversation = Conversation.objects.create(agent=world.alpha, user=world.olivia)
    run = _started(world, conversation, tmp_path)
    world.olivia.user_permissions.add(
        Permission.objects.get(content_type__app_label="runs", codename="view_motorrun")
    )

    state = _client(world.olivia).get(reverse("chat-state", args=[conversation.pk])).json()

    (row,) = state["runs"]
    assert row["url"] == reverse("admin:runs_motorrun_change", args=[quote(run.pk)])
    assert row["cancel_url"] == f"/chat/{conversation.pk}/runs/{run.pk}/cancel/"
    assert row["step"] == "starting"


def test_cancel_of_a_finished_run_is_refused_and_changes_nothing(world: World, tmp_path):
    # given a run of the conversation that was already cancelled once
    conversation = Conversation.objects.create(agent=world.alpha, user=world.olivia)
    run = _started(world, conversation, tmp_path)
    client = _client(world.olivia)
    url = reverse("chat-cancel-run", args=[conversation.pk, run.pk])
    assert client.post(url).status_code == 200
    assert MotorRun.objects.get(pk=run.pk).status == RunStatus.CANCELLED
    messages = Message.objects.count()

    # when Cancel is posted again
    response = client.post(url)

    # then it is a 409 naming the reason, and no message was added
    assert response.status_code == 409
    assert response.json()["error"]["message"]
    assert Message.objects.count() == messages
    state = client.get(reverse("chat-state", args=[conversation.pk])).json()
    assert state["runs"][0]["cancel_url"] == ""


def test_a_stranger_cannot_cancel_a_run_of_someone_else_s_conversation(world: World, tmp_path):
    conversation = Conversation.objects.create(agent=world.alpha, user=world.olivia)
    run = _started(world, conversation, tmp_path)

    response = _client(world.bob).post(reverse("chat-cancel-run", args=[conversation.pk, run.pk]))

    assert response.status_code == 404
    assert MotorRun.objects.get(pk=run.pk).status == RunStatus.CREATED


def test_a_run_started_elsewhere_whose_news_reached_the_chat_is_listed_as_such(
    world: World, scripted_llm, settings, tmp_path
):
    from cognition.brain.services import brain_wake_handle
    from runs.models import Signal
    from tests.fixtures.llm import ScriptedLLM, reply_text
    from tests.runs.helpers import drive

    settings.MOTOR_WORKSPACES_DIR = tmp_path / "workspaces"
    settings.MOTOR_WORKSPACES_DIR.mkdir()
    # given olivia's conversation with one run of its own
    conversation = Conversation.objects.create(agent=world.alpha, user=world.olivia)
    own = _started(world, conversation, tmp_path)
    MotorRun.objects.filter(pk=own.pk).update(status=RunStatus.COMPLETED)
    # and a run started over the API, which failed and whose signal woke this conversation
    api_run = run_start(
        agent_id=world.alpha.pk, task="from curl", tools=[], workspace=new_workspace(), actor="api"
    )["run_id"]
    drive(api_run, ScriptedLLM().client())  # no scripted answer: the run fails at once
    scripted_llm.add(reply_text("A run you started elsewhere failed."))
    signal = Signal.objects.filter(run_id=api_run).latest("id")
    assert brain_wake_handle(signal_id=signal.pk, client=scripted_llm.client()) == "handled"
    # and a later run of the agent this conversation never heard of
    unheard = run_start(
        agent_id=world.alpha.pk, task="quiet", tools=[], workspace=new_workspace(), actor="api"
    )["run_id"]

    state = _client(world.olivia).get(reverse("chat-state", args=[conversation.pk])).json()

    # then the panel lists the run whose news is in the conversation, marked as started
    # elsewhere, with the chat's own run; not the one the conversation never heard of
    assert [(row["id"], row["origin"]) for row in state["runs"]] == [
        (api_run, "elsewhere"),
        (own.pk, "chat"),
    ]
    assert unheard not in {row["id"] for row in state["runs"]}
    assert MotorRun.objects.get(pk=api_run).status == RunStatus.FAILED
