"""A flow through the real sandbox: generated code tested (pytest, then the MCP handshake),
regenerated on failure, imported as a version and put up for approval by risk."""

from __future__ import annotations

import pytest

from forge.approving import flow_approve
from forge.errors import ApprovalRefused
from forge.flow_services import flow_start
from forge.models import FlowEvent, FlowState, ForgeFlow
from skills.models import AuditAction, PolicyAuditEvent, PolicyStatus, VersionProbe
from skills.services import Actor
from tests.fixtures.llm import reply_text
from tests.forge.flow.skillfiles import FAILING_TEST, answer, fetch_skill, skill_files

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _start(agent, **kw) -> ForgeFlow:
    kw.setdefault("allowed_domains", [])
    kw.setdefault("credentials", [])
    return flow_start(agent=agent, request=kw.pop("request", "add two numbers"), actor="t", **kw)


def test_a_failing_test_is_fed_back_and_the_second_attempt_passes(agent, drive, scripted_llm):
    # given a model whose first skill fails its own test and whose second passes
    scripted_llm.add(reply_text(answer(skill_files(test=FAILING_TEST))))
    scripted_llm.add(reply_text(answer(skill_files())))
    # when the flow runs
    flow = drive(_start(agent))
    # then the second attempt was tested in the sandbox, imported and awaits approval
    assert (flow.state, flow.attempt) == (FlowState.AWAITING_APPROVAL, 2)
    second_prompt = scripted_llm.requests[1]["messages"][1]["content"]
    assert "THE PREVIOUS ATTEMPT FAILED:\npytest: " in second_prompt
    assert "assert {'sum': 5} == {'sum': 6}" in second_prompt
    # and the tools came from tools/list of the real server, with its schema
    assert [t["name"] for t in flow.test_report["tools"]] == ["add"]
    schema = flow.test_report["tools"][0]["input_schema"]
    assert sorted(schema["properties"]) == ["a", "b"]
    # and the version is pending review until a person approves it (default trust level)
    version = flow.skill_version
    assert (version.skill.name, version.number) == ("adder", 1)
    probe = VersionProbe.objects.get(version=version)
    assert (probe.tests_passed, [t["semantics"] for t in probe.tools]) == (True, ["read"])
    assert flow.approval["rule"] == "pure_computation" and flow.approval["auto"] is False
    assert version.skill.policies.get().status == PolicyStatus.REVIEWED
    assert "Deploy it?" in flow.message and "Network: none" in flow.message


def test_three_failures_end_the_flow_with_the_last_error_and_an_offer(agent, drive, scripted_llm):
    scripted_llm.add(*[reply_text(answer(skill_files(test=FAILING_TEST)))] * 3)
    flow = drive(_start(agent))
    assert (flow.state, flow.attempt, len(scripted_llm.requests)) == (FlowState.FAILED, 3, 3)
    assert flow.error.startswith("pytest: ")
    assert "assert {'sum': 5} == {'sum': 6}" in flow.error
    assert "Want me to try a different approach" in flow.message
    # nothing was imported
    assert flow.skill_version is None
    reasons = list(FlowEvent.objects.filter(flow=flow).values_list("reason", flat=True))
    assert [r for r in reasons if "pytest" in r] == [
        "attempt 1: pytest failed; regenerating",
        "attempt 2: pytest failed; regenerating",
        "attempt 3: pytest failed",
    ]


def test_a_pure_computation_skill_is_auto_approved_only_at_an_allowing_trust_level(
    agent, drive, scripted_llm
):
    # given an agent whose trust level allows automatic approval
    type(agent).objects.filter(pk=agent.pk).update(trust_level="bounded_auto")
    scripted_llm.add(reply_text(answer(skill_files())))
    # when its flow passes the tests
    flow = drive(_start(agent))
    # then it was approved without a person, on the rule, and deployed
    assert (flow.state, flow.message) == (FlowState.COMPLETE, "✓ adder ready. 1 tool(s): add")
    assert flow.approval["approved_by"] == "auto (rule pure_computation)"
    policy = flow.skill_version.skill.policies.get()
    assert (policy.status, policy.approved_by) == (PolicyStatus.APPROVED, None)
    approved = PolicyAuditEvent.objects.get(policy=policy, action=AuditAction.APPROVED)
    assert approved.reason.startswith("auto-approved (rule pure_computation): read-only")
    event = FlowEvent.objects.get(flow=flow, from_state="testing")
    assert (event.to_state, event.detail["rule"], event.detail["trust_level"]) == (
        "deploying",
        "pure_computation",
        "bounded_auto",
    )


def test_a_network_skill_needs_its_domains_confirmed(agent, olivia, drive, scripted_llm):
    type(agent).objects.filter(pk=agent.pk).update(trust_level="bounded_auto")
    scripted_llm.add(reply_text(answer(fetch_skill(domain="status.myapp.io"))))
    flow = drive(_start(agent, request="uptime", allowed_domains=["status.myapp.io"]))
    # even at the most autonomous level, the owner's domains are confirmed by a person
    assert flow.state == FlowState.AWAITING_APPROVAL
    assert (flow.approval["needs"], flow.approval["rule"]) == ("confirm_domains", "owner_domains")
    assert "Network: status.myapp.io" in flow.message
    # an approval that does not confirm them is refused and changes nothing
    with pytest.raises(ApprovalRefused) as caught:
        flow_approve(flow_id=flow.id, actor=Actor.from_user(olivia), confirm_domains=[])
    assert caught.value.details == {"rule": "confirm_domains", "domains": ["status.myapp.io"]}
    assert ForgeFlow.objects.get(pk=flow.id).state == FlowState.AWAITING_APPROVAL
    # the confirmed one goes on to deploy
    flow_approve(
        flow_id=flow.id, actor=Actor.from_user(olivia), confirm_domains=["status.myapp.io"]
    )
    flow = ForgeFlow.objects.get(pk=flow.id)
    assert flow.state == FlowState.DEPLOYING
    assert flow.approval["approved_by"] == "admin:olivia"
    assert flow.skill_version.skill.policies.get().status == PolicyStatus.APPROVED


def test_a_credential_skill_needs_explicit_approval_then_waits_for_the_vault(
    agent, olivia, drive, scripted_llm
):
    from cognition.services import credential_set

    type(agent).objects.filter(pk=agent.pk).update(trust_level="bounded_auto")
    files = skill_files(auth={"MYAPP_TOKEN": "MYAPP_TOKEN"})
    scripted_llm.add(reply_text(answer(files)))
    flow = drive(_start(agent, credentials=["MYAPP_TOKEN"]))
    assert (flow.state, flow.approval["needs"], flow.approval["rule"]) == (
        FlowState.AWAITING_APPROVAL,
        "explicit",
        "credentials",
    )
    assert "Credentials: MYAPP_TOKEN" in flow.message
    flow_approve(flow_id=flow.id, actor=Actor.from_user(olivia))
    flow = drive(flow)
    # it waits for the credential, named, never asking for its value in the flow
    assert flow.state == FlowState.ACQUIRING_CREDENTIALS
    assert "PUT /api/v1/credentials/<name>/" in flow.message
    credential_set(agent=agent, name="MYAPP_TOKEN", value="tok-123-secret", actor=olivia)
    flow = drive(flow)
    assert flow.state == FlowState.COMPLETE
    assert "tok-123-secret" not in str(list(FlowEvent.objects.filter(flow=flow).values()))
