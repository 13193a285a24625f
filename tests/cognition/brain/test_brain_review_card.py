"""The chat's review card of a skill a run wrote: it names (and links) the run that wrote it, and
reads "rejected" once the skill's version was rejected."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from cognition.brain.services import brain_wake_handle
from cognition.models import Conversation
from skills.models import Policy
from skills.reviewing import policy_reject
from skills.services import Actor
from tests.cognition.conftest import World
from tests.fixtures.llm import ScriptedLLM, reply_text, reply_tools, tool_call
from tests.runs.helpers import drive

from .test_brain_wake import SKILL, _signal, _start_run

pytestmark = pytest.mark.django_db


def _card(world: World, chat: Conversation) -> str:
    client = Client()
    client.force_login(world.olivia)
    state = client.get(reverse("chat-state", args=[chat.pk])).json()
    (card,) = [m["html"] for m in state["messages"] if "review-card" in m["html"]]
    return card


@pytest.fixture
def reviewed(world: World, chat: Conversation, scripted_llm, workspaces) -> str:
    """A run of the chat wrote the mailer skill and completed; the wake showed its review card."""
    brain, motor = scripted_llm, ScriptedLLM()
    run_id = _start_run(world, chat, brain)
    motor.add(
        reply_tools(tool_call("write", {"path": "SKILL.md", "content": SKILL})),
        reply_text("Wrote the mailer skill."),
    )
    drive(run_id, motor.client())
    brain.add(reply_text("I learned mailer. Approve?"))
    assert brain_wake_handle(signal_id=_signal(run_id, "completed").pk, client=brain.client()) == (
        "handled"
    )
    return run_id


def test_the_review_card_names_and_links_the_run_that_wrote_the_skill(
    world: World, chat: Conversation, reviewed: str
) -> None:
    card = _card(world, chat)
    assert (
        f'<p class="card-run">Written by run <a href="/api/v1/runs/{reviewed}/">{reviewed}</a></p>'
        in card
    )
    # staff who may view runs get the admin's run console as the link
    world.olivia.user_permissions.add(
        Permission.objects.get(content_type__app_label="runs", codename="view_motorrun")
    )
    console = reverse("admin:runs_motorrun_change", args=[quote(reviewed)])
    assert f'Written by run <a href="{console}">{reviewed}</a>' in _card(world, chat)


def test_a_rejected_skill_reads_rejected_on_its_card(
    world: World, chat: Conversation, reviewed: str
) -> None:
    # given the skill's version was rejected (in the admin, by olivia)
    policy = Policy.objects.get(skill__name="mailer", agent=world.alpha)
    policy_reject(
        policy=policy, note="It mails anyone.", actor=Actor(user=world.olivia, label="admin:o")
    )
    # then its card's status reads rejected, on the page and in the live state
    card = _card(world, chat)
    assert re.search(r'<strong class="card-status">rejected</strong>', card), card
    client = Client()
    client.force_login(world.olivia)
    state = client.get(reverse("chat-state", args=[chat.pk])).json()
    assert state["skills"] == {"mailer": "rejected"}
