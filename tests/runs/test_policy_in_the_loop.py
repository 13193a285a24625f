"""The policy decision and the audit trail inside real runs: an observing agent reads but every
side effect is refused as data; a suggesting agent's call waits for approval; every call leaves
one audit row with its decision and outcome."""

from __future__ import annotations

import pytest

from cognition.models import Agent
from runs.audit_models import ToolCallAudit
from runs.models import ApprovalRequest, MotorRun, RunStatus, Step
from runs.services import SliceOutcome, run_approve, run_reject, run_start
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import drive, new_workspace

pytestmark = pytest.mark.django_db


def _start(agent, tools):
    return run_start(
        agent_id=agent.pk, task="Notes", tools=tools, workspace=new_workspace(), actor="test"
    )["run_id"]


def test_an_observing_agent_reads_and_its_writes_are_refused_as_data(agent, scripted_llm):
    Agent.objects.filter(pk=agent.pk).update(trust_level="observe")
    run_id = _start(agent, ["read", "write", "list"])
    scripted_llm.add(
        reply_tools(tool_call("write", {"path": "n.txt", "content": "x"}, call_id="w")),
        reply_tools(tool_call("list", {}, call_id="l")),
        reply_text("done"),
    )

    outcomes = drive(run_id, scripted_llm.client())

    assert outcomes == [SliceOutcome.FINISHED]
    steps = {s.tool: s.result for s in Step.objects.filter(attempt__run_id=run_id)}
    assert steps["write"]["ok"] is False
    assert steps["write"]["error_code"] == "denied"
    assert steps["write"]["output"] == (
        "write needs trust level suggest or higher; this agent is at observe (it may only read)"
    )
    assert steps["list"]["ok"] is True
    rows = list(
        ToolCallAudit.objects.filter(run_ref=run_id)
        .order_by("iteration")
        .values_list("tool", "success", "error_code", "decision", "trust_level", "attempt")
    )
    assert rows == [
        ("write", False, "denied", "trust_level", "observe", 1),
        ("list", True, "", "trust_level", "observe", 1),
    ]


def test_a_suggesting_agents_call_waits_for_approval(agent, scripted_llm):
    Agent.objects.filter(pk=agent.pk).update(trust_level="suggest")
    run_id = _start(agent, ["list"])
    scripted_llm.add(reply_tools(tool_call("list", {}, call_id="l")), reply_text("done"))

    outcomes = drive(run_id, scripted_llm.client())

    assert outcomes == [SliceOutcome.PAUSED]
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.AWAITING_APPROVAL
    approval = ApprovalRequest.objects.get(run_id=run_id)
    assert approval.action == {"tool": "list", "arguments": {}}
    assert approval.summary == "this agent suggests: every call needs approval"
    assert not ToolCallAudit.objects.filter(run_ref=run_id).exists()


def test_a_new_agent_runs_its_granted_tools_and_each_call_is_audited(agent, scripted_llm):
    run_id = _start(agent, ["filesystem"])
    scripted_llm.add(
        reply_tools(tool_call("write", {"path": "n.txt", "content": "hello"}, call_id="w")),
        reply_tools(tool_call("read", {"path": "missing.txt"}, call_id="r")),
        reply_text("done"),
    )

    drive(run_id, scripted_llm.client())

    rows = list(
        ToolCallAudit.objects.filter(run_ref=run_id)
        .order_by("iteration")
        .values(
            "tool",
            "inputs",
            "success",
            "decision",
            "trust_level",
            "approval_required",
            "agent_name",
        )
    )
    assert [(r["tool"], r["success"], r["decision"]) for r in rows] == [
        ("write", True, "trust_level"),
        ("read", False, "trust_level"),
    ]
    assert rows[0]["inputs"] == {"path": "n.txt", "content": "hello"}
    assert {r["trust_level"] for r in rows} == {"supervised_auto"}
    assert {r["approval_required"] for r in rows} == {False}
    assert {r["agent_name"] for r in rows} == {agent.name}


def test_the_approval_records_who_decided_and_the_audit_row_names_them(agent, scripted_llm):
    # given a suggesting agent whose call waits for approval
    Agent.objects.filter(pk=agent.pk).update(trust_level="suggest")
    run_id = _start(agent, ["list"])
    scripted_llm.add(reply_tools(tool_call("list", {}, call_id="l")), reply_text("done"))
    drive(run_id, scripted_llm.client())
    approval = ApprovalRequest.objects.get(run_id=run_id)

    # when a staff user approves it and the run goes on
    run_approve(run_id=run_id, approval_id=approval.pk, actor="admin:olivia")
    drive(run_id, scripted_llm.client())

    # then the approval says who decided, and the call's audit row was approved by them
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by) == ("consumed", "admin:olivia")
    row = ToolCallAudit.objects.get(run_ref=run_id)
    assert (row.tool, row.success, row.approval_required, row.approved_by) == (
        "list",
        True,
        True,
        f"admin:olivia (approval {approval.pk})",
    )


def test_a_rejection_records_who_decided(agent, scripted_llm):
    Agent.objects.filter(pk=agent.pk).update(trust_level="suggest")
    run_id = _start(agent, ["list"])
    scripted_llm.add(reply_tools(tool_call("list", {}, call_id="l")), reply_text("done"))
    drive(run_id, scripted_llm.client())
    approval = ApprovalRequest.objects.get(run_id=run_id)

    run_reject(run_id=run_id, approval_id=approval.pk, actor="agent:alpha", note="not now")

    approval.refresh_from_db()
    assert (approval.status, approval.decided_by) == ("rejected", "agent:alpha")
