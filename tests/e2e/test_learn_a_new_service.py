"""Seed 000 Scenario 1: the user tells the agent about a new service; a run researches it and
writes a skill; the brain presents the review and cannot approve on that turn; the user approves
in their next message."""

from __future__ import annotations

import pytest

from cognition.brain.models import BrainWake, WakeState
from cognition.models import Conversation
from runs.models import MotorRun, RunStatus, Signal, Step
from skills.models import Policy, PolicyAuditEvent, PolicyStatus, Skill
from tests.cognition.conftest import World
from tests.e2e.conftest import Stack
from tests.e2e.support import (
    DOCS_PAGE,
    agentmail_skill,
    brain_calls,
    last_id,
    post,
    shown,
    tool_results,
)
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.fixtures.upstream import Answer

pytestmark = [pytest.mark.slow]

PRESENTED = (
    "I learned AgentMail, an email API. The skill references api.agentmail.to and the "
    "credential AGENTMAIL_API_KEY; files: SKILL.md, references/api-docs.md. Shall I activate it?"
)
API_DOCS = "# AgentMail API\n\nPOST /v1/send {to, subject, text} -> {id}\n"


def test_scenario_1_a_new_service_becomes_an_approved_skill(
    stack: Stack, world: World, session_client
) -> None:
    # given the service's documentation online, and a conversation of olivia with alpha
    stack.upstream.route("docs.agentmail.to", "/", Answer(body=DOCS_PAGE))
    chat = Conversation.objects.create(agent=world.alpha, user=world.olivia)
    olivia = session_client(world.olivia)
    research = (
        "Research AgentMail. Fetch its documentation at http://docs.agentmail.to/ and create "
        "a skill: SKILL.md with setup, API usage and examples; references/api-docs.md."
    )
    stack.fast.add(
        reply_tools(
            tool_call(
                "core_act",
                {
                    "mode": "agentic",
                    "task": research,
                    "tools": ["read", "write", "fetch"],
                    "domains": ["docs.agentmail.to"],
                },
            )
        ),
        reply_text("I'm learning AgentMail now and will report back."),
    )
    stack.motor.add(
        reply_tools(tool_call("fetch", {"url": "http://docs.agentmail.to/"})),
        reply_tools(
            tool_call("write", {"path": "SKILL.md", "content": agentmail_skill()}),
            tool_call("write", {"path": "references/api-docs.md", "content": API_DOCS}),
        ),
        reply_text("Created the agentmail skill: SKILL.md and references/api-docs.md."),
    )
    stack.smart.add(reply_text(PRESENTED))

    # when olivia asks through the conversation endpoint
    added = post(olivia, chat, "I came across AgentMail, learn how to work with it")

    # then the brain started a run with explicit tools and domains and said so
    assert [(m["role"], m["text"]) for m in added if m["role"] != "tool"] == [
        ("user", "I came across AgentMail, learn how to work with it"),
        ("assistant", ""),
        ("assistant", "I'm learning AgentMail now and will report back."),
    ]
    run_id = added[2]["tool_result"]["result"]["run_id"]
    run = MotorRun.objects.get(pk=run_id)
    assert (run.tools, run.allowed_domains, run.skill_id, run.trigger) == (
        ["read", "write", "fetch"],
        ["docs.agentmail.to"],
        None,
        "user_message",
    )

    # and the worker runs it, extracts the skill and wakes the brain, which reviews it
    done = stack.wait_for(
        lambda: Signal.objects.filter(run_id=run_id, payload__status="completed").first(),
        "the run's completed signal",
    )
    stack.wait_for(
        lambda: BrainWake.objects.filter(signal=done, state=WakeState.DONE).exists(),
        "the brain's wake-up",
    )
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    assert run.result["ok"] is True
    assert run.result["skills"]["created"] == ["agentmail"]
    assert list(run.attempts.values_list("index", "status")) == [(0, "completed")]
    steps = list(
        Step.objects.filter(attempt__run=run)
        .order_by("iteration", "call_index")
        .values_list("tool", "state", "result__ok")
    )
    assert steps == [
        ("fetch", "done", True),
        ("write", "done", True),
        ("write", "done", True),
    ]
    fetched = Step.objects.get(attempt__run=run, tool="fetch").result["output"]
    assert "POST http://api.agentmail.to/v1/send" in fetched
    assert stack.upstream.requests("docs.agentmail.to") == ["GET /"]

    skill = Skill.objects.get(name="agentmail")
    version = skill.current_version
    assert version.number == 1
    assert sorted(version.files.values_list("path", flat=True)) == [
        "SKILL.md",
        "references/api-docs.md",
    ]
    policy = Policy.objects.get(skill=skill, agent=world.alpha)
    # reviewed on the wake-up; no domains from the research run (domain separation)
    assert (policy.status, policy.allowed_domains) == (PolicyStatus.REVIEWED, [])
    assert policy.review_facts["referenced_domains"] == ["api.agentmail.to"]
    assert policy.review_facts["referenced_credentials"] == ["AGENTMAIL_API_KEY"]

    # and the user was shown the result, the review card and the question
    assert shown(chat, since=added[-1]["id"]) == [
        (
            "event",
            "motor_result",
            f"Run {run_id} completed: Created the agentmail skill: SKILL.md and "
            "references/api-docs.md.",
        ),
        ("event", "skill_review", "Skill 'agentmail' is reviewed and waits for your approval."),
        ("assistant", "", PRESENTED),
    ]
    # the motor_result turn was offered approve but did not (and could not) use it
    assert [call[1:] for call in brain_calls(chat, since=added[-1]["id"])] == [
        ("core_skill", {"action": "review", "name": "agentmail"})
    ]
    wake_prompt = stack.smart.requests[0]["messages"][0]["content"]
    assert '<skill name="agentmail" status="reviewed">' in wake_prompt
    assert "You cannot approve on this turn." in wake_prompt

    # when olivia approves in her own words, granting the API's domain
    mark = last_id(chat)
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
        reply_text("AgentMail is approved and may reach api.agentmail.to."),
    )
    post(olivia, chat, "Yes, activate it and allow api.agentmail.to")

    # then the skill is approved for alpha with that domain, as olivia, and with the tools and
    # the credential its content uses (the approval's proposal), so its next run can work
    policy.refresh_from_db()
    assert (policy.status, policy.allowed_domains, policy.approved_by) == (
        PolicyStatus.APPROVED,
        ["api.agentmail.to"],
        world.olivia,
    )
    assert (policy.tools, policy.required_credentials) == (
        ["bash", "fetch", "list", "read", "write"],
        ["AGENTMAIL_API_KEY"],
    )
    assert policy.approved_content_hash == version.content_hash
    assert list(
        PolicyAuditEvent.objects.filter(policy=policy)
        .order_by("id")
        .values_list("action", "actor_label", "to_status")
    ) == [
        ("policy_created", f"run {run_id}", "pending_review"),
        ("reviewed", "agent:alpha", "reviewed"),
        ("policy_updated", "api:olivia", "reviewed"),
        ("policy_updated", "api:olivia", "reviewed"),
        ("approved", "api:olivia", "approved"),
    ]
    assert shown(chat, since=mark) == [
        ("user", "", "Yes, activate it and allow api.agentmail.to"),
        ("assistant", "", "AgentMail is approved and may reach api.agentmail.to."),
    ]
    assert [r["ok"] for _, r in tool_results(chat, since=mark)] == [True, True]
    assert stack.scripts_spent() == {"fast": 0, "smart": 0, "motor": 0}
    assert Signal.objects.filter(agent=world.alpha).count() == 1


def test_scenario_1_if_the_user_rejects_the_skill_it_is_not_approved(
    stack: Stack, world: World, session_client
) -> None:
    # given a research run that created agentmail, presented to olivia
    stack.upstream.route("docs.agentmail.to", "/", Answer(body=DOCS_PAGE))
    chat = Conversation.objects.create(agent=world.alpha, user=world.olivia)
    olivia = session_client(world.olivia)
    stack.fast.add(
        reply_tools(
            tool_call(
                "core_act",
                {
                    "mode": "agentic",
                    "task": "Research AgentMail at http://docs.agentmail.to/ and create a skill.",
                    "tools": ["read", "write", "fetch"],
                    "domains": ["docs.agentmail.to"],
                },
            )
        ),
        reply_text("Learning AgentMail."),
    )
    stack.motor.add(
        reply_tools(tool_call("fetch", {"url": "http://docs.agentmail.to/"})),
        reply_tools(tool_call("write", {"path": "SKILL.md", "content": agentmail_skill()})),
        reply_text("Created the agentmail skill."),
    )
    stack.smart.add(reply_text(PRESENTED))
    added = post(olivia, chat, "I came across AgentMail, learn how to work with it")
    run_id = added[2]["tool_result"]["result"]["run_id"]
    done = stack.wait_for(
        lambda: Signal.objects.filter(run_id=run_id, payload__status="completed").first(),
        "the run's completed signal",
    )
    stack.wait_for(
        lambda: BrainWake.objects.filter(signal=done, state=WakeState.DONE).exists(),
        "the brain's wake-up",
    )
    policy = Policy.objects.get(skill__name="agentmail", agent=world.alpha)
    assert policy.status == PolicyStatus.REVIEWED
    audit_before = PolicyAuditEvent.objects.filter(policy=policy).count()

    # when olivia says it looks wrong, the brain asks what is wrong and changes nothing
    mark = last_id(chat)
    question = "What looks wrong? I can research it again with your corrections."
    stack.fast.add(reply_text(question))
    post(olivia, chat, "No, that looks wrong")

    # then the skill is still waiting for approval, untouched, and cannot run with its policy
    policy.refresh_from_db()
    assert (policy.status, policy.approved_by, policy.allowed_domains) == (
        PolicyStatus.REVIEWED,
        None,
        [],
    )
    assert PolicyAuditEvent.objects.filter(policy=policy).count() == audit_before
    assert brain_calls(chat, since=mark) == []
    assert shown(chat, since=mark) == [
        ("user", "", "No, that looks wrong"),
        ("assistant", "", question),
    ]
    # when the brain tries to use it anyway, the start is refused with the reason
    stack.fast.add(
        reply_tools(
            tool_call("core_act", {"mode": "agentic", "skill": "agentmail", "task": "Send a mail"})
        ),
        reply_text("AgentMail is not approved, so I cannot use it yet."),
    )
    mark = last_id(chat)
    post(olivia, chat, "Then just send a test mail with it")
    [(_, refused)] = tool_results(chat, since=mark)
    assert (refused["ok"], refused["error"]["details"]["rule"]) == (
        False,
        "unapproved_skill_needs_explicit_grants",
    )
    assert MotorRun.objects.count() == 1
    assert stack.scripts_spent() == {"fast": 0, "smart": 0, "motor": 0}
