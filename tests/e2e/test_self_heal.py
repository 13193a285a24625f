"""Seed 000 Scenario 4: the skill's instructions are outdated.

A: the fix stays inside the approved domains — the run self-heals, the rewritten skill goes back to
pending_review (reviewed on the wake-up) and the user re-approves it.
B: the fix needs a new domain — the egress proxy refuses it, the motor asks, the brain relays the
question (without core_task on that turn), the user allows it, and the brain widens the policy's
domains and runs the skill again, which now reaches the new host and heals the skill."""

from __future__ import annotations

import json

import pytest

from cognition.models import Conversation
from runs.models import MotorRun, RunStatus, Signal, Step
from skills.models import Policy, PolicyAuditEvent, PolicyStatus, SkillVersion
from tests.cognition.conftest import World
from tests.e2e.conftest import Stack
from tests.e2e.support import (
    agentmail_skill,
    approved_agentmail,
    brain_calls,
    last_id,
    post,
    shown,
    tool_results,
    wait_handled,
)
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.fixtures.upstream import Answer

pytestmark = [pytest.mark.slow]

BODY = json.dumps({"to": "john@example.com", "subject": "Hello", "text": "Hi"})
OK = Answer(status=200, body='{"id": "msg_2"}', headers={"Content-Type": "application/json"})
V2_DOCS = (
    "AgentMail API (v2)\n\nSend: POST http://api.agentmail.to/v2/messages {to, subject, text}\n"
)


def _post(url: str) -> dict:
    return tool_call("fetch", {"url": url, "method": "POST", "body": BODY})


def _tools_offered(request: dict) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools") or []]


def test_scenario_4a_self_heal_inside_the_approved_domains_needs_review_again(
    stack: Stack, world: World, session_client
) -> None:
    # given agentmail approved for the docs and API hosts, and an API whose endpoint moved
    policy = approved_agentmail(
        agent=world.alpha,
        approver=world.olivia,
        domains=["agentmail.to", "api.agentmail.to"],
    )
    v1 = policy.skill.current_version
    stack.upstream.route(
        "api.agentmail.to", "/v1/send", Answer(status=404, body="no such endpoint\n")
    )
    stack.upstream.route("agentmail.to", "/docs", Answer(body=V2_DOCS))
    stack.upstream.route("api.agentmail.to", "/v2/messages", OK)
    healed = agentmail_skill("http://api.agentmail.to/v2/messages")
    chat = Conversation.objects.create(agent=world.alpha, user=world.olivia)
    olivia = session_client(world.olivia)
    stack.fast.add(
        reply_tools(
            tool_call(
                "core_act",
                {"mode": "agentic", "skill": "agentmail", "task": "Email john@example.com: Hello"},
            )
        ),
        reply_text("Sending it with AgentMail."),
    )
    stack.motor.add(
        reply_tools(tool_call("read", {"path": "SKILL.md"})),
        reply_tools(_post("http://api.agentmail.to/v1/send")),
        reply_tools(tool_call("fetch", {"url": "http://agentmail.to/docs"})),
        reply_tools(
            tool_call("write", {"path": "SKILL.md", "content": healed}),
            _post("http://api.agentmail.to/v2/messages"),
        ),
        reply_text(
            "Sent (id msg_2). The endpoint moved from /v1/send to /v2/messages; SKILL.md updated."
        ),
    )
    presented = (
        "The email went out. I also updated the AgentMail skill: the endpoint moved from "
        "/v1/send to /v2/messages (same domain). Re-approve it?"
    )
    stack.smart.add(reply_text(presented))

    # when olivia asks
    added = post(olivia, chat, "Send an email via AgentMail to john@example.com")
    run_id = added[2]["tool_result"]["result"]["run_id"]
    wait_handled(stack, run_id, "completed")

    # then the run succeeded and its rewrite became version 2, pending review again (reviewed
    # by the wake-up), while the old approval stays on version 1
    run = MotorRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED
    assert run.result["skills"] == {
        "created": [],
        "updated": ["agentmail"],
        "unchanged": [],
        "failed": [],
    }
    assert [
        (s.tool, s.result["ok"])
        for s in Step.objects.filter(attempt__run=run).order_by("iteration", "call_index")
    ] == [("read", True), ("fetch", False), ("fetch", True), ("write", True), ("fetch", True)]
    assert stack.upstream.requests("api.agentmail.to") == ["POST /v1/send", "POST /v2/messages"]
    policy.refresh_from_db()
    v2 = policy.skill.current_version
    assert (v2.number, policy.status, policy.approved_version_id) == (
        2,
        PolicyStatus.REVIEWED,
        v1.pk,
    )
    assert bytes(v2.files.get(path="SKILL.md").data).decode() == healed
    assert policy.allowed_domains == ["agentmail.to", "api.agentmail.to"]  # kept
    assert list(
        PolicyAuditEvent.objects.filter(policy=policy)
        .order_by("id")
        .values_list("action", "to_status")[4:]
    ) == [("content_changed", "pending_review"), ("reviewed", "reviewed")]
    assert shown(chat, since=added[-1]["id"]) == [
        (
            "event",
            "motor_result",
            f"Run {run_id} completed: Sent (id msg_2). The endpoint moved from /v1/send to "
            "/v2/messages; SKILL.md updated.",
        ),
        ("event", "skill_review", "Skill 'agentmail' is reviewed and waits for your approval."),
        ("assistant", "", presented),
    ]

    # when olivia re-approves
    mark = last_id(chat)
    stack.fast.add(
        reply_tools(tool_call("core_skill", {"action": "approve", "name": "agentmail"})),
        reply_text("Re-approved: AgentMail now uses /v2/messages."),
    )
    post(olivia, chat, "Yes, re-approve it")

    # then version 2 is the approved one
    policy.refresh_from_db()
    assert (policy.status, policy.approved_version_id, policy.approved_content_hash) == (
        PolicyStatus.APPROVED,
        v2.pk,
        v2.content_hash,
    )
    assert [r["ok"] for _, r in tool_results(chat, since=mark)] == [True]
    assert stack.scripts_spent() == {"fast": 0, "smart": 0, "motor": 0}


def test_scenario_4b_a_new_domain_is_asked_for_allowed_and_the_run_retried(
    stack: Stack, world: World, session_client
) -> None:
    # given agentmail approved for api.agentmail.to, whose API now redirects to api-v2
    policy = approved_agentmail(
        agent=world.alpha, approver=world.olivia, domains=["api.agentmail.to"]
    )
    stack.upstream.route(
        "api.agentmail.to",
        "/v1/send",
        Answer(status=301, headers={"Location": "http://api-v2.agentmail.to/v1/send"}),
    )
    stack.upstream.route("api-v2.agentmail.to", "/v1/send", OK)
    healed = agentmail_skill("http://api-v2.agentmail.to/v1/send")
    question = "The API moved to api-v2.agentmail.to. I need access to this domain to continue."
    chat = Conversation.objects.create(agent=world.alpha, user=world.olivia)
    olivia = session_client(world.olivia)
    task = "Email john@example.com: Hello"
    stack.fast.add(
        reply_tools(tool_call("core_act", {"mode": "agentic", "skill": "agentmail", "task": task})),
        reply_text("Sending it."),
        # the awaiting_input wake-up relays the question
        reply_text("AgentMail moved to a new domain (api-v2.agentmail.to). Allow access?"),
    )
    stack.motor.add(
        reply_tools(_post("http://api.agentmail.to/v1/send")),
        reply_tools(tool_call("ask_user", {"question": question})),
    )

    # when olivia asks, the run hits the proxy's refusal and asks
    added = post(olivia, chat, "Send an email via AgentMail to john@example.com")
    first_id = added[2]["tool_result"]["result"]["run_id"]
    wait_handled(stack, first_id, "awaiting_input")

    # then the blocked redirect is data for the motor, the question reached olivia, and the
    # brain could not answer it itself (core_task was not offered on that turn)
    first = MotorRun.objects.get(pk=first_id)
    assert first.status == RunStatus.AWAITING_INPUT
    blocked = Step.objects.get(attempt__run=first, tool="fetch").result
    assert (blocked["ok"], blocked["error_code"]) == (False, "network_blocked")
    assert "api-v2.agentmail.to" in blocked["output"]
    assert stack.upstream.requests("api-v2.agentmail.to") == []
    assert "core_task" not in _tools_offered(stack.fast.requests[2])
    assert "core_task" in _tools_offered(stack.fast.requests[0])
    chat.refresh_from_db()
    assert (chat.status, chat.pending_run_id, chat.pending_question) == (
        "awaiting_answer",
        first_id,
        question,
    )
    assert shown(chat, since=added[-1]["id"]) == [
        ("event", "motor_result", f"Run {first_id} asks: {question}"),
        ("assistant", "", "AgentMail moved to a new domain (api-v2.agentmail.to). Allow access?"),
    ]

    # when olivia allows it, the brain widens the policy, stops the stuck run and runs again
    mark = last_id(chat)
    stack.fast.add(
        reply_tools(
            tool_call(
                "core_skill",
                {
                    "action": "update",
                    "name": "agentmail",
                    "fields": {
                        "domains": ["api.agentmail.to", "api-v2.agentmail.to"],
                        "reason": "the API moved to api-v2.agentmail.to",
                    },
                },
            ),
            tool_call("core_task", {"action": "cancel", "run_id": first_id}),
            tool_call("core_act", {"mode": "agentic", "skill": "agentmail", "task": task}),
        ),
        reply_text("Allowed api-v2.agentmail.to; sending again."),
    )
    stack.motor.add(
        reply_tools(_post("http://api-v2.agentmail.to/v1/send")),
        reply_tools(tool_call("write", {"path": "SKILL.md", "content": healed})),
        reply_text("Sent via api-v2.agentmail.to (id msg_2); SKILL.md updated to the new host."),
    )
    presented = "Sent. I updated AgentMail for its new host api-v2.agentmail.to. Re-approve?"
    stack.smart.add(reply_text(presented))
    post(olivia, chat, "Yes, allow api-v2.agentmail.to")
    results = tool_results(chat, since=mark)
    assert [(name, r["ok"]) for name, r in results] == [
        ("core_skill", True),
        ("core_task", True),
        ("core_act", True),
    ]
    second_id = results[2][1]["result"]["run_id"]
    wait_handled(stack, second_id, "completed")

    # then the second run had the expanded list and reached the new host
    first.refresh_from_db()
    second = MotorRun.objects.get(pk=second_id)
    assert first.status == RunStatus.CANCELLED
    assert (second.status, second.allowed_domains) == (
        RunStatus.COMPLETED,
        ["api.agentmail.to", "api-v2.agentmail.to"],
    )
    assert stack.upstream.requests("api-v2.agentmail.to") == ["POST /v1/send"]
    assert second.result["skills"]["updated"] == ["agentmail"]
    # and the healed skill waits for review with the domains the user allowed
    policy.refresh_from_db()
    assert (policy.status, policy.allowed_domains) == (
        PolicyStatus.REVIEWED,
        ["api.agentmail.to", "api-v2.agentmail.to"],
    )
    assert SkillVersion.objects.filter(skill=policy.skill).count() == 2
    chat.refresh_from_db()
    assert (chat.status, chat.pending_run_id) == ("idle", "")
    assert shown(chat, since=mark) == [
        ("user", "", "Yes, allow api-v2.agentmail.to"),
        ("assistant", "", "Allowed api-v2.agentmail.to; sending again."),
        (
            "event",
            "motor_result",
            f"Run {second_id} completed: Sent via api-v2.agentmail.to (id msg_2); SKILL.md "
            "updated to the new host.",
        ),
        ("event", "skill_review", "Skill 'agentmail' is reviewed and waits for your approval."),
        ("assistant", "", presented),
    ]
    assert [c[:2] for c in brain_calls(chat)].count(("user_message", "core_task")) == 1
    # a cancel the brain asked for emits no signal: it already knows
    assert list(
        Signal.objects.filter(run_id=first_id).values_list("payload__status", flat=True)
    ) == ["awaiting_input"]
    assert stack.scripts_spent() == {"fast": 0, "smart": 0, "motor": 0}
    assert Policy.objects.count() == 1


def test_scenario_4_when_the_run_cannot_heal_a_research_run_rewrites_the_skill(
    stack: Stack, world: World, session_client
) -> None:
    # given agentmail approved for its API host only, whose endpoint is gone
    policy = approved_agentmail(
        agent=world.alpha,
        approver=world.olivia,
        domains=["api.agentmail.to"],
        tools=["read", "fetch"],
    )
    v1 = policy.skill.current_version
    stack.upstream.route(
        "api.agentmail.to", "/v1/send", Answer(status=404, body="no such endpoint\n")
    )
    stack.upstream.route("agentmail.to", "/docs", Answer(body=V2_DOCS))
    healed = agentmail_skill("http://api.agentmail.to/v2/messages")
    chat = Conversation.objects.create(agent=world.alpha, user=world.olivia)
    olivia = session_client(world.olivia)
    research = (
        "The agentmail skill is broken: POST /v1/send answers 404. Research the current AgentMail "
        "API at http://agentmail.to/docs and write an updated skill named agentmail (SKILL.md)."
    )
    stack.fast.add(
        reply_tools(
            tool_call(
                "core_act",
                {"mode": "agentic", "skill": "agentmail", "task": "Email john@example.com: Hello"},
            )
        ),
        reply_text("Sending it with AgentMail."),
        # the failed wake-up: not a transient failure, so a dedicated research run instead
        reply_tools(
            tool_call(
                "core_act",
                {
                    "mode": "agentic",
                    "task": research,
                    "tools": ["read", "write", "fetch"],
                    "domains": ["agentmail.to"],
                },
            )
        ),
        reply_text("AgentMail's send endpoint is gone (404). I'm researching its current API."),
    )
    # the skill run cannot reach any docs (its policy has only the API host): three 404s fail it
    stack.motor.add(
        reply_tools(_post("http://api.agentmail.to/v1/send")),
        reply_tools(_post("http://api.agentmail.to/v1/send")),
        reply_tools(_post("http://api.agentmail.to/v1/send")),
        # the research run
        reply_tools(tool_call("fetch", {"url": "http://agentmail.to/docs"})),
        reply_tools(tool_call("write", {"path": "SKILL.md", "content": healed})),
        reply_text("Rewrote agentmail for POST /v2/messages."),
    )
    presented = "I rewrote AgentMail for its new endpoint /v2/messages. Approve the new version?"
    stack.smart.add(reply_text(presented))

    # when olivia asks
    added = post(olivia, chat, "Send an email via AgentMail to john@example.com")
    first_id = added[2]["tool_result"]["result"]["run_id"]
    wait_handled(stack, first_id, "failed")

    # then the brain started a research run on the failed wake-up
    (trigger, tool, args), *_ = brain_calls(chat, since=added[-1]["id"])
    assert (trigger, tool, args["domains"]) == ("motor_result", "core_act", ["agentmail.to"])
    second_id = next(r["result"]["run_id"] for name, r in tool_results(chat, since=added[-1]["id"]))
    wait_handled(stack, second_id, "completed")
    # and, woken by its completion (which may come before the check above), had the new version
    # reviewed, and nothing else
    assert brain_calls(chat, since=added[-1]["id"])[1:] == [
        ("motor_result", "core_skill", {"action": "review", "name": "agentmail"})
    ]

    # then the first run failed, the research run wrote version 2, which waits for review
    first, second = MotorRun.objects.get(pk=first_id), MotorRun.objects.get(pk=second_id)
    assert (first.status, first.result["failure"]["category"]) == (
        RunStatus.FAILED,
        "tool_failure",
    )
    assert (second.status, second.skill_id, second.result["skills"]["updated"]) == (
        RunStatus.COMPLETED,
        None,
        ["agentmail"],
    )
    policy.refresh_from_db()
    v2 = policy.skill.current_version
    assert (v2.number, policy.status, policy.approved_version_id) == (
        2,
        PolicyStatus.REVIEWED,
        v1.pk,
    )
    assert bytes(v2.files.get(path="SKILL.md").data).decode() == healed
    assert stack.upstream.requests("api.agentmail.to") == ["POST /v1/send"] * 3
    assert stack.upstream.requests("agentmail.to") == ["GET /docs"]
    assert shown(chat, since=added[-1]["id"]) == [
        (
            "event",
            "motor_result",
            f"Run {first_id} failed: tool 'fetch' failed 3 times in a row with error_code "
            "'http_error'",
        ),
        (
            "assistant",
            "",
            "AgentMail's send endpoint is gone (404). I'm researching its current API.",
        ),
        (
            "event",
            "motor_result",
            f"Run {second_id} completed: Rewrote agentmail for POST /v2/messages.",
        ),
        ("event", "skill_review", "Skill 'agentmail' is reviewed and waits for your approval."),
        ("assistant", "", presented),
    ]

    # when olivia approves the new version
    stack.fast.add(
        reply_tools(tool_call("core_skill", {"action": "approve", "name": "agentmail"})),
        reply_text("The new AgentMail is approved."),
    )
    post(olivia, chat, "Yes, approve it")
    policy.refresh_from_db()
    assert (policy.status, policy.approved_version_id) == (PolicyStatus.APPROVED, v2.pk)
    assert stack.scripts_spent() == {"fast": 0, "smart": 0, "motor": 0}
