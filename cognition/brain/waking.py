"""The built-in brain's wake-up on signals (motor_result, schedule_skipped, skill_failing).

Interface:

    brain_wake(signal_id) -> bool
        The hook registered with cognition.brain_hooks: records a BrainWake for the signal and
        queues `brain_wake_task` at high priority once the caller's transaction commits. When
        no conversation would hear of the signal (none started the run and the agent has none),
        the wake is recorded as done with outcome "no_conversation" at once and no task is
        queued: the task would find the same and do nothing else. A signal seen before is a
        no-op (returns False).

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
from typing import Any

import openai
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from cognition.principals import Principal
from runs.llm import ModelRole
from runs.models import Attempt, MotorRun, Signal, SignalKind

from .engine import conversation_clear_pending, dispatch, record, turn_lock, turn_run
from .errors import ConversationBusy
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

#: seconds a wake-up task waits for the conversation before it is retried later
WAKE_LOCK_WAIT_S = 2.0
BRAIN_HOOK_NAME = "builtin_cognition"


def brain_wake(signal_id: int) -> bool:
    """The brain hook: record one wake per signal, and queue its task when a conversation would
    hear of it; once (see the module docstring)."""
    from .tasks import brain_wake_task

    # One read: does the signal exist, and would any conversation hear of it (the one that
    # started the run, or any of the agent's: the choices of `_conversation_for`)?
    heard = (
        Signal.objects.filter(pk=signal_id)
        .annotate(
            heard=Exists(ConversationRun.objects.filter(run_id=OuterRef("run_id")))
            | Exists(Conversation.objects.filter(agent_id=OuterRef("agent_id")))
        )
        .values_list("heard", flat=True)
        .first()
    )
    if heard is None:
        return False
    # Nothing to tell anyone: the wake is done here, with the outcome its task would record.
    silent = not heard
    fields = (
        {"state": WakeState.DONE, "outcome": "no_conversation", "handled_at": timezone.now()}
        if silent
        else {}
    )
    try:
        with transaction.atomic():
            BrainWake.objects.create(signal_id=signal_id, **fields)
            if not silent:
                queue = settings.COGNITION_BRAIN_QUEUE or None
                # Priority 0 is the highest on the Redis transport: a user is waiting.
                transaction.on_commit(
                    lambda: brain_wake_task.apply_async(args=[signal_id], queue=queue, priority=0)
                )
    except IntegrityError:
        return False  # seen before (a repeated delivery, or another process first)
    return True


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
