"""The built-in brain's service API: conversations, user messages, approvals by click, and the
wake-up on motor_result signals.

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

    brain_wake(signal_id) -> bool
        The hook registered with cognition.brain_hooks: records a BrainWake for the signal and
        queues `brain_wake_task` at high priority once the caller's transaction commits. A
        signal seen before is a no-op (returns False).

    brain_wake_handle(signal_id=, client=None) -> str
        (The task is acks_late: a worker that dies mid-turn has its wake taken over by the
        redelivered task once the dead turn's lock expires; the event is not written twice.)
        What the task runs (callable in-process too): claims the wake, finds the conversation
        (the one that started the run, else the agent's most recent), writes the event message,
        applies the status rules, and plays one turn as the agent with trigger motor_result
        (schedule for schedule_skipped). Returns the outcome ("handled", "duplicate",
        "busy", "no_conversation", "missing").
        - completed: core.skill review for each created/updated skill (one review card each),
          then the smart model reports and asks the user to approve;
        - awaiting_input: conversation → awaiting_answer with the question, run and tool_call id;
          core.task is not offered; the user's next message is routed by the model as the answer
          (core.task respond) and the conversation returns to idle. A run waiting for
          credentials nobody has set is not a question for the chat: the event says to set them
          in the admin or the API (never in the chat) and the conversation does not wait;
        - awaiting_approval: core.task not offered; the model asks the user;
        - failed: the model is told whether a retry is possible (retryable and attempts left) and
          retries with guidance, or explains.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import openai
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from cognition.core_skill import core_skill
from cognition.core_task import core_task
from cognition.errors import AgentNotFound
from cognition.models import Agent
from cognition.principals import Principal
from cognition.selectors import agents_visible_to
from runs.llm import ModelRole
from runs.models import Attempt, MotorRun, Signal, SignalKind
from runs.mutex import redis_client
from skills import bundle as bundle_lib

from .engine import conversation_clear_pending, dispatch, record, turn_run
from .errors import ConversationBusy, ConversationNotFound, MessageInvalid
from .models import (
    BrainWake,
    Conversation,
    ConversationRun,
    ConversationStatus,
    Message,
    MessageRole,
    TurnTrigger,
    WakeState,
)

logger = logging.getLogger(__name__)

#: most characters of one user message
MAX_MESSAGE_CHARS = 8_000
#: seconds a wake-up task waits for the conversation before it is retried later
WAKE_LOCK_WAIT_S = 2.0
BRAIN_HOOK_NAME = "builtin_cognition"


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


# --- waking on signals ---------------------------------------------------------------------------


def brain_wake(signal_id: int) -> bool:
    """The brain hook: queue one wake-up task per signal, once (see the module docstring)."""
    from .tasks import brain_wake_task

    signal = Signal.objects.filter(pk=signal_id).only("id", "kind", "agent_id").first()
    if signal is None:
        return False
    try:
        with transaction.atomic():
            _, created = BrainWake.objects.get_or_create(signal_id=signal_id)
            if created:
                queue = settings.COGNITION_BRAIN_QUEUE or None
                # Priority 0 is the highest on the Redis transport: a user is waiting.
                transaction.on_commit(
                    lambda: brain_wake_task.apply_async(args=[signal_id], queue=queue, priority=0)
                )
    except IntegrityError:
        return False  # another process recorded it first
    return created


def _wake_facts(signal: Signal, run: MotorRun | None) -> dict[str, Any]:
    """The compact, JSON-safe description of a signal the brain's prompt shows."""
    payload = dict(signal.payload or {})
    if signal.kind != SignalKind.MOTOR_RESULT:
        return {"kind": signal.kind, **payload}
    facts: dict[str, Any] = {"run_id": payload.get("run_id"), "status": payload.get("status")}
    result = payload.get("result") or {}
    if run is not None:
        facts["task"] = run.task[:500]
        facts["skill"] = run.skill.name if run.skill_id and run.skill else None
        facts["review_run"] = run.review
        facts["attempt"] = run.current_attempt_index + 1
        facts["max_attempts"] = run.max_attempts
    status = facts["status"]
    if status == "completed":
        facts["summary"] = str(result.get("summary") or "")[:4000]
        skills = result.get("skills") or {}
        facts["skills"] = {
            "created": list(skills.get("created") or []),
            "updated": list(skills.get("updated") or []),
            "failed": list(skills.get("failed") or []),
        }
        facts["artifacts"] = list(result.get("artifacts") or [])[:50]
    elif status == "failed":
        failure = payload.get("failure") or {}
        facts["error"] = payload.get("error")
        facts["failure"] = failure
        facts["can_retry"] = bool(
            failure.get("retryable")
            and run is not None
            and not run.review
            and run.current_attempt_index + 1 < run.max_attempts
        )
    if status in ("completed", "failed") and run is not None and run.skill_id:
        # What the skill cortex learned from this end (seed 003 §3.4, §4.5), when it holds the
        # skill: the failure class with its recovery rule, or the retention suggestion.
        from cognition.cortex.hook import outcome_facts

        cortex = outcome_facts(signal.pk)
        if cortex is not None:
            facts["cortex"] = cortex
    if status == "awaiting_input":
        facts["question"] = payload.get("question")
        if payload.get("missing_credentials"):
            facts["missing_credentials"] = list(payload["missing_credentials"])
    elif status == "awaiting_approval":
        facts["approval"] = payload.get("approval")
    return facts


def _cortex_text(facts: dict[str, Any]) -> str:
    """The skill cortex's part of a finished run's event: the recovery rule of the failure's
    class, or the retention question."""
    cortex = facts.get("cortex")
    if not cortex:
        return ""
    skill = cortex["skill"]
    if cortex.get("retry_in_s") is not None:
        return (
            f" [skill cortex: {cortex['failure_class']} of {skill!r}. The cortex retries the run "
            f"once by itself in {cortex['retry_in_s']:g} s; tell the user, do not retry it.]"
        )
    if cortex.get("retried"):
        return (
            f" [skill cortex: {cortex['failure_class']} of {skill!r} again, after the cortex's "
            "one automatic retry. Report the failure and its class to the user; no more retries.]"
        )
    if cortex.get("recovery"):
        rule = cortex["recovery"]
        return f" [skill cortex: {cortex['failure_class']} of {skill!r}. {rule['instruction']}]"
    if cortex.get("retention_suggested"):
        return (
            f" [skill cortex: {skill!r} has proven itself; ask the user whether to keep it as a "
            "long-term skill (core_skill retain, keep true or false).]"
        )
    return f" [skill cortex: {skill!r} was released after use.]"


def _event_text(facts: dict[str, Any]) -> str:
    run_id, status = facts.get("run_id"), facts.get("status")
    if facts.get("kind") == "skill_failing":
        rate = round(100 * float(facts.get("failure_rate") or 0))
        return (
            f"Skill {facts.get('skill')!r} failed {rate}% of its last {facts.get('calls')} calls "
            f"(last error: {str(facts.get('last_error') or '')[:300]})."
        )
    if "kind" in facts:
        why = facts.get("detail") or facts.get("reason") or facts["kind"]
        return f"The schedule of skill {facts.get('skill')!r} did not start a run: {why}"
    if status == "completed":
        summary = facts.get("summary") or "(no summary)"
        return f"Run {run_id} completed: {summary}" + _cortex_text(facts)
    if status == "failed":
        message = (facts.get("error") or {}).get("message") or "failed"
        return f"Run {run_id} failed: {message}" + _cortex_text(facts)
    if status == "awaiting_input" and facts.get("missing_credentials"):
        names = ", ".join(facts["missing_credentials"])
        return (
            f"Run {run_id} waits for credentials nobody has set: {names}. Set them in the admin "
            "(Credentials) or through the API; never send a value in this chat. The run goes on "
            "by itself once they are set."
        )
    if status == "awaiting_input":
        return f"Run {run_id} asks: {facts.get('question')}"
    if status == "awaiting_approval":
        approval = facts.get("approval") or {}
        return (
            f"Run {run_id} waits for approval of {approval.get('tool')}: {approval.get('summary')}"
        )
    return f"Run {run_id} is {status}."


def _conversation_for(signal: Signal) -> Conversation | None:
    if signal.run_id:
        link = ConversationRun.objects.filter(run_id=signal.run_id).first()
        if link is not None:
            return link.conversation
    return Conversation.objects.filter(agent_id=signal.agent_id).order_by("-updated_at").first()


def _claim(signal_id: int, *, resume: bool = False) -> bool:
    """QUEUED → RUNNING. With `resume` (the caller holds the conversation's turn lock) a RUNNING
    wake is taken over too: its turn died with its worker, since a live turn holds the lock
    until after it has marked the wake DONE."""
    states = [WakeState.QUEUED, WakeState.RUNNING] if resume else [WakeState.QUEUED]
    return bool(
        BrainWake.objects.filter(signal_id=signal_id, state__in=states).update(
            state=WakeState.RUNNING
        )
    )


def _finish(signal_id: int, *, outcome: str, conversation: Conversation | None = None) -> None:
    BrainWake.objects.filter(signal_id=signal_id).update(
        state=WakeState.DONE,
        outcome=outcome,
        conversation=conversation,
        handled_at=timezone.now(),
    )


def brain_wake_handle(*, signal_id: int, client: openai.OpenAI | None = None) -> str:
    """Handle one signal once (see the module docstring)."""
    signal = Signal.objects.select_related("agent").filter(pk=signal_id).first()
    if signal is None:
        return "missing"
    BrainWake.objects.get_or_create(signal_id=signal_id)  # in-process callers skip the hook
    wake = BrainWake.objects.get(signal_id=signal_id)
    if wake.state == WakeState.DONE:
        return "duplicate"
    conversation = wake.conversation or _conversation_for(signal)
    if conversation is None:
        if _claim(signal_id, resume=True):
            _finish(signal_id, outcome="no_conversation")
            return "no_conversation"
        return "duplicate"
    try:
        with turn_lock(conversation.pk, wait_s=WAKE_LOCK_WAIT_S):
            if not _claim(signal_id, resume=True):
                return "duplicate"
            BrainWake.objects.filter(signal_id=signal_id).update(conversation=conversation)
            _wake_turn(conversation=conversation, signal=signal, client=client)
            _finish(signal_id, outcome="handled", conversation=conversation)
    except ConversationBusy:
        return "busy"
    return "handled"


def _wake_turn(*, conversation: Conversation, signal: Signal, client: openai.OpenAI | None) -> None:
    run = (
        MotorRun.objects.select_related("skill").filter(pk=signal.run_id).first()
        if signal.run_id
        else None
    )
    facts = _wake_facts(signal, run)
    is_run = signal.kind == SignalKind.MOTOR_RESULT
    trigger = TurnTrigger.MOTOR_RESULT if is_run else TurnTrigger.SCHEDULE
    agent_principal = Principal.for_agent(conversation.agent)
    # A wake taken over from a worker that died mid-turn already wrote its event (and reviews).
    resumed = Message.objects.filter(conversation=conversation, signal=signal).exists()
    if not resumed:
        record(
            conversation,
            role=MessageRole.EVENT,
            trigger=trigger,
            text=_event_text(facts),
            event={"type": signal.kind, **facts},
            signal=signal,
        )
    status = facts.get("status")
    role = ModelRole.FAST
    if is_run and status == "awaiting_input" and facts.get("missing_credentials"):
        # Not a question for the chat: the values go into the vault, and the run resumes by
        # itself when they are set, so the conversation does not wait for an answer.
        if conversation.pending_run_id == facts.get("run_id"):
            conversation_clear_pending(conversation=conversation)
    elif is_run and status == "awaiting_input" and run is not None:
        attempt = Attempt.objects.filter(run=run, index=run.current_attempt_index).first()
        Conversation.objects.filter(pk=conversation.pk).update(
            status=ConversationStatus.AWAITING_ANSWER,
            pending_run_id=run.pk,
            pending_question=str(facts.get("question") or ""),
            pending_tool_call_id=attempt.pending_tool_call_id if attempt else "",
        )
        conversation.refresh_from_db()
    elif (
        is_run
        and conversation.pending_run_id
        and conversation.pending_run_id == facts.get("run_id")
    ):
        conversation_clear_pending(conversation=conversation)
    if is_run and status == "completed":
        skills = facts.get("skills") or {}
        names = list(dict.fromkeys([*skills.get("created", []), *skills.get("updated", [])]))
        if names:
            role = ModelRole.SMART
            if not resumed:
                _review_skills(
                    conversation=conversation,
                    principal=agent_principal,
                    names=names,
                    run_id=str(facts.get("run_id") or ""),
                )
    turn_run(
        conversation=conversation,
        trigger=trigger,
        principal=agent_principal,
        wake=facts,
        role=role,
        client=client,
    )


def _review_skills(
    *, conversation: Conversation, principal: Principal, names: list[str], run_id: str
) -> None:
    """core.skill review for each new or updated skill, recorded as the brain's own tool calls,
    plus one review card (event) per skill for the chat page, naming the run that wrote it."""
    calls = [
        {
            "id": f"review_{conversation.pk}_{index}_{name}"[:200],
            "name": "core_skill",
            "arguments": f'{{"action": "review", "name": "{name}"}}',
        }
        for index, name in enumerate(names)
    ]
    record(
        conversation, role=MessageRole.ASSISTANT, trigger=TurnTrigger.MOTOR_RESULT, tool_calls=calls
    )
    results = []
    for call, name in zip(calls, names, strict=True):
        result = dispatch(
            conversation=conversation,
            principal=principal,
            trigger=TurnTrigger.MOTOR_RESULT,
            name="core_skill",
            arguments={"action": "review", "name": name},
        )
        record(
            conversation,
            role=MessageRole.TOOL,
            trigger=TurnTrigger.MOTOR_RESULT,
            tool_call_id=call["id"],
            tool_name="core_skill",
            tool_result=result,
        )
        results.append((name, result))
    for name, result in results:
        if not result.get("ok"):
            continue
        review = result["result"]
        record(
            conversation,
            role=MessageRole.EVENT,
            trigger=TurnTrigger.MOTOR_RESULT,
            text=f"Skill {name!r} is {review.get('status')} and waits for your approval.",
            event={
                "type": "skill_review",
                "skill": name,
                "run_id": run_id,
                "status": review.get("status"),
                "reviewed_hash": review.get("reviewed_hash"),
                "facts": review.get("facts"),
                "proposal": review.get("proposal"),
            },
        )
