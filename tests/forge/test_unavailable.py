"""A call of a deployed tool that cannot run now tells the model which tool, its state and why
(disabled by whom and when, failed with how it ended, removed, replaced, not approved for this
agent), as data in the step, and counts on the tool's usage — never the sandbox's "unknown
tool". Real sandbox, real database; only the LLM is scripted."""

from __future__ import annotations

from datetime import datetime

import pytest

from forge.models import DeployedServer, McpTool, ServerStatus
from forge.services import deploy_version, server_disable, undeploy
from runs.models import Step
from runs.services import run_start
from skills.disabling import policy_disable
from skills.services import Actor
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.forge.conftest import ECHO_SERVER, mcp_files
from tests.runs.helpers import drive, new_workspace

pytestmark = pytest.mark.django_db(transaction=True)


def when(at: datetime | None) -> str:
    assert at is not None
    return at.strftime("%Y-%m-%d %H:%M:%S UTC")


def started_run(agent, tool: str) -> str:
    return run_start(
        workspace=new_workspace(), agent_id=agent.pk, task="use it", tools=[tool], actor="t"
    )["run_id"]


def call_once(run_id: str, scripted_llm, tool: str, arguments: dict) -> tuple[Step, dict]:
    """The model calls `tool` once, then answers; the step and the model's second request."""
    scripted_llm.add(reply_tools(tool_call(tool, arguments)), reply_text("done"))
    before = len(scripted_llm.requests)
    drive(run_id, scripted_llm.client())
    step = Step.objects.get(attempt__run_id=run_id)
    return step, scripted_llm.requests[before + 1]


def assert_refused(step: Step, request: dict, message: str, state: str) -> None:
    assert (step.tool, step.state) == (step.tool, "done")
    assert step.result["ok"] is False
    assert step.result["error_code"] == "denied"
    assert step.result["tool_state"] == state
    assert step.result["output"] == message
    # the model read exactly that, marked as an error
    assert request["messages"][-1]["content"] == f"ERROR (denied): {message}"


def test_a_disabled_server_s_tool_names_who_disabled_it_and_when(
    agent, approved_mcp_skill, scripted_llm
):
    # given a run granted a deployed tool, whose server the owner then disables
    policy = approved_mcp_skill(agent)
    deploy_version(policy.skill.current_version, actor="owner")
    run_id = started_run(agent, "echoer__echo")
    server_disable(policy.skill, actor="admin:olivia")
    # when the model calls it
    step, request = call_once(run_id, scripted_llm, "echoer__echo", {"text": "hi"})
    # then it is told the tool, its state, who and when
    server = DeployedServer.objects.get()
    assert (server.status, server.status_by) == (ServerStatus.DISABLED, "admin:olivia")
    assert_refused(
        step,
        request,
        f"tool echoer__echo is disabled by admin:olivia at {when(server.status_at)}: skill "
        "'echoer' v1 is not running. The owner can enable it again (MCP servers: enable).",
        "disabled",
    )
    # and the call counts on the tool, not in the health window of a server that never ran
    tool = McpTool.objects.get(qualified_name="echoer__echo")
    assert (tool.calls, tool.failures, tool.last_error) == (1, 1, step.result["output"])
    assert server.recent == ""


def test_a_removed_skill_s_tool_says_it_was_removed(agent, approved_mcp_skill, scripted_llm):
    policy = approved_mcp_skill(agent)
    deploy_version(policy.skill.current_version, actor="owner")
    run_id = started_run(agent, "echoer__echo")
    undeploy(policy.skill, actor="admin:olivia", reason="not needed")
    step, request = call_once(run_id, scripted_llm, "echoer__echo", {"text": "hi"})
    server = DeployedServer.objects.get()
    assert_refused(
        step,
        request,
        f"tool echoer__echo was removed by admin:olivia at {when(server.status_at)} (skill "
        "'echoer' v1); it is no longer offered.",
        "removed",
    )
    assert McpTool.objects.get(qualified_name="echoer__echo").calls == 1


def test_a_tool_the_new_version_dropped_says_what_replaced_it(
    agent, approved_mcp_skill, scripted_llm
):
    # given version 1 (echo, shout) deployed and a run granted shout, then version 2 without it
    policy = approved_mcp_skill(agent)
    deploy_version(policy.skill.current_version, actor="owner")
    run_id = started_run(agent, "echoer__shout")
    without_shout = ECHO_SERVER.split("@mcp.tool()\ndef shout")[0] + (
        'if __name__ == "__main__":\n    mcp.run(transport="stdio")\n'
    )
    policy = approved_mcp_skill(agent, mcp_files(server=without_shout))
    deploy_version(policy.skill.current_version, actor="owner v2")
    # when the model calls the dropped tool
    step, request = call_once(run_id, scripted_llm, "echoer__shout", {"text": "hi"})
    # then it learns the version that replaced it and that version's tools
    old = DeployedServer.objects.get(version__number=1)
    assert_refused(
        step,
        request,
        f"tool echoer__shout no longer exists: skill 'echoer' v1 was replaced by owner v2 at "
        f"{when(old.status_at)}; version 2 replaced it (deployed), with the tools echoer__echo.",
        "superseded",
    )


def test_an_agent_without_approval_is_told_the_tool_is_not_approved(
    agent, make_agent, approved_mcp_skill, scripted_llm
):
    # given a skill deployed under one agent's approval, and another agent of the same owner
    policy = approved_mcp_skill(agent)
    deploy_version(policy.skill.current_version, actor="owner")
    other = make_agent()
    run_id = started_run(other, "echoer__echo")
    # when the other agent's run calls the tool
    step, request = call_once(run_id, scripted_llm, "echoer__echo", {"text": "hi"})
    # then no server ran it, and the model knows why
    assert_refused(
        step,
        request,
        "tool echoer__echo is not approved: skill 'echoer' v1 is deployed, but this agent has "
        "no policy for it. A person approves the skill for this agent in the skills review.",
        "not_approved",
    )
    assert McpTool.objects.get(qualified_name="echoer__echo").calls == 1


def test_a_skill_disabled_for_the_agent_refuses_its_tools_with_who_and_why(
    agent, approved_mcp_skill, approver, scripted_llm
):
    policy = approved_mcp_skill(agent)
    deploy_version(policy.skill.current_version, actor="owner")
    run_id = started_run(agent, "echoer__echo")
    policy = policy_disable(
        policy=policy, actor=Actor(user=approver, label="admin:approver"), reason="too noisy"
    )
    step, request = call_once(run_id, scripted_llm, "echoer__echo", {"text": "hi"})
    assert_refused(
        step,
        request,
        f"tool echoer__echo is disabled: skill 'echoer' v1 was disabled for this agent by "
        f"approver at {when(policy.disabled_at)} (too noisy). Staff enable it again in the admin.",
        "skill_disabled",
    )
