"""Helpers and fixed texts the end-to-end scenarios share."""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.models import User

from cognition.brain.models import BrainWake, WakeState
from cognition.models import Agent, Conversation, Message
from runs.models import Signal
from skills.imports import skill_import_pasted
from skills.models import Policy
from skills.policy_edits import policy_update
from skills.reviewing import policy_approve, policy_review
from skills.services import Actor

DOCS_PAGE = """AgentMail API (v1)

Send a message: POST http://api.agentmail.to/v1/send with a JSON body {"to", "subject",
"text"} and the header Authorization: Bearer <your key>. Answers {"id": "msg_..."}.
"""


def agentmail_skill(endpoint: str = "http://api.agentmail.to/v1/send") -> str:
    """The agentmail SKILL.md a research run writes (and a self-heal run rewrites)."""
    return (
        "---\n"
        "name: agentmail\n"
        "description: Send email through the AgentMail API. Use when the user wants to email "
        "someone.\n"
        "---\n"
        "# AgentMail\n\n"
        f"Send a message with a POST to {endpoint}:\n\n"
        "```bash\n"
        f'curl -X POST {endpoint} -H "Authorization: Bearer $AGENTMAIL_API_KEY" '
        '-d \'{"to": "...", "subject": "...", "text": "..."}\'\n'
        "```\n\n"
        "The full reference is in references/api-docs.md.\n"
    )


def approved_agentmail(
    *,
    agent: Agent,
    approver: User,
    domains: list[str],
    tools: list[str] | None = None,
    credentials: list[str] | None = None,
    text: str | None = None,
) -> Policy:
    """An agentmail skill approved for `agent` with `domains` (the state Scenario 1 ends in)."""
    policy = skill_import_pasted(
        text=text or agentmail_skill(), actor=Actor.system("setup"), agent=agent
    ).policy
    assert policy is not None
    policy = policy_review(policy=policy, actor=Actor.system("setup"))
    policy = policy_update(
        policy=policy,
        actor=Actor.system("setup"),
        allowed_domains=domains,
        tools=tools if tools is not None else ["read", "write", "fetch"],
        required_credentials=credentials or [],
    )
    return policy_approve(policy=policy, actor=Actor.from_user(approver))


# --- helpers the scenarios share -----------------------------------------------------------------


def shown(conversation: Conversation, *, since: int = 0) -> list[tuple[str, str, str]]:
    """What the chat shows the user, in order: (role, event type or "", text) of every user,
    assistant-with-text and event message (tool calls and tool results are not shown)."""
    rows = []
    for message in Message.objects.filter(conversation=conversation, id__gt=since).order_by("id"):
        if message.role == "tool" or (message.role == "assistant" and not message.text):
            continue
        rows.append((message.role, (message.event or {}).get("type", ""), message.text))
    return rows


def brain_calls(conversation: Conversation, *, since: int = 0) -> list[tuple[str, str, dict]]:
    """(trigger, tool, arguments) of every core.* call the brain made, in order."""
    calls = []
    for message in Message.objects.filter(
        conversation=conversation, role="assistant", id__gt=since
    ).order_by("id"):
        for call in message.tool_calls or []:
            calls.append((message.trigger, call["name"], json.loads(call["arguments"])))
    return calls


def tool_results(conversation: Conversation, *, since: int = 0) -> list[tuple[str, dict]]:
    """(tool, result) of every core.* call's result, in order."""
    return [
        (m.tool_name, m.tool_result)
        for m in Message.objects.filter(
            conversation=conversation, role="tool", id__gt=since
        ).order_by("id")
    ]


def last_id(conversation: Conversation) -> int:
    return (
        Message.objects.filter(conversation=conversation)
        .order_by("-id")
        .values_list("id", flat=True)
    ).first() or 0


def post(client: Any, conversation: Conversation, text: str) -> list[dict[str, Any]]:
    """POST a user message through the REST endpoint; the messages its turn added."""
    response = client.post(
        f"/api/v1/conversations/{conversation.pk}/messages/", {"text": text}, format="json"
    )
    assert response.status_code == 201, response.json()
    return response.json()["messages"]


def wait_handled(stack: Any, run_id: str, status: str, nth: int = 1) -> Signal:
    """The run's nth signal with `status`, once the brain's wake-up for it is done."""

    def found() -> Signal | None:
        rows = list(Signal.objects.filter(run_id=run_id, payload__status=status).order_by("id"))
        return rows[nth - 1] if len(rows) >= nth else None

    signal = stack.wait_for(found, f"signal #{nth} {status} of {run_id}")
    stack.wait_for(
        lambda: BrainWake.objects.filter(signal=signal, state=WakeState.DONE).exists(),
        f"the brain's wake-up on {status} of {run_id}",
    )
    return signal
