"""<available_skills> lists the skills the index ranks highest for the user's latest message
(top k, one line each with the score), filled up with the agent's others when fewer match; event
turns keep the full listing. core.skill search and describe reach the rest."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model

from cognition.brain.models import Conversation, Message, MessageRole, TurnTrigger
from cognition.brain.prompts import system_prompt
from cognition.core_skill import core_skill
from cognition.models import Agent
from cognition.principals import Principal
from runs.errors import InvalidRunParams
from skills.bundle import bundle_from_files
from skills.errors import SkillNotFound
from skills.install import skill_install_bundle
from skills.services import Actor

pytestmark = pytest.mark.django_db

FILLERS = [f"report-{c}" for c in "abcdefghijklmn"]  # 14 skills that match no query below


@pytest.fixture
def conversation(settings) -> Conversation:
    settings.MOTOR_SKILL_SEARCH_TOP_K = 5
    owner = get_user_model().objects.create_user("olivia")
    agent = Agent.objects.create(name="alpha", owner=owner)
    for name, description in [
        ("exchange-rates", "Fetch currency exchange rates."),
        ("csv-summary", "Summarize a CSV file."),
        *[(n, "Write a weekly status note.") for n in FILLERS],
    ]:
        text = f"---\nname: {name}\ndescription: {description}\n---\n# Steps\n"
        bundle = bundle_from_files({"SKILL.md": text.encode()}, dir_name=name)
        skill_install_bundle(bundle=bundle, actor=Actor.system("test"), agent=agent)
    return Conversation.objects.create(agent=agent, user=owner)


def listed(prompt: str) -> list[str]:
    block = prompt.split("<available_skills>", 1)[1].split("</available_skills>", 1)[0]
    return re.findall(r'<skill name="([^"]+)"', block)


def say(conversation: Conversation, text: str) -> str:
    Message.objects.create(
        conversation=conversation,
        role=MessageRole.USER,
        trigger=TurnTrigger.USER_MESSAGE,
        text=text,
    )
    return system_prompt(conversation=conversation, trigger=TurnTrigger.USER_MESSAGE)


def test_the_best_ranked_skills_come_first_and_the_list_stops_at_k(conversation) -> None:
    prompt = say(conversation, "how many euros is 20 dollars at today's exchange rate?")
    assert listed(prompt) == ["exchange-rates", "csv-summary", *FILLERS[:3]]
    assert re.search(
        r'<skill name="exchange-rates" status="pending_review" score="\d+\.\d{4}">'
        r"Fetch currency exchange rates\.</skill>",
        prompt,
    )
    # the latest message decides
    assert listed(say(conversation, "summarize the attached csv"))[0] == "csv-summary"


def test_a_message_matching_nothing_lists_the_agents_skills_by_name_up_to_k(conversation) -> None:
    assert listed(say(conversation, "hello there")) == [
        "csv-summary",
        "exchange-rates",
        *FILLERS[:3],
    ]


def test_an_event_turn_lists_every_skill(conversation) -> None:
    prompt = system_prompt(conversation=conversation, trigger=TurnTrigger.MOTOR_RESULT)
    assert len(listed(prompt)) == 16


def test_core_skill_search_and_describe(conversation) -> None:
    agent = conversation.agent
    principal = Principal.for_agent(agent)
    found = core_skill(
        principal=principal, agent=agent, action="search", trigger=None, query="exchange rates"
    )
    assert found["mode"] == "lexical"
    assert [s["name"] for s in found["skills"]] == ["exchange-rates"]
    assert found["skills"][0]["status"] == "pending_review"
    described = core_skill(
        principal=principal, agent=agent, action="describe", trigger=None, name="csv-summary"
    )
    assert described["skill_md"].startswith("---\nname: csv-summary\n")
    with pytest.raises(InvalidRunParams):
        core_skill(principal=principal, agent=agent, action="search", trigger=None)
    with pytest.raises(InvalidRunParams):
        core_skill(principal=principal, agent=agent, action="describe", trigger=None, name="A!")
    with pytest.raises(SkillNotFound):
        core_skill(principal=principal, agent=agent, action="describe", trigger=None, name="nope")
