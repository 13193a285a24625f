"""The built-in brain's service API: conversations, user messages and approvals by click (the
wake-up on signals lives in cognition.brain.waking and is re-exported here).

Interface (keyword-only; `actor` is who acts — a `Principal`, or a Django user for a human):

    conversation_start(agent=, user=, title="", actor=None) -> Conversation
        A new idle conversation between `user` and `agent`; the user must be allowed to act for
        the agent (its owner, or a superuser), otherwise AgentNotFound (404) and nothing is made.

    conversation_post_message(conversation_id=, text=, actor=, client=None) -> list[Message]
        Store the user's message and play one turn (trigger user_message) synchronously; returns
        every message the call added, the user's first. The turn acts as `actor` (see
        cognition.brain.engine for the consent rules). Errors, all raised before anything is
        stored: ConversationNotFound (404), MessageInvalid (400), ConversationBusy (409, another
        turn holds the conversation longer than the wait). LLM failures do not raise: the turn
        ends with an event message {"type": "turn_error"}.

    conversation_cancel_run(conversation_id=, run_id=, actor=) -> Message
        The runs panel's Cancel button: core.task cancel as the human who clicked.

    conversation_approve_skill(conversation_id=, skill=, actor=, note="") -> Message
        The review card's Approve button: core.skill approve as the human who clicked (a human
        principal on a user_message trigger passes the consent gate). Returns the event message
        {"type": "skill_approved"} added to the conversation. Domain errors (not an approver,
        stale review, …) propagate and change nothing.

    brain_wake, brain_wake_handle: the wake-up on signals (cognition.brain.waking, re-exported
    here).
"""

from __future__ import annotations

import logging
from typing import Any

import openai
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser

from cognition.core_skill import core_skill
from cognition.core_task import core_task
from cognition.errors import AgentNotFound
from cognition.models import Agent
from cognition.principals import Principal
from cognition.selectors import agents_visible_to
from runs.llm import ModelRole
from runs.models import MotorRun
from skills import bundle as bundle_lib

from .engine import conversation_clear_pending, record, turn_lock, turn_run
from .errors import ConversationNotFound, MessageInvalid
from .models import (
    Conversation,
    Message,
    MessageRole,
    TurnTrigger,
)

# the wake-up on signals has its own module; its entry points stay importable from here
from .waking import BRAIN_HOOK_NAME, _event_text, brain_wake, brain_wake_handle

logger = logging.getLogger(__name__)

#: most characters of one user message
MAX_MESSAGE_CHARS = 8_000


def as_principal(actor: Principal | AbstractBaseUser) -> Principal:
    if isinstance(actor, Principal):
        return actor
    return Principal.for_human(actor)


# --- reads ---------------------------------------------------------------------------------------


def conversations_visible_to(*, principal: Principal) -> Any:
    """A human sees the conversations they hold; an agent sees its own."""
    rows = Conversation.objects.select_related("agent", "user")
    if principal.agent is not None:
        return rows.filter(agent=principal.agent)
    return rows.filter(user=principal.user, agent__in=agents_visible_to(user=principal.user))


def conversation_get(*, principal: Principal, conversation_id: Any) -> Conversation:
    """The conversation if `principal` may see it; ConversationNotFound otherwise."""
    try:
        pk = int(conversation_id)
    except (TypeError, ValueError):
        pk = None
    conversation = None
    if pk is not None and 0 < pk < 2**63:
        conversation = conversations_visible_to(principal=principal).filter(pk=pk).first()
    if conversation is None:
        raise ConversationNotFound(
            f"No conversation {str(conversation_id)[:40]!r} that you may see.",
            details={"conversation": str(conversation_id)[:40]},
        )
    return conversation


# --- conversations -------------------------------------------------------------------------------


def conversation_start(
    *, agent: Agent, user: AbstractBaseUser, title: str = "", actor: Any = None
) -> Conversation:
    """Open a conversation between `user` and `agent` (see the module docstring)."""
    if not agents_visible_to(user=user).filter(pk=agent.pk).exists():
        raise AgentNotFound(f"No agent {agent.name!r} that you may act for.", details={})
    if not isinstance(title, str) or len(title) > 200 or bundle_lib.unstorable_text(title, "t"):
        raise MessageInvalid(
            "title: at most 200 characters, no NUL", details={"field": "title", "rule": "text"}
        )
    return Conversation.objects.create(agent=agent, user=user, title=title.strip())


def _validate_text(text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise MessageInvalid(
            "text: a message needs some text.", details={"field": "text", "rule": "required"}
        )
    if len(text) > MAX_MESSAGE_CHARS:
        raise MessageInvalid(
            f"text: at most {MAX_MESSAGE_CHARS} characters (got {len(text)}).",
            details={"field": "text", "rule": "max_length", "max": MAX_MESSAGE_CHARS},
        )
    if bundle_lib.unstorable_text(text, "text") is not None:
        raise MessageInvalid(
            "text: holds a NUL or an unpaired surrogate character.",
            details={"field": "text", "rule": "storable"},
        )
    return text


def conversation_post_message(
    *,
    conversation_id: int,
    text: str,
    actor: Principal | AbstractBaseUser,
    client: openai.OpenAI | None = None,
) -> list[Message]:
    """Store the user's message and play its turn (see the module docstring)."""
    principal = as_principal(actor)
    conversation = conversation_get(principal=principal, conversation_id=conversation_id)
    text = _validate_text(text)
    with turn_lock(conversation.pk, wait_s=float(settings.COGNITION_TURN_BUDGET_SECONDS)):
        conversation.refresh_from_db()
        first = record(
            conversation,
            role=MessageRole.USER,
            trigger=TurnTrigger.USER_MESSAGE,
            text=text,
            author=principal.user if principal.is_human else None,
        )
        if not conversation.title:
            Conversation.objects.filter(pk=conversation.pk).update(title=text.strip()[:80])
        turn_run(
            conversation=conversation,
            trigger=TurnTrigger.USER_MESSAGE,
            principal=principal,
            role=ModelRole.FAST,
            client=client,
        )
        _reconcile_pending(conversation)
    return list(conversation.messages.filter(id__gte=first.pk).order_by("id"))


def _reconcile_pending(conversation: Conversation) -> None:
    """Leave awaiting_answer once the run no longer waits (answered elsewhere, timed out, …)."""
    conversation.refresh_from_db()
    if not conversation.pending_run_id:
        return
    status = (
        MotorRun.objects.filter(pk=conversation.pending_run_id)
        .values_list("status", flat=True)
        .first()
    )
    if status != "awaiting_input":
        conversation_clear_pending(conversation=conversation)


def conversation_approve_skill(
    *, conversation_id: int, skill: str, actor: AbstractBaseUser, note: str = ""
) -> Message:
    """Approve `skill` for the conversation's agent as the human who clicked (module docstring)."""
    principal = Principal.for_human(actor)
    conversation = conversation_get(principal=principal, conversation_id=conversation_id)
    detail = core_skill(
        principal=principal,
        agent=conversation.agent,
        action="approve",
        trigger=TurnTrigger.USER_MESSAGE,
        name=skill,
        note=note or "approved in the chat",
    )
    return record(
        conversation,
        role=MessageRole.EVENT,
        trigger=TurnTrigger.USER_MESSAGE,
        text=f"{actor.get_username()} approved skill {skill!r}; it is now {detail.get('status')}.",
        event={"type": "skill_approved", "skill": skill, "status": detail.get("status")},
        author=actor,
    )


def conversation_cancel_run(
    *, conversation_id: int, run_id: str, actor: AbstractBaseUser
) -> Message:
    """The runs panel's Cancel button: core.task cancel as the human who clicked, for a run of
    this conversation's agent. Returns the event message {"type": "run_cancelled"}. Domain
    errors (run not found, already finished) propagate and change nothing."""
    principal = Principal.for_human(actor)
    conversation = conversation_get(principal=principal, conversation_id=conversation_id)
    result = core_task(
        principal=principal,
        agent=conversation.agent,
        action="cancel",
        trigger=TurnTrigger.USER_MESSAGE,
        run_id=run_id,
    )
    return record(
        conversation,
        role=MessageRole.EVENT,
        trigger=TurnTrigger.USER_MESSAGE,
        text=f"{actor.get_username()} cancelled run {run_id}.",
        event={"type": "run_cancelled", "run_id": run_id, "status": result.get("status")},
        author=actor,
    )


def conversation_approve_run_action(
    *, conversation_id: int, run_id: str, actor: AbstractBaseUser
) -> Message:
    """Allow a run's pending action (awaiting_approval) as the human who clicked."""
    principal = Principal.for_human(actor)
    conversation = conversation_get(principal=principal, conversation_id=conversation_id)
    core_task(
        principal=principal,
        agent=conversation.agent,
        action="approve",
        trigger=TurnTrigger.USER_MESSAGE,
        run_id=run_id,
    )
    return record(
        conversation,
        role=MessageRole.EVENT,
        trigger=TurnTrigger.USER_MESSAGE,
        text=f"{actor.get_username()} allowed the pending action of run {run_id}.",
        event={"type": "run_action_approved", "run_id": run_id},
        author=actor,
    )


__all__ = [
    "BRAIN_HOOK_NAME",
    "_event_text",
    "as_principal",
    "brain_wake",
    "brain_wake_handle",
    "conversation_approve_run_action",
    "conversation_approve_skill",
    "conversation_cancel_run",
    "conversation_get",
    "conversation_post_message",
    "conversation_start",
    "conversations_visible_to",
    "turn_lock",
]
