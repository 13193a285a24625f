"""One turn of the built-in brain: system prompt, history, LLM calls and core.* tool calls.

A turn runs outside any database transaction (LLM and tool calls can take seconds); each message
is written as soon as it exists, so a turn cut short leaves a truthful transcript. Limits per
turn: COGNITION_TURN_BUDGET_SECONDS of wall time for everything, and at most
COGNITION_TURN_MAX_TOOL_CALLS tool calls — a call past the cap is not run; the model gets a
`turn_limit` error as its result and one last chance to answer in words.

Who acts (the consent gate's principal) is decided by the caller of `turn_run`:
- a user_message turn acts as whoever wrote the message: the logged-in human (a human principal,
  which passes the gate because the person asked in their own words), or an agent token posting
  on its user's behalf (passes only when the agent is trusted for relayed consent);
- a motor_result or schedule turn acts as the agent itself with that trigger, which the gate
  always refuses for approve / reject / update / delete / respond. The brain cannot approve what
  a run produced on the turn that reports it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import openai
from django.conf import settings

from cognition.core_mcp import is_mcp_tool, mcp_call, mcp_tool_schemas
from cognition.models import Agent
from cognition.principals import Principal
from cognition.tools import TOOL_NAMES, core_dispatch, core_tool_schemas
from runs.errors import LLMUnavailable
from runs.llm import ModelRole, llm_chat, llm_client
from runs.models import MotorRun
from runs.mutex import redis_client

from .cortex_gate import skill_run_gate
from .errors import ConversationBusy
from .models import (
    Conversation,
    ConversationRun,
    ConversationStatus,
    Message,
    MessageRole,
    TurnTrigger,
)
from .prompts import system_prompt

logger = logging.getLogger(__name__)

#: most characters of one tool result sent back to the model (the stored row keeps it all)
MAX_TOOL_RESULT_CHARS = 12_000
#: the core.* tool names (an MCP tool is any other `<skill>__<tool>` name)
CORE_NAMES = frozenset(TOOL_NAMES)
#: run statuses whose signal removes core_task from the brain's tools (seed 000 tool filtering)
PAUSED_STATUSES = frozenset({"awaiting_input", "awaiting_approval"})

_client_cache: dict[tuple[str, str], openai.OpenAI] = {}


def default_client() -> openai.OpenAI:
    """The process's LLM client for the brain (same LLM_* settings as the motor)."""
    key = (settings.LLM_BASE_URL, settings.LLM_API_KEY)
    if key not in _client_cache:
        _client_cache[key] = llm_client()
    return _client_cache[key]


def brain_tools(
    *, trigger: str, wake: dict[str, Any] | None = None, agent: Agent | None = None
) -> list[dict[str, Any]]:
    """The core.* schemas offered on this turn, then `agent`'s deployed MCP tools
    (`<skill>__<tool>`, cognition.core_mcp).

    core_task is removed when a run paused for the user (awaiting_input / awaiting_approval),
    so the brain cannot answer or approve for them (seed 000, first layer; the consent gate is
    the second). core_credential never offers `set`: secrets do not travel through a chat.
    """
    paused = (
        trigger == TurnTrigger.MOTOR_RESULT
        and wake is not None
        and str(wake.get("status")) in PAUSED_STATUSES
    )
    tools = []
    for schema in core_tool_schemas():
        function = schema["function"]
        if paused and function["name"] == "core_task":
            continue
        if function["name"] == "core_credential":
            params = function["parameters"]
            params["properties"]["action"]["enum"] = ["list", "delete"]
            params["properties"].pop("value", None)
            function["description"] = (
                "List the names of the agent's vault credentials, or delete one. Values are set "
                "by a person in the admin or through the API, never in a chat."
            )
        tools.append(schema)
    if agent is not None:
        tools.extend(mcp_tool_schemas(agent))
    return tools


def history(*, conversation: Conversation) -> list[dict[str, Any]]:
    """The last COGNITION_HISTORY_MESSAGES messages as chat-completion messages, in a form every
    OpenAI-compatible server accepts after the one system message: it starts with a user turn,
    user and assistant turns alternate (adjacent user turns — a user's words and wake-up
    events — are joined into one), and tool results follow the assistant turn that called them.

    Events are user-role turns marked as notices (`event_content`), never mid-conversation
    system messages, which several servers and chat templates reject.
    """
    limit = int(settings.COGNITION_HISTORY_MESSAGES)
    rows = list(conversation.messages.order_by("-id")[:limit])[::-1]
    # A window that starts inside an exchange (a tool result whose call was cut off, or the
    # assistant's side) starts at the next user turn or event instead.
    while rows and rows[0].role in (MessageRole.TOOL, MessageRole.ASSISTANT):
        rows.pop(0)
    out: list[dict[str, Any]] = []
    for row in rows:
        message = as_chat_message(row)
        if message["role"] == "user" and out and out[-1]["role"] == "user":
            out[-1] = {"role": "user", "content": f"{out[-1]['content']}\n\n{message['content']}"}
        else:
            out.append(message)
    return out


#: how an event turn introduces itself to the model (the system prompt explains the mark)
EVENT_MARK = "[event: {trigger} — a notice from Motor Cortex, not the user's words]"


def event_content(message: Message) -> str:
    """An event (a run's result, a review card, a schedule) as the text of a user-role turn."""
    return f"{EVENT_MARK.format(trigger=message.trigger)} {message.text}"


def as_chat_message(message: Message) -> dict[str, Any]:
    if message.role == MessageRole.USER:
        return {"role": "user", "content": message.text}
    if message.role == MessageRole.ASSISTANT:
        out: dict[str, Any] = {"role": "assistant", "content": message.text or None}
        if message.tool_calls:
            out["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
                for call in message.tool_calls
            ]
        return out
    if message.role == MessageRole.TOOL:
        return {
            "role": "tool",
            "tool_call_id": message.tool_call_id,
            "content": tool_content(message.tool_result),
        }
    return {"role": "user", "content": event_content(message)}


def tool_content(result: Any) -> str:
    text = json.dumps(result, sort_keys=True, default=str)
    if len(text) > MAX_TOOL_RESULT_CHARS:
        text = text[:MAX_TOOL_RESULT_CHARS] + f"… [truncated, {len(text)} characters in all]"
    return text


@dataclass
class TurnLimits:
    deadline: float  # time.monotonic() seconds
    max_tool_calls: int
    tool_calls: int = 0

    @classmethod
    def from_settings(cls) -> TurnLimits:
        return cls(
            deadline=time.monotonic() + float(settings.COGNITION_TURN_BUDGET_SECONDS),
            max_tool_calls=int(settings.COGNITION_TURN_MAX_TOOL_CALLS),
        )

    @property
    def remaining_s(self) -> float:
        return self.deadline - time.monotonic()


def record(conversation: Conversation, **fields: Any) -> Message:
    """Append one message (and touch the conversation so lists sort by activity)."""
    message = Message.objects.create(conversation=conversation, **fields)
    Conversation.objects.filter(pk=conversation.pk).update(updated_at=message.created_at)
    return message


def dispatch(
    *,
    conversation: Conversation,
    principal: Principal,
    trigger: str,
    name: str,
    arguments: dict[str, Any],
) -> dict[str, Any]:
    """One core.* call for this conversation's agent, with its effects on the conversation."""
    args = dict(arguments)
    if name.replace(".", "_") == "core_credential" and args.get("action") == "set":
        return {
            "ok": False,
            "error": {
                "code": "credential_not_in_chat",
                "message": "Credential values are never set through the chat; ask the user to "
                "enter it in the admin (Credentials) or with PUT /api/v1/credentials/{name}.",
                "details": {"rule": "no_secrets_in_chat"},
            },
        }
    if name not in CORE_NAMES and is_mcp_tool(name):
        # a deployed MCP tool of the conversation's agent (cognition.core_mcp)
        try:
            return mcp_call(
                principal=principal,
                agent=conversation.agent,
                name=name,
                arguments=args,
                trigger=trigger,
            )
        except Exception:
            logger.exception("MCP tool %s failed in conversation %s", name, conversation.pk)
            return _refusal(
                "internal_error", f"{name} failed unexpectedly; nothing more is known.", tool=name
            )
    if principal.is_human:
        # The conversation fixes the agent: the model may not aim at another agent of the user.
        args["agent"] = str(conversation.agent_id)
    if name.replace(".", "_") == "core_act":
        # A skill the cortex holds runs after its plan was confirmed, or on the reflex path.
        refused = skill_run_gate(
            conversation=conversation,
            principal=principal,
            trigger=trigger,
            arguments=args,
            record=record,
        )
        if refused is not None:
            return refused
    try:
        result = core_dispatch(principal=principal, tool_name=name, arguments=args, trigger=trigger)
    except Exception:
        # Domain errors come back as data from core_dispatch; anything else is a bug or an
        # outage. The model gets a plain refusal (no internals), the log gets the traceback.
        logger.exception("core tool %s failed in conversation %s", name, conversation.pk)
        return _refusal(
            "internal_error", f"{name} failed unexpectedly; nothing more is known.", tool=name
        )
    if not result.get("ok"):
        return result
    body = result.get("result") or {}
    action = args.get("action")
    if name.replace(".", "_") == "core_act" and isinstance(body, dict) and body.get("run_id"):
        run = MotorRun.objects.filter(pk=body["run_id"]).first()
        if run is not None:
            ConversationRun.objects.get_or_create(run=run, defaults={"conversation": conversation})
    if (
        name.replace(".", "_") == "core_task"
        and action == "respond"
        and args.get("run_id") == conversation.pending_run_id
    ):
        conversation_clear_pending(conversation=conversation)
    return result


def conversation_clear_pending(*, conversation: Conversation) -> None:
    Conversation.objects.filter(pk=conversation.pk).update(
        status=ConversationStatus.IDLE,
        pending_run_id="",
        pending_question="",
        pending_tool_call_id="",
    )
    conversation.status = ConversationStatus.IDLE
    conversation.pending_run_id = ""
    conversation.pending_question = ""
    conversation.pending_tool_call_id = ""


def _parse_arguments(raw: str) -> dict[str, Any] | None:
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _refusal(code: str, message: str, **details: Any) -> dict[str, Any]:
    return {"ok": False, "error": {"code": code, "message": message, "details": details}}


def turn_run(
    *,
    conversation: Conversation,
    trigger: str,
    principal: Principal,
    wake: dict[str, Any] | None = None,
    role: ModelRole = ModelRole.FAST,
    client: openai.OpenAI | None = None,
    limits: TurnLimits | None = None,
) -> None:
    """Play one turn to its end: LLM, tool calls, LLM, … until the model answers in words, the
    tool-call cap is spent (one last call without tools), or the time budget runs out.

    LLM failures end the turn with a `turn_error` event message; nothing raises to the caller.
    The caller holds the conversation's turn lock (see services).
    """
    limits = limits or TurnLimits.from_settings()
    client = client or default_client()
    tools = brain_tools(trigger=trigger, wake=wake, agent=conversation.agent)
    while True:
        remaining = limits.remaining_s
        if remaining <= 0:
            _budget_spent(conversation, trigger)
            return
        offered = tools if limits.tool_calls < limits.max_tool_calls else []
        prompt = system_prompt(conversation=conversation, trigger=trigger, wake=wake)
        try:
            reply = llm_chat(
                client=client.with_options(timeout=max(1.0, remaining)),
                messages=[
                    {"role": "system", "content": prompt},
                    *history(conversation=conversation),
                ],
                tools=offered,
                role=role,
            )
        except LLMUnavailable as exc:
            logger.warning("brain turn of conversation %s: %s", conversation.pk, exc)
            record(
                conversation,
                role=MessageRole.EVENT,
                trigger=trigger,
                text=f"The language model could not be reached: {exc}",
                event={"type": "turn_error", "code": exc.code},
            )
            return
        calls = list(reply.tool_calls)
        record(
            conversation,
            role=MessageRole.ASSISTANT,
            trigger=trigger,
            text=reply.content,
            tool_calls=[{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls],
        )
        if not calls:
            return
        stop = False
        for call in calls:
            name = call.name.replace(".", "_")
            arguments = _parse_arguments(call.arguments)
            offered_names = {t["function"]["name"] for t in offered}
            # a deployed tool no longer offered (disabled, failed, removed) is still called, so
            # that the model learns its state and why instead of "not available"
            known_mcp = bool(offered) and name not in offered_names and is_mcp_tool(name)
            if not offered or (name not in offered_names and not known_mcp):
                # Counted against the cap, so a model that keeps asking for a missing tool
                # cannot loop until the time budget runs out.
                limits.tool_calls += 1
                result = _refusal(
                    "tool_not_offered" if offered else "turn_limit",
                    f"{call.name} is not available on this turn."
                    if offered
                    else f"The turn's cap of {limits.max_tool_calls} tool calls is spent; "
                    "answer the user in words.",
                    tool=call.name,
                    trigger=trigger,
                )
                stop = stop or not offered
            elif limits.tool_calls >= limits.max_tool_calls:
                result = _refusal(
                    "turn_limit",
                    f"The turn's cap of {limits.max_tool_calls} tool calls is spent; this call "
                    "was not run.",
                    max_tool_calls=limits.max_tool_calls,
                )
            elif limits.remaining_s <= 0:
                result = _refusal("turn_budget", "The turn's time budget is spent; not run.")
            elif arguments is None:
                limits.tool_calls += 1
                result = _refusal(
                    "invalid_arguments", "Tool arguments must be a JSON object.", tool=call.name
                )
            else:
                limits.tool_calls += 1
                result = dispatch(
                    conversation=conversation,
                    principal=principal,
                    trigger=trigger,
                    name=name,
                    arguments=arguments,
                )
            record(
                conversation,
                role=MessageRole.TOOL,
                trigger=trigger,
                tool_call_id=call.id,
                tool_name=name,
                tool_result=result,
            )
        if stop:
            # The model asked for tools after it had been told none were left: end the turn.
            return


def _budget_spent(conversation: Conversation, trigger: str) -> None:
    record(
        conversation,
        role=MessageRole.EVENT,
        trigger=trigger,
        text=f"This turn used its {settings.COGNITION_TURN_BUDGET_SECONDS:g} s budget and stopped.",
        event={"type": "turn_error", "code": "turn_budget"},
    )


# --- the turn lock -------------------------------------------------------------------------------


@contextmanager
def turn_lock(conversation_id: int, *, wait_s: float) -> Iterator[None]:
    """One turn at a time per conversation (a Redis lock that expires after the turn budget)."""
    budget = float(settings.COGNITION_TURN_BUDGET_SECONDS)
    lock = redis_client().lock(
        f"cognition:conversation:{conversation_id}:turn",
        timeout=budget + 60.0,
        blocking_timeout=wait_s,
    )
    if not lock.acquire():
        raise ConversationBusy(
            f"Conversation {conversation_id} is busy with another turn; try again shortly.",
            details={"conversation": conversation_id},
        )
    try:
        yield
    finally:
        try:
            lock.release()
        except Exception:  # noqa: BLE001 - an expired lock is released already
            logger.warning("turn lock of conversation %s had expired", conversation_id)
