"""The turn engine with the scripted LLM: prompt, tools, tool calls, limits and failures."""

from __future__ import annotations

import json

import pytest

from cognition.brain.models import Message
from cognition.brain.services import conversation_post_message
from cognition.models import Conversation
from skills.imports import skill_import_pasted
from skills.models import Policy, PolicyStatus
from skills.services import Actor
from tests.cognition.conftest import World, skill_md
from tests.fixtures.llm import reply_text, reply_tools, tool_call

pytestmark = pytest.mark.django_db


def _rows(conversation: Conversation) -> list[tuple[str, str, str]]:
    return list(conversation.messages.order_by("id").values_list("role", "trigger", "text"))


def test_a_user_message_gets_a_turn_with_skills_in_the_prompt_and_the_core_tools(
    world: World, chat: Conversation, scripted_llm
) -> None:
    # given alpha holds one pending skill
    skill_import_pasted(text=skill_md("mailer"), actor=Actor.system("t"), agent=world.alpha)
    scripted_llm.add(
        reply_tools(tool_call("core_skill", {"action": "list"}, call_id="c1")),
        reply_text("You have one skill, mailer, waiting for review."),
    )
    # when olivia writes
    added = conversation_post_message(
        conversation_id=chat.pk,
        text="What can you do?",
        actor=world.olivia,
        client=scripted_llm.client(),
    )
    # then the call and the answer are stored in order
    assert [(m.role, m.trigger) for m in added] == [
        ("user", "user_message"),
        ("assistant", "user_message"),
        ("tool", "user_message"),
        ("assistant", "user_message"),
    ]
    assert added[0].author == world.olivia
    assert added[1].tool_calls == [
        {"id": "c1", "name": "core_skill", "arguments": '{"action": "list"}'}
    ]
    assert added[2].tool_result["ok"] is True
    assert [s["name"] for s in added[2].tool_result["result"]["skills"]] == ["mailer"]
    assert added[3].text == "You have one skill, mailer, waiting for review."
    # and the model saw the skill in <available_skills> and the four core tools
    first = scripted_llm.requests[0]
    system = first["messages"][0]["content"]
    assert (
        '<skill name="mailer" status="pending_review">Talks to the example API.</skill>' in system
    )
    assert [t["function"]["name"] for t in first["tools"]] == [
        "core_act",
        "core_task",
        "core_skill",
        "core_credential",
    ]
    assert first["messages"][1:] == [{"role": "user", "content": "What can you do?"}]
    # the second request carries the call and its result
    second = scripted_llm.requests[1]["messages"]
    assert second[-1]["role"] == "tool" and second[-1]["tool_call_id"] == "c1"
    assert json.loads(second[-1]["content"])["ok"] is True


def test_the_human_s_message_passes_the_consent_gate_for_an_approval(
    world: World, chat: Conversation, scripted_llm
) -> None:
    # given a reviewed skill of alpha
    skill_import_pasted(text=skill_md("mailer"), actor=Actor.system("t"), agent=world.alpha)
    scripted_llm.add(
        reply_tools(tool_call("core_skill", {"action": "review", "name": "mailer"})),
        reply_tools(tool_call("core_skill", {"action": "approve", "name": "mailer"})),
        reply_text("Approved."),
    )
    # when olivia asks for it in her own words
    conversation_post_message(
        conversation_id=chat.pk,
        text="Yes, approve mailer.",
        actor=world.olivia,
        client=scripted_llm.client(),
    )
    # then the skill is approved by her
    policy = Policy.objects.get(agent=world.alpha, skill__name="mailer")
    assert policy.status == PolicyStatus.APPROVED
    assert policy.approved_by == world.olivia


def test_the_tool_call_cap_refuses_further_calls_and_asks_for_words(
    world: World, chat: Conversation, scripted_llm, settings
) -> None:
    settings.COGNITION_TURN_MAX_TOOL_CALLS = 2
    listing = {"action": "list"}
    scripted_llm.add(
        reply_tools(
            tool_call("core_skill", listing, call_id="a"),
            tool_call("core_skill", listing, call_id="b"),
            tool_call("core_skill", listing, call_id="c"),
        ),
        reply_text("Done."),
    )
    added = conversation_post_message(
        conversation_id=chat.pk,
        text="list thrice",
        actor=world.olivia,
        client=scripted_llm.client(),
    )
    tools = [m for m in added if m.role == "tool"]
    assert [(m.tool_call_id, m.tool_result["ok"]) for m in tools] == [
        ("a", True),
        ("b", True),
        ("c", False),
    ]
    assert tools[2].tool_result["error"]["code"] == "turn_limit"
    # and the last request offered no tools
    assert "tools" not in scripted_llm.requests[1]
    assert added[-1].text == "Done."


def test_an_unreachable_llm_ends_the_turn_with_an_error_event(
    world: World, chat: Conversation, scripted_llm
) -> None:
    # given an exhausted script (the LLM answers 500)
    added = conversation_post_message(
        conversation_id=chat.pk, text="hello", actor=world.olivia, client=scripted_llm.client()
    )
    assert [m.role for m in added] == ["user", "event"]
    assert added[1].event["type"] == "turn_error"
    assert added[1].text.startswith("The language model could not be reached")


def test_bad_input_and_strangers_store_nothing(world: World, chat: Conversation, scripted_llm):
    from cognition.brain.errors import ConversationNotFound, MessageInvalid

    with pytest.raises(MessageInvalid, match="text: a message needs some text"):
        conversation_post_message(conversation_id=chat.pk, text="  ", actor=world.olivia)
    with pytest.raises(MessageInvalid, match="NUL"):
        conversation_post_message(conversation_id=chat.pk, text="a\x00b", actor=world.olivia)
    with pytest.raises(ConversationNotFound):
        conversation_post_message(conversation_id=chat.pk, text="hi", actor=world.bob)
    assert Message.objects.count() == 0
    assert scripted_llm.requests == []


def _roles_accepted_by_every_server(messages: list[dict]) -> None:
    """One system message, first; then user and assistant alternate (tool results follow the
    assistant message that called them) — the strictest chat templates (Mistral, Gemma) and
    the hosted APIs all accept this."""
    roles = [m["role"] for m in messages]
    assert roles[0] == "system" and "system" not in roles[1:]
    assert roles[1] == "user"
    spoken = [m for m in messages[1:] if m["role"] != "tool"]
    for a, b in zip(spoken, spoken[1:], strict=False):
        # two assistant turns in a row only around a tool exchange
        assert a["role"] != b["role"] or (a["role"] == "assistant" and a.get("tool_calls")), roles
    for index, role in enumerate(roles):
        if role == "tool":
            assert roles[index - 1] in ("assistant", "tool")


def test_wake_up_events_reach_the_model_as_marked_user_turns_never_as_mid_system_messages(
    world: World, chat: Conversation, scripted_llm
) -> None:
    # given a conversation where a run was started, then two wake-up events arrived in a row
    Message.objects.create(
        conversation=chat, role="user", trigger="user_message", text="Learn AgentMail."
    )
    Message.objects.create(
        conversation=chat, role="assistant", trigger="user_message", text="Started run_1."
    )
    Message.objects.create(
        conversation=chat,
        role="event",
        trigger="motor_result",
        text="Run run_1 completed: Created the agentmail skill.",
        event={"type": "motor_result", "status": "completed"},
    )
    Message.objects.create(
        conversation=chat,
        role="event",
        trigger="motor_result",
        text="Skill 'agentmail' is reviewed and waits for your approval.",
        event={"type": "skill_review", "skill": "agentmail"},
    )
    Message.objects.create(
        conversation=chat, role="assistant", trigger="motor_result", text="Approve agentmail?"
    )
    scripted_llm.add(reply_text("Done."))

    # when olivia answers (through the real openai client)
    conversation_post_message(
        conversation_id=chat.pk, text="Yes.", actor=world.olivia, client=scripted_llm.client()
    )

    # then the events went as one user turn marked as events, and the order is accepted by all
    sent = scripted_llm.requests[0]["messages"]
    assert sent[1:] == [
        {"role": "user", "content": "Learn AgentMail."},
        {"role": "assistant", "content": "Started run_1."},
        {
            "role": "user",
            "content": "[event: motor_result — a notice from Motor Cortex, not the user's words] "
            "Run run_1 completed: Created the agentmail skill.\n\n"
            "[event: motor_result — a notice from Motor Cortex, not the user's words] "
            "Skill 'agentmail' is reviewed and waits for your approval.",
        },
        {"role": "assistant", "content": "Approve agentmail?"},
        {"role": "user", "content": "Yes."},
    ]
    _roles_accepted_by_every_server(sent)
    assert "[event: …] are notices from Motor Cortex" in sent[0]["content"]


def test_a_wake_turn_after_tool_calls_keeps_an_order_every_server_accepts(
    world: World, chat: Conversation, scripted_llm
) -> None:
    # given olivia asked for a run and the brain started it with a tool call
    scripted_llm.add(
        reply_tools(tool_call("core_skill", {"action": "list"}, call_id="c9")),
        reply_text("Listed."),
    )
    conversation_post_message(
        conversation_id=chat.pk,
        text="List skills.",
        actor=world.olivia,
        client=scripted_llm.client(),
    )
    # when an event arrives and the brain plays a turn on it
    from cognition.brain.engine import turn_run
    from cognition.brain.models import TurnTrigger
    from cognition.principals import Principal

    Message.objects.create(
        conversation=chat,
        role="event",
        trigger="motor_result",
        text="Run run_2 failed: timeout.",
        event={"type": "motor_result", "status": "failed"},
    )
    scripted_llm.add(reply_text("The run timed out."))
    turn_run(
        conversation=chat,
        trigger=TurnTrigger.MOTOR_RESULT,
        principal=Principal.for_agent(world.alpha),
        wake={"status": "failed"},
        client=scripted_llm.client(),
    )

    # then the wake request ends with the event as a user turn, after the tool exchange
    sent = scripted_llm.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert sent[-1]["content"].startswith("[event: motor_result")
    _roles_accepted_by_every_server(sent)
