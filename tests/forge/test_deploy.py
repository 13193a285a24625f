"""Deploying an approved MCP skill and calling its tools through the motor's call pipeline: the
real sandbox, the real database, the mcp SDK on both sides; only the LLM is scripted."""

from __future__ import annotations

import pytest

from forge.errors import DeployError
from forge.models import DeployedServer, McpTool, ServerStatus
from forge.registry import registered
from forge.runtime import pool
from forge.services import deploy_version, undeploy
from runs.models import MotorRun, RunStatus, Step, StepState
from runs.services import run_start
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import drive, new_workspace

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_approved_mcp_skill_deploys_with_its_tools_and_semantics(agent, approved_mcp_skill):
    # given an approved MCP skill
    policy = approved_mcp_skill(agent)
    version = policy.skill.current_version
    # when its version is deployed
    server = deploy_version(version, actor="owner")
    # then the database says what runs: the row, its tools with schema and declared semantics
    assert (server.status, server.agent_id, server.content_hash) == (
        ServerStatus.DEPLOYED,
        agent.pk,
        version.content_hash,
    )
    tools = {t.name: t for t in McpTool.objects.filter(server=server)}
    assert sorted(tools) == ["echo", "shout"]
    assert (tools["echo"].qualified_name, tools["echo"].semantics) == ("echoer__echo", "read")
    assert tools["shout"].semantics == "write"  # undeclared: the conservative reading
    assert tools["echo"].description == "Repeat a text."
    assert tools["echo"].input_schema["properties"]["text"]["type"] == "string"
    # and this process offers them as tool kinds
    assert registered() == ["echoer__echo", "echoer__shout"]
    # and deploying the same version again changes nothing
    assert deploy_version(version, actor="owner").pk == server.pk
    assert DeployedServer.objects.count() == 1


def test_a_version_without_approval_is_not_deployed(agent, approved_mcp_skill):
    policy = approved_mcp_skill(agent)
    policy.approved_content_hash = "sha256:" + "0" * 64
    policy.save(update_fields=["approved_content_hash"])
    with pytest.raises(DeployError, match="is not approved: no approved policy is bound"):
        deploy_version(policy.skill.current_version, actor="owner")
    assert DeployedServer.objects.count() == 0


def test_a_motor_run_calls_a_deployed_tool_through_the_pipeline(
    agent, approved_mcp_skill, scripted_llm
):
    # given a deployed skill and a run granted its echo tool
    policy = approved_mcp_skill(agent)
    deploy_version(policy.skill.current_version, actor="owner")
    run_id = run_start(
        workspace=new_workspace(),
        agent_id=agent.pk,
        task="Echo hi",
        tools=["echoer__echo"],
        actor="t",
    )["run_id"]
    call = tool_call("echoer__echo", {"text": "hi"})
    scripted_llm.add(reply_tools(call), reply_text("done"))
    # when the loop runs
    drive(run_id, scripted_llm.client())
    # then the model was offered the tool as a function schema named <skill>__<tool>
    first, second = scripted_llm.requests
    offered = {t["function"]["name"]: t for t in first["tools"]}
    assert offered["echoer__echo"]["function"]["description"] == "Repeat a text."
    # and the call ran in the sandboxed server and was recorded as a step
    step = Step.objects.get(attempt__run_id=run_id)
    assert (step.tool, step.state) == ("echoer__echo", StepState.DONE)
    assert step.result["ok"] is True
    assert step.result["output"] == '{\n  "echo": "hi"\n}'
    assert step.result["provenance"] == "internal"
    assert second["messages"][-1]["content"] == '{\n  "echo": "hi"\n}'
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
    # and its usage was counted
    tool = McpTool.objects.get(qualified_name="echoer__echo")
    assert (tool.calls, tool.failures, tool.server.recent) == (1, 0, "1")


def test_a_removed_skill_is_no_longer_called(agent, approved_mcp_skill, scripted_llm):
    # given a run granted a deployed tool, whose skill is then removed
    policy = approved_mcp_skill(agent)
    deploy_version(policy.skill.current_version, actor="owner")
    run_id = run_start(
        workspace=new_workspace(), agent_id=agent.pk, task="Echo", tools=["echoer__echo"], actor="t"
    )["run_id"]
    undeploy(policy.skill, actor="owner")
    scripted_llm.add(reply_tools(tool_call("echoer__echo", {"text": "hi"})), reply_text("done"))
    # when the model calls it
    drive(run_id, scripted_llm.client())
    # then the call is refused with the reason, and no server was started for it
    step = Step.objects.get(attempt__run_id=run_id)
    assert step.result["ok"] is False
    assert step.result["output"].startswith("tool echoer__echo was removed by owner at ")
    assert len(pool) == 0
    assert DeployedServer.objects.get().status == ServerStatus.REMOVED
