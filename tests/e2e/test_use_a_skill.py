"""Seed 000 Scenario 2 (an approved skill runs with its policy and its credential) and Scenario 3
(the service is down: the run fails as retryable, the brain retries with guidance, the second
attempt succeeds; the skill is not touched)."""

from __future__ import annotations

import json
import re

import pytest

from cognition.models import Conversation, Message
from cognition.services import credential_set
from runs.models import Attempt, MotorRun, RunStatus, Signal, Step
from skills.models import Policy, PolicyAuditEvent, PolicyStatus, SkillVersion
from tests.cognition.conftest import World
from tests.e2e.conftest import Stack
from tests.e2e.support import (
    approved_agentmail,
    brain_calls,
    last_id,
    post,
    shown,
    wait_handled,
)
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.fixtures.upstream import Answer

pytestmark = [pytest.mark.slow]

SECRET = "am-live-7d1f0c9e2b5a4c3d8e6f"  # noqa: S105 - test data
SENT = Answer(status=200, body='{"id": "msg_1"}', headers={"Content-Type": "application/json"})
DOWN = Answer(status=503, body="upstream maintenance\n")


def _send_call() -> dict:
    return tool_call(
        "fetch",
        {
            "url": "http://api.agentmail.to/v1/send",
            "method": "POST",
            "headers": {
                "Authorization": "Bearer <credential:AGENTMAIL_API_KEY>",
                "Content-Type": "application/json",
            },
            "body": json.dumps({"to": "john@example.com", "subject": "Hello", "text": "Hi John"}),
        },
    )


def test_scenario_2_an_approved_skill_runs_with_its_policy(
    stack: Stack, world: World, session_client
) -> None:
    # given agentmail approved for alpha (api.agentmail.to, read+fetch, one credential in the vault)
    policy = approved_agentmail(
        agent=world.alpha,
        approver=world.olivia,
        domains=["api.agentmail.to"],
        tools=["read", "fetch"],
        credentials=["AGENTMAIL_API_KEY"],
    )
    credential_set(agent=world.alpha, name="AGENTMAIL_API_KEY", value=SECRET, actor=world.olivia)
    stack.upstream.route("api.agentmail.to", "/v1/send", SENT)
    chat = Conversation.objects.create(agent=world.alpha, user=world.olivia)
    stack.fast.add(
        reply_tools(
            tool_call(
                "core_act",
                {
                    "mode": "agentic",
                    "skill": "agentmail",
                    "task": "Send an email to john@example.com with subject 'Hello'",
                    "inputs": {"to": "john@example.com", "subject": "Hello"},
                },
            )
        ),
        reply_text("Sending it with AgentMail."),
        reply_text("Email sent to john@example.com."),
    )
    stack.motor.add(
        reply_tools(tool_call("read", {"path": "SKILL.md"})),
        reply_tools(_send_call()),
        reply_text("Email sent to john@example.com (id msg_1)."),
    )

    # when olivia asks
    added = post(
        session_client(world.olivia), chat, "Send an email to john@example.com via AgentMail"
    )

    # then the brain, which saw the approved skill, started it without naming tools or domains
    system = stack.fast.requests[0]["messages"][0]["content"]
    # (ranked for olivia's message by the skill index, so listed with its score)
    assert re.search(r'<skill name="agentmail" status="approved" score="\d+\.\d{4}">', system)
    run_id = added[2]["tool_result"]["result"]["run_id"]
    wait_handled(stack, run_id, "completed")
    run = MotorRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED
    assert (run.skill_id, run.skill_version_id) == (policy.skill_id, policy.approved_version_id)
    assert (run.tools, run.allowed_domains, run.credential_names) == (
        ["read", "fetch"],
        ["api.agentmail.to"],
        ["agentmail_api_key"],
    )
    assert run.result["skills"]["created"] == run.result["skills"]["updated"] == []
    steps = list(
        Step.objects.filter(attempt__run=run)
        .order_by("iteration", "call_index")
        .values_list("tool", "result__ok")
    )
    assert steps == [("read", True), ("fetch", True)]
    # the motor read the skill's own instructions from its workspace
    assert "# AgentMail" in Step.objects.get(attempt__run=run, tool="read").result["output"]
    # and the service got the real key, while everything stored or sent to an LLM has the placeholder
    [sent] = stack.upstream.request_log("api.agentmail.to")
    assert (sent["line"], sent["headers"]["authorization"]) == ("POST /v1/send", f"Bearer {SECRET}")
    stored = json.dumps(
        [
            list(Step.objects.values_list("arguments", "result")),
            list(Attempt.objects.values_list("messages", flat=True)),
            list(Signal.objects.values_list("payload", flat=True)),
            list(Message.objects.values_list("text", "tool_calls", "tool_result", "event")),
            stack.llm.requests,
        ]
    )
    assert SECRET not in stored
    assert "<credential:AGENTMAIL_API_KEY>" in stored

    # and the skill is unchanged and still approved
    policy.refresh_from_db()
    assert policy.status == PolicyStatus.APPROVED
    assert SkillVersion.objects.filter(skill_id=policy.skill_id).count() == 1
    assert shown(chat, since=added[-1]["id"]) == [
        (
            "event",
            "motor_result",
            f"Run {run_id} completed: Email sent to john@example.com (id msg_1).",
        ),
        ("assistant", "", "Email sent to john@example.com."),
    ]
    assert stack.scripts_spent() == {"fast": 0, "smart": 0, "motor": 0}


def test_scenario_3_a_transient_failure_is_retried_with_guidance(
    stack: Stack, world: World, session_client
) -> None:
    # given an approved agentmail whose API answers 503 three times, then works again
    policy = approved_agentmail(
        agent=world.alpha,
        approver=world.olivia,
        domains=["api.agentmail.to"],
        tools=["read", "fetch"],
        credentials=["AGENTMAIL_API_KEY"],
    )
    credential_set(agent=world.alpha, name="AGENTMAIL_API_KEY", value=SECRET, actor=world.olivia)
    stack.upstream.route("api.agentmail.to", "/v1/send", DOWN, DOWN, DOWN, SENT)
    audit_before = PolicyAuditEvent.objects.filter(policy=policy).count()
    chat = Conversation.objects.create(agent=world.alpha, user=world.olivia)
    guidance = "The API may be temporarily down; wait a moment and retry the send."
    stack.fast.add(
        reply_tools(
            tool_call(
                "core_act",
                {"mode": "agentic", "skill": "agentmail", "task": "Email john@example.com: Hello"},
            )
        ),
        reply_text("Sending it."),
    )
    # attempt 1: three 503s in a row -> the bailout fails the run (tool_failure, retryable)
    stack.motor.add(
        reply_tools(_send_call()),
        reply_tools(_send_call()),
        reply_tools(_send_call()),
    )

    added = post(session_client(world.olivia), chat, "Email john@example.com: Hello")
    run_id = added[2]["tool_result"]["result"]["run_id"]

    # the failed wake-up retries with guidance; attempt 2 succeeds; the brain reports it
    stack.fast.add(
        reply_tools(
            tool_call("core_task", {"action": "retry", "run_id": run_id, "guidance": guidance})
        ),
        reply_text("AgentMail answered 503 three times; I'm retrying once it is back."),
        reply_text("Done: the email to john@example.com went out on the second attempt."),
    )
    stack.motor.add(reply_tools(_send_call()), reply_text("Sent on retry (id msg_1)."))
    failed = wait_handled(stack, run_id, "failed")
    wait_handled(stack, run_id, "completed")

    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.current_attempt_index) == (RunStatus.COMPLETED, 1)
    first, second = run.attempts.order_by("index")
    assert first.status == "failed"
    assert (first.failure["category"], first.failure["retryable"]) == ("tool_failure", True)
    assert first.failure["message"] == (
        "tool 'fetch' failed 3 times in a row with error_code 'http_error'"
    )
    assert second.status == "completed"
    assert second.recovery_context["guidance"] == guidance
    assert [s.result["ok"] for s in first.steps.order_by("iteration")] == [False, False, False]
    assert [s.tool for s in second.steps.all()] == ["fetch"]
    assert stack.upstream.requests("api.agentmail.to") == ["POST /v1/send"] * 4
    # the retry's guidance reached the motor in its system prompt, not as a user message
    retry_prompt = stack.motor.requests[3]["messages"]
    assert retry_prompt[0]["role"] == "system" and guidance in retry_prompt[0]["content"]
    assert all(guidance not in (m.get("content") or "") for m in retry_prompt[1:])
    assert failed.payload["failure"]["retryable"] is True

    # the brain retried on the motor_result turn (not consent-gated) and told the user
    assert [c[:2] for c in brain_calls(chat, since=added[-1]["id"])] == [
        ("motor_result", "core_task")
    ]
    assert shown(chat, since=added[-1]["id"]) == [
        (
            "event",
            "motor_result",
            f"Run {run_id} failed: tool 'fetch' failed 3 times in a row with error_code "
            "'http_error'",
        ),
        ("assistant", "", "AgentMail answered 503 three times; I'm retrying once it is back."),
        ("event", "motor_result", f"Run {run_id} completed: Sent on retry (id msg_1)."),
        ("assistant", "", "Done: the email to john@example.com went out on the second attempt."),
    ]
    # and the skill was not touched: not its fault
    policy.refresh_from_db()
    assert policy.status == PolicyStatus.APPROVED
    assert PolicyAuditEvent.objects.filter(policy=policy).count() == audit_before
    assert SkillVersion.objects.filter(skill_id=policy.skill_id).count() == 1
    assert Policy.objects.count() == 1
    assert stack.scripts_spent() == {"fast": 0, "smart": 0, "motor": 0}
    assert last_id(chat) > 0
