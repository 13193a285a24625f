"""The built-in brain and deployed MCP tools: offered as `<skill>__<tool>` function schemas next
to the core tools, called through the same path as a run's call (the real sandboxed server),
recorded as the turn's tool messages and counted on the tool; a write tool needs a person's
word; a tool that cannot run tells the model its state. Only the LLM is scripted."""

from __future__ import annotations

import json

import pytest

from cognition.brain.engine import turn_run
from cognition.brain.models import MessageRole, TurnTrigger
from cognition.brain.services import conversation_post_message, conversation_start
from cognition.principals import Principal
from forge.models import DeployedServer, McpTool
from forge.services import deploy_version, server_disable
from tests.fixtures.llm import reply_text, reply_tools, tool_call

pytestmark = pytest.mark.django_db(transaction=True)

CORE = ["core_act", "core_task", "core_skill", "core_credential"]


@pytest.fixture
def deployed(agent, approved_mcp_skill) -> DeployedServer:
    policy = approved_mcp_skill(agent)
    return deploy_version(policy.skill.current_version, actor="owner")


def test_the_brain_is_offered_a_deployed_tool_and_its_call_returns_the_server_s_result(
    agent, deployed, scripted_llm
):
    # given a deployed echoer and the owner's conversation with the agent
    chat = conversation_start(agent=agent, user=agent.owner)
    scripted_llm.add(
        reply_tools(tool_call("echoer__echo", {"text": "hi"}, call_id="m1")),
        reply_text("It said hi back."),
    )
    # when the owner asks and the model calls the tool
    added = conversation_post_message(
        conversation_id=chat.pk,
        text="echo hi with your echo tool",
        actor=agent.owner,
        client=scripted_llm.client(),
    )
    # then the model was offered the deployed tools as function schemas after the core ones
    first = scripted_llm.requests[0]
    offered = {t["function"]["name"]: t["function"] for t in first["tools"]}
    assert list(offered) == [*CORE, "echoer__echo", "echoer__shout"]
    assert offered["echoer__echo"]["description"] == "Repeat a text."
    assert offered["echoer__echo"]["parameters"]["properties"]["text"]["type"] == "string"
    assert offered["echoer__echo"]["parameters"]["required"] == ["text"]
    # and the call ran in the sandboxed server; its result is the turn's tool message
    assert [(m.role, m.tool_name) for m in added] == [
        (MessageRole.USER, ""),
        (MessageRole.ASSISTANT, ""),
        (MessageRole.TOOL, "echoer__echo"),
        (MessageRole.ASSISTANT, ""),
    ]
    result = added[2].tool_result
    assert result["ok"] is True
    assert (result["result"]["tool"], result["result"]["provenance"]) == (
        "echoer__echo",
        "internal",
    )
    assert result["result"]["output"] == '{\n  "echo": "hi"\n}'
    # and the model read it, then answered
    second = scripted_llm.requests[1]["messages"][-1]
    assert (second["role"], second["tool_call_id"]) == ("tool", "m1")
    assert json.loads(second["content"])["result"]["output"] == '{\n  "echo": "hi"\n}'
    assert added[3].text == "It said hi back."
    # and the call counts on the tool like a run's
    tool = McpTool.objects.get(qualified_name="echoer__echo")
    assert (tool.calls, tool.failures, tool.server.recent) == (1, 0, "1")


def test_a_write_tool_runs_on_the_owner_s_word_and_never_on_a_run_s_result(
    agent, deployed, scripted_llm
):
    chat = conversation_start(agent=agent, user=agent.owner)
    # given the owner asks for shout (undeclared semantics: a write tool)
    scripted_llm.add(
        reply_tools(tool_call("echoer__shout", {"text": "hi"}, call_id="w1")), reply_text("HI.")
    )
    added = conversation_post_message(
        conversation_id=chat.pk, text="shout hi", actor=agent.owner, client=scripted_llm.client()
    )
    # then it ran on the owner's turn
    assert added[2].tool_result["ok"] is True
    assert added[2].tool_result["result"]["output"] == "HI"
    # when a turn the agent plays on a run's result asks for it
    scripted_llm.add(
        reply_tools(tool_call("echoer__shout", {"text": "again"}, call_id="w2")),
        reply_text("Not allowed."),
    )
    turn_run(
        conversation=chat,
        trigger=TurnTrigger.MOTOR_RESULT,
        principal=Principal.for_agent(agent),
        client=scripted_llm.client(),
    )
    # then the consent gate refused it, as data naming the tool; no server call was made
    refused = chat.messages.filter(role=MessageRole.TOOL).order_by("-id").first()
    assert refused is not None and refused.tool_name == "echoer__shout"
    error = refused.tool_result["error"]
    assert error["code"] == "consent_required"
    assert error["message"].startswith(
        "tool echoer__shout may change something outside (declared write): mcp.call_write "
        "needs a human's consent: the call declares trigger 'motor_result'"
    )
    assert (error["details"]["tool"], error["details"]["semantics"]) == ("echoer__shout", "write")
    assert McpTool.objects.get(qualified_name="echoer__shout").calls == 1


def test_a_disabled_tool_is_no_longer_offered_and_a_call_names_its_state(
    agent, deployed, scripted_llm
):
    # given the owner disabled the deployed skill
    server = server_disable(deployed.skill, actor="admin:olivia")
    chat = conversation_start(agent=agent, user=agent.owner)
    scripted_llm.add(
        reply_tools(tool_call("echoer__echo", {"text": "hi"}, call_id="d1")),
        reply_text("It is disabled."),
    )
    # when the model calls it all the same (it remembers it from earlier)
    added = conversation_post_message(
        conversation_id=chat.pk, text="echo hi", actor=agent.owner, client=scripted_llm.client()
    )
    # then it was not offered, and the call's result says who disabled it and when
    names = [t["function"]["name"] for t in scripted_llm.requests[0]["tools"]]
    assert names == CORE
    error = added[2].tool_result["error"]
    assert error == {
        "code": "denied",
        "message": f"tool echoer__echo is disabled by admin:olivia at "
        f"{server.status_at:%Y-%m-%d %H:%M:%S} UTC: skill 'echoer' v1 is not running. The owner "
        "can enable it again (MCP servers: enable).",
        "details": {"tool": "echoer__echo", "state": "disabled", "retryable": False},
    }
    tool = McpTool.objects.get(qualified_name="echoer__echo")
    assert (tool.calls, tool.failures) == (1, 1)
