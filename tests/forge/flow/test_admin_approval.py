"""Approving a generated MCP skill from the skills admin's review page moves its flow on exactly
as the flow's own deploy does (one approval service: skills.approval.skill_approve, whose signal
advances the flow). Real sandbox, the Django test client, a scripted LLM."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from forge.flow_services import flow_start
from forge.models import DeployedServer, FlowEvent, FlowState, ForgeFlow, ServerStatus
from skills.approval import approval_proposal
from skills.models import Policy, PolicyStatus
from tests.fixtures.llm import reply_text
from tests.forge.flow.skillfiles import answer, fetch_skill, skill_files

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _awaiting(agent, drive, scripted_llm, files: dict[str, str], **kw) -> ForgeFlow:
    scripted_llm.add(reply_text(answer(files)))
    kw.setdefault("allowed_domains", [])
    kw.setdefault("credentials", [])
    flow = drive(flow_start(agent=agent, request="a tool", actor="t", **kw))
    assert flow.state == FlowState.AWAITING_APPROVAL
    return flow


def _approve_in_admin(user, policy: Policy) -> None:
    """The approver opens the review page and presses Approve with the fields as shown."""
    client = Client()
    client.force_login(user)
    url = reverse("admin:skills_policy_review", args=[policy.pk])
    page = client.get(url).content.decode()
    assert 'id="btn-approve"' in page
    grants = approval_proposal(policy=policy).grants()
    response = client.post(
        url,
        {
            "action": "approve",
            "allowed_domains": "\n".join(grants["allowed_domains"]),
            "required_credentials": "\n".join(grants["required_credentials"]),
            "tools": grants["tools"],
            "dependencies": "\n".join(grants["dependencies"]),
            "shell_allowlist": "",
        },
    )
    assert response.status_code == 302, response.content.decode()[-2000:]


def _moves(flow: ForgeFlow) -> list[tuple[str, str, str, str]]:
    return [
        (e.from_state, e.to_state, e.actor, e.reason)
        for e in FlowEvent.objects.filter(flow=flow).order_by("id")
    ]


def test_approving_in_the_admin_deploys_the_flow_s_version(agent, olivia, drive, scripted_llm):
    # given a generated pure-computation skill awaiting a person's approval
    flow = _awaiting(agent, drive, scripted_llm, skill_files())
    policy = flow.skill_version.skill.policies.get()
    # when olivia approves it on the skills admin's review page
    _approve_in_admin(olivia, policy)
    # then the policy is approved for that content and the flow moved on in the same step
    policy.refresh_from_db()
    assert (policy.status, policy.approved_content_hash) == (
        PolicyStatus.APPROVED,
        flow.skill_version.content_hash,
    )
    flow.refresh_from_db()
    assert flow.state == FlowState.DEPLOYING
    assert flow.approval["approved_by"] == "admin:olivia"
    assert _moves(flow)[-1] == (
        "awaiting_approval",
        "deploying",
        "admin:olivia",
        "approved (none)",
    )
    # and the worker's slice deploys it: its tool is served
    flow = drive(flow)
    assert (flow.state, flow.message) == (FlowState.COMPLETE, "✓ adder ready. 1 tool(s): add")
    server = DeployedServer.objects.get(version=flow.skill_version)
    assert server.status == ServerStatus.DEPLOYED
    assert list(server.tools.values_list("qualified_name", flat=True)) == ["adder__add"]


def test_approving_a_credential_skill_in_the_admin_waits_for_the_vault(
    agent, olivia, drive, scripted_llm
):
    files = skill_files(auth={"MYAPP_TOKEN": "MYAPP_TOKEN"})
    flow = _awaiting(agent, drive, scripted_llm, files, credentials=["MYAPP_TOKEN"])
    _approve_in_admin(olivia, flow.skill_version.skill.policies.get())
    flow.refresh_from_db()
    assert flow.state == FlowState.ACQUIRING_CREDENTIALS
    assert "PUT /api/v1/credentials/<name>/" in flow.message
    assert _moves(flow)[-1][:3] == ("awaiting_approval", "acquiring_credentials", "admin:olivia")


def test_approving_a_network_skill_in_the_admin_confirms_the_approved_domains(
    agent, olivia, drive, scripted_llm
):
    files = fetch_skill(domain="status.myapp.io")
    flow = _awaiting(agent, drive, scripted_llm, files, allowed_domains=["status.myapp.io"])
    assert flow.approval["needs"] == "confirm_domains"
    _approve_in_admin(olivia, flow.skill_version.skill.policies.get())
    flow.refresh_from_db()
    assert flow.state == FlowState.DEPLOYING
    event = FlowEvent.objects.filter(flow=flow).order_by("id").last()
    assert event is not None
    assert (event.reason, event.detail) == (
        "approved (confirm_domains)",
        {"confirmed_domains": ["status.myapp.io"]},
    )


def test_an_admin_approval_of_a_skill_whose_flow_is_not_waiting_moves_no_flow(
    agent, olivia, drive, scripted_llm
):
    # given a flow that was declined: its version stays pending review
    from forge.approving import flow_reject
    from skills.services import Actor

    flow = _awaiting(agent, drive, scripted_llm, skill_files())
    flow_reject(flow_id=flow.id, actor=Actor.from_user(olivia), note="not now")
    # when the version is approved in the admin later
    _approve_in_admin(olivia, flow.skill_version.skill.policies.get())
    # then the skill is approved, and the finished flow stays as it ended
    flow.refresh_from_db()
    assert flow.state == FlowState.FAILED
    assert flow.skill_version.skill.policies.get().status == PolicyStatus.APPROVED
