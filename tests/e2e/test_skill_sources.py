"""Seed 000 Scenarios 5 (a second agent finds the shared skill but must approve it itself),
6 (a pasted SKILL.md becomes a skill without any run) and 8 (a policy-only update keeps the
skill approved)."""

from __future__ import annotations

import re

import pytest

from cognition.brain.prompts import available_skills
from cognition.models import Conversation
from runs.models import MotorRun, Signal
from skills.models import Policy, PolicyAuditEvent, PolicyStatus, Skill, SkillVersion
from tests.cognition.conftest import World
from tests.e2e.conftest import Stack
from tests.e2e.support import (
    agentmail_skill,
    approved_agentmail,
    brain_calls,
    post,
    shown,
    tool_results,
)
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.skills.admin_support import make_agent

pytestmark = [pytest.mark.slow]


def _no_run_happened(stack: Stack) -> None:
    assert MotorRun.objects.count() == 0
    assert Signal.objects.count() == 0
    assert stack.motor.requests == []
    assert stack.upstream.requests("api.agentmail.to") == []


def test_scenario_5_a_second_agent_must_approve_the_shared_skill_itself(
    stack: Stack, world: World, session_client
) -> None:
    # given agentmail learned and approved for alpha, and olivia's second agent gamma
    alpha_policy = approved_agentmail(
        agent=world.alpha, approver=world.olivia, domains=["api.agentmail.to"]
    )
    gamma = make_agent("gamma", owner=world.olivia)
    chat = Conversation.objects.create(agent=gamma, user=world.olivia)
    olivia = session_client(world.olivia)
    presented = (
        "AgentMail was learned by your other agent, but this agent has not approved it yet. It "
        "references api.agentmail.to and AGENTMAIL_API_KEY. Approve it for this agent?"
    )
    stack.fast.add(
        reply_tools(tool_call("core_skill", {"action": "review", "name": "agentmail"})),
        reply_text(presented),
    )

    # when olivia asks gamma to use it
    added = post(olivia, chat, "Send an email via AgentMail to john@example.com")

    # then gamma's brain saw the skill as not yet its own, and its review gave gamma a policy of
    # its own (needs_reapproval, then reviewed) with no permissions; nothing ran
    system = stack.fast.requests[0]["messages"][0]["content"]
    # (ranked for olivia's message by the skill index, so listed with its score)
    assert re.search(r'<skill name="agentmail" status="not_yet_yours" score="\d+\.\d{4}">', system)
    # an agent of another owner does not see it
    assert 'name="agentmail"' not in available_skills(agent=world.bravo)
    [(_, review)] = tool_results(chat)
    assert review["ok"] is True
    assert (review["result"]["status"], review["result"]["facts"]["referenced_domains"]) == (
        "reviewed",
        ["api.agentmail.to"],
    )
    gamma_policy = Policy.objects.get(agent=gamma, skill=alpha_policy.skill)
    assert (gamma_policy.status, gamma_policy.allowed_domains) == (PolicyStatus.REVIEWED, [])
    _no_run_happened(stack)
    assert shown(chat) == [
        ("user", "", "Send an email via AgentMail to john@example.com"),
        ("assistant", "", presented),
    ]

    # when olivia approves it for gamma with the API's domain
    mark = added[-1]["id"]
    stack.fast.add(
        reply_tools(
            tool_call(
                "core_skill",
                {
                    "action": "update",
                    "name": "agentmail",
                    "fields": {"domains": ["api.agentmail.to"]},
                },
            ),
            tool_call("core_skill", {"action": "approve", "name": "agentmail"}),
        ),
        reply_text("AgentMail is approved for this agent too."),
    )
    post(olivia, chat, "Yes, approve it here as well, for api.agentmail.to")

    # then gamma's own policy is approved; alpha's is untouched; one skill, one version
    gamma_policy.refresh_from_db()
    assert (gamma_policy.status, gamma_policy.approved_by, gamma_policy.allowed_domains) == (
        PolicyStatus.APPROVED,
        world.olivia,
        ["api.agentmail.to"],
    )
    before = alpha_policy.updated_at
    alpha_policy.refresh_from_db()
    assert (alpha_policy.status, alpha_policy.updated_at) == (PolicyStatus.APPROVED, before)
    assert (Skill.objects.count(), SkillVersion.objects.count()) == (1, 1)
    assert [r["ok"] for _, r in tool_results(chat, since=mark)] == [True, True]
    assert list(
        PolicyAuditEvent.objects.filter(policy=gamma_policy)
        .order_by("id")
        .values_list("action", "to_status")
    ) == [
        ("policy_created", "needs_reapproval"),
        ("reviewed", "reviewed"),
        ("policy_updated", "reviewed"),
        # the approval grants what the content uses beyond her edit (its tools and credential)
        ("policy_updated", "reviewed"),
        ("approved", "approved"),
    ]
    _no_run_happened(stack)
    assert stack.scripts_spent() == {"fast": 0, "smart": 0, "motor": 0}


def test_scenario_6_a_pasted_skill_file_is_imported_reviewed_and_approved(
    stack: Stack, world: World, session_client
) -> None:
    # given olivia pastes a SKILL.md into her conversation with alpha
    text = agentmail_skill()
    chat = Conversation.objects.create(agent=world.alpha, user=world.olivia)
    olivia = session_client(world.olivia)
    presented = (
        "I saved the AgentMail skill as you gave it. It mentions api.agentmail.to and uses "
        "AGENTMAIL_API_KEY; it needs fetch and network access to api.agentmail.to. Approve?"
    )
    stack.fast.add(
        reply_tools(tool_call("core_skill", {"action": "import", "skill_md": text})),
        reply_tools(tool_call("core_skill", {"action": "review", "name": "agentmail"})),
        reply_text(presented),
    )

    # when she sends it
    added = post(olivia, chat, f"Here's a skill file for AgentMail:\n\n{text}")

    # then it is stored byte for byte without any run, reviewed, and waits for her
    skill = Skill.objects.get(name="agentmail")
    version = skill.current_version
    assert bytes(version.files.get(path="SKILL.md").data).decode() == text
    assert version.files.count() == 1
    policy = Policy.objects.get(skill=skill, agent=world.alpha)
    assert (policy.status, policy.allowed_domains) == (PolicyStatus.REVIEWED, [])
    assert policy.review_facts["referenced_domains"] == ["api.agentmail.to"]
    assert policy.review_facts["referenced_credentials"] == ["AGENTMAIL_API_KEY"]
    _no_run_happened(stack)
    assert [c[1:] for c in brain_calls(chat)] == [
        ("core_skill", {"action": "import", "skill_md": text}),
        ("core_skill", {"action": "review", "name": "agentmail"}),
    ]
    assert [r["ok"] for _, r in tool_results(chat)] == [True, True]
    assert shown(chat)[-1] == ("assistant", "", presented)

    # when she approves the explicit list
    mark = added[-1]["id"]
    stack.fast.add(
        reply_tools(
            tool_call(
                "core_skill",
                {
                    "action": "update",
                    "name": "agentmail",
                    "fields": {
                        "domains": ["api.agentmail.to"],
                        "tools": ["read", "fetch"],
                        "credentials": ["AGENTMAIL_API_KEY"],
                    },
                },
            ),
            tool_call("core_skill", {"action": "approve", "name": "agentmail"}),
        ),
        reply_text("AgentMail is active with fetch on api.agentmail.to."),
    )
    post(olivia, chat, "Approve these permissions")

    # then it is approved as pasted
    policy.refresh_from_db()
    assert (
        policy.status,
        policy.allowed_domains,
        policy.tools,
        policy.required_credentials,
        policy.approved_content_hash,
    ) == (
        PolicyStatus.APPROVED,
        ["api.agentmail.to"],
        ["read", "fetch"],
        ["AGENTMAIL_API_KEY"],
        version.content_hash,
    )
    assert [r["ok"] for _, r in tool_results(chat, since=mark)] == [True, True]
    assert shown(chat, since=mark)[-1] == (
        "assistant",
        "",
        "AgentMail is active with fetch on api.agentmail.to.",
    )
    _no_run_happened(stack)
    assert stack.scripts_spent() == {"fast": 0, "smart": 0, "motor": 0}


def test_scenario_8_a_policy_only_update_keeps_the_skill_approved(
    stack: Stack, world: World, session_client
) -> None:
    # given agentmail approved for api.agentmail.to
    policy = approved_agentmail(
        agent=world.alpha, approver=world.olivia, domains=["api.agentmail.to"]
    )
    approved = (policy.approved_version_id, policy.approved_content_hash)
    audit_before = PolicyAuditEvent.objects.filter(policy=policy).count()
    chat = Conversation.objects.create(agent=world.alpha, user=world.olivia)
    domains = ["api.agentmail.to", "cdn.agentmail.to"]
    stack.fast.add(
        reply_tools(
            tool_call(
                "core_skill",
                {"action": "update", "name": "agentmail", "fields": {"domains": domains}},
            )
        ),
        reply_text("Updated AgentMail's domains to include cdn.agentmail.to."),
    )

    # when olivia asks
    added = post(
        session_client(world.olivia),
        chat,
        "Add cdn.agentmail.to to the AgentMail skill's allowed domains",
    )

    # then the domains changed, the content and the approval did not
    policy.refresh_from_db()
    assert (policy.status, policy.allowed_domains) == (PolicyStatus.APPROVED, domains)
    assert (policy.approved_version_id, policy.approved_content_hash) == approved
    assert SkillVersion.objects.filter(skill=policy.skill).count() == 1
    assert list(
        PolicyAuditEvent.objects.filter(policy=policy)
        .order_by("id")
        .values_list("action", "from_status", "to_status")[audit_before:]
    ) == [("policy_updated", "approved", "approved")]
    [(_, result)] = tool_results(chat)
    assert result["ok"] is True
    assert (result["result"]["status"], result["result"]["allowed_domains"]) == (
        "approved",
        domains,
    )
    assert [(m["role"], m["text"]) for m in added if m["role"] != "tool"] == [
        ("user", "Add cdn.agentmail.to to the AgentMail skill's allowed domains"),
        ("assistant", ""),
        ("assistant", "Updated AgentMail's domains to include cdn.agentmail.to."),
    ]
    _no_run_happened(stack)
    assert stack.scripts_spent() == {"fast": 0, "smart": 0, "motor": 0}
