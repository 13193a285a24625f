"""The whole SkillForge story in one process: create → design → generate → test → approve →
deploy → use, then edit → test → approve → hot reload → changed behaviour (seed 002 §15, §10).
Real sandbox, real database, the mcp SDK on both sides; only the LLM is scripted."""

from __future__ import annotations

import pytest

from forge.approving import flow_approve
from forge.flow_services import flow_respond, flow_start
from forge.models import DeployedServer, FlowEvent, FlowState, ServerStatus
from runs.models import Step
from runs.services import run_start
from skills.models import SkillVersion
from skills.services import Actor
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.forge.flow.skillfiles import answer, skill_files
from tests.runs.helpers import drive as drive_run
from tests.runs.helpers import new_workspace

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WITH_DIFFERENCE = '''

@mcp.tool()
def add(a: int, b: int) -> dict:
    """Add two integers; also their difference. Returns {"sum", "difference"}."""
    return {"sum": a + b, "difference": a - b}
'''
DIFFERENCE_TEST = """from server import add


def test_add():
    assert add(5, 3) == {"sum": 8, "difference": 2}
"""


def _use(agent, scripted_llm, arguments: dict) -> str:
    """One motor run granted adder__add calling it once; the call's output."""
    run_id = run_start(
        workspace=new_workspace(), agent_id=agent.pk, task="add", tools=["adder__add"], actor="t"
    )["run_id"]
    scripted_llm.add(reply_tools(tool_call("adder__add", arguments)), reply_text("done"))
    drive_run(run_id, scripted_llm.client())
    step = Step.objects.get(attempt__run_id=run_id)
    assert (step.tool, step.result["ok"]) == ("adder__add", True), step.result
    return step.result["output"]


def test_create_generate_test_approve_deploy_use_then_edit_and_hot_reload(
    agent, olivia, drive, scripted_llm
):
    # given the owner's request, with nothing said yet about network or credentials
    flow = drive(flow_start(agent=agent, request="make a tool that adds numbers", actor="olivia"))
    assert flow.pending_topic == "domains"
    flow_respond(flow_id=flow.id, answer="none", actor="olivia")
    drive(flow)
    flow_respond(flow_id=flow.id, answer="none", actor="olivia")
    # when the model writes the skill and it passes its tests in the sandbox
    scripted_llm.add(reply_text(answer(skill_files())))
    flow = drive(flow)
    assert flow.state == FlowState.AWAITING_APPROVAL
    # and the owner approves it
    flow_approve(flow_id=flow.id, actor=Actor.from_user(olivia))
    flow = drive(flow)
    # then it is deployed and says which tools it has
    assert flow.state == FlowState.COMPLETE
    assert flow.message == "✓ adder ready. 1 tool(s): add"
    server = DeployedServer.objects.get(skill__name="adder", status=ServerStatus.DEPLOYED)
    assert server.version_id == flow.skill_version_id
    # and a motor run granted it calls it
    assert _use(agent, scripted_llm, {"a": 2, "b": 3}) == '{\n  "sum": 5\n}'

    # when the owner asks for a change of the deployed skill
    edit = drive(
        flow_start(
            agent=agent,
            request="also return the difference",
            actor="olivia",
            mode="edit",
            skill_name="adder",
        )
    )
    # (no question: its domains and credentials are the current manifest's)
    assert edit.state == FlowState.GENERATING
    scripted_llm.add(reply_text(answer(skill_files(body=WITH_DIFFERENCE, test=DIFFERENCE_TEST))))
    edit = drive(edit)
    # then the model saw the current files, and the changed ones were tested as version 2
    prompt = scripted_llm.requests[-1]["messages"][1]["content"]
    assert "CURRENT FILES" in prompt and 'return {"sum": a + b}' in prompt
    assert (edit.state, edit.skill_version.number) == (FlowState.AWAITING_APPROVAL, 2)
    flow_approve(flow_id=edit.id, actor=Actor.from_user(olivia))
    edit = drive(edit)
    assert (edit.state, edit.message) == (FlowState.COMPLETE, "✓ adder updated. 1 tool(s): add")
    # and the next call reaches the new version (hot reload); the old version is kept
    assert _use(agent, scripted_llm, {"a": 5, "b": 3}) == '{\n  "sum": 8,\n  "difference": 2\n}'
    assert sorted(
        SkillVersion.objects.filter(skill__name="adder").values_list("number", flat=True)
    ) == [1, 2]
    statuses = dict(DeployedServer.objects.values_list("version__number", "status"))
    assert statuses == {1: ServerStatus.SUPERSEDED, 2: ServerStatus.DEPLOYED}
    assert FlowEvent.objects.filter(flow=edit, to_state="complete").count() == 1
