"""The built-in brain and SkillForge: an explicit request starts it, no matching skill makes the
brain offer it (started only on the user's yes), open flows are relayed, a failing skill is
offered an improvement; the agent alone can never start a flow."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from cognition.brain.models import Conversation, Message, MessageRole, TurnTrigger
from cognition.brain.prompts import system_prompt, trigger_instructions
from cognition.models import Agent
from cognition.principals import Principal
from cognition.tools import core_dispatch
from forge.flow_services import flow_start
from forge.models import ForgeFlow
from skills.bundle import bundle_from_files
from skills.install import skill_install_bundle
from skills.services import Actor

pytestmark = pytest.mark.django_db

START = "The user asks for a new tool: start SkillForge with core_skill create"
OFFER = "No skill fits this request."


@pytest.fixture
def conversation() -> Conversation:
    owner = get_user_model().objects.create_user("olivia")
    agent = Agent.objects.create(name="alpha", owner=owner)
    text = "---\nname: exchange-rates\ndescription: Fetch currency exchange rates.\n---\n# Steps\n"
    bundle = bundle_from_files({"SKILL.md": text.encode()}, dir_name="exchange-rates")
    skill_install_bundle(bundle=bundle, actor=Actor.system("test"), agent=agent)
    return Conversation.objects.create(agent=agent, user=owner)


def say(conversation: Conversation, text: str) -> str:
    Message.objects.create(
        conversation=conversation,
        role=MessageRole.USER,
        trigger=TurnTrigger.USER_MESSAGE,
        text=text,
    )
    return system_prompt(conversation=conversation, trigger=TurnTrigger.USER_MESSAGE)


def test_an_explicit_request_for_a_tool_starts_skillforge(conversation):
    prompt = say(conversation, "Create a tool that checks whether my servers are up")
    assert START in prompt and OFFER not in prompt


def test_no_matching_skill_makes_the_brain_offer_one_started_only_on_yes(conversation):
    prompt = say(conversation, "is status.myapp.io up right now?")
    assert OFFER in prompt
    assert "Start it (core_skill create) only when the user says yes in a later message" in prompt
    assert START not in prompt


def test_a_matching_skill_is_used_not_offered(conversation):
    prompt = say(conversation, "what is the euro exchange rate?")
    assert OFFER not in prompt and START not in prompt


def test_an_open_flow_is_relayed_with_its_question(conversation):
    flow = flow_start(agent=conversation.agent, request="uptime", actor="t")
    flow.ask(topic="domains", question="Which web addresses should the tool be able to reach?")
    flow.save()
    prompt = say(conversation, "status.myapp.io")
    assert (
        f'<skillforge_flow flow_id="{flow.id}" state="designing" skill="">Which web addresses '
        "should the tool be able to reach?</skillforge_flow>"
    ) in prompt
    assert "call core_skill answer with its flow_id" in prompt


def test_a_failing_skill_is_offered_an_improvement_never_started():
    wake = {"kind": "skill_failing", "skill": "uptime-checker", "failure_rate": 0.4, "calls": 20}
    text = trigger_instructions(trigger=TurnTrigger.SCHEDULE, wake=wake)
    assert "offer to improve it with SkillForge" in text
    assert "nothing is deployed by itself" in text


def test_the_agent_alone_cannot_start_a_flow(conversation):
    # given the agent acting on an event turn (not the user's words)
    result = core_dispatch(
        principal=Principal.for_agent(conversation.agent),
        tool_name="core_skill",
        arguments={"action": "create", "request": "make a tool that posts to my channel"},
        trigger=TurnTrigger.MOTOR_RESULT,
    )
    # then the consent gate refuses it and no flow exists
    assert result["ok"] is False
    assert result["error"]["code"] == "consent_required"
    assert ForgeFlow.objects.count() == 0


def test_the_user_starts_one_through_the_brains_tool(conversation):
    result = core_dispatch(
        principal=Principal.for_human(conversation.user),
        tool_name="core_skill",
        arguments={
            "action": "create",
            "agent": str(conversation.agent_id),
            "request": "make a tool that adds numbers",
            "domains": [],
            "credentials": [],
        },
        trigger=TurnTrigger.USER_MESSAGE,
    )
    assert result["ok"] is True, result
    assert result["result"]["state"] == "designing"
    assert ForgeFlow.objects.get().started_by == "api:olivia"


def test_a_failing_skill_event_reads_as_such():
    from cognition.brain.services import _event_text

    facts = {
        "kind": "skill_failing",
        "skill": "uptime-checker",
        "failure_rate": 0.4,
        "calls": 20,
        "last_error": "ConnectTimeout",
    }
    assert _event_text(facts) == (
        "Skill 'uptime-checker' failed 40% of its last 20 calls (last error: ConnectTimeout)."
    )
