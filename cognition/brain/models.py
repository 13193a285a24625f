"""The built-in brain's conversations (registered in the cognition app through cognition.models).

A `Conversation` is one human talking to one of their agents. Its `Message` rows are the whole
transcript: what the user typed, what the brain answered, every core.* tool call and its result,
and the events that woke the brain (a motor_result signal, a skipped schedule, an approval made
by a click). A `BrainWake` records each signal handed to the brain, so a signal that arrives twice
(delivery is at least once) starts one turn only.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ConversationStatus(models.TextChoices):
    IDLE = "idle", "Idle"
    #: a motor run asked a question; the user's next message is the answer (seed 001)
    AWAITING_ANSWER = "awaiting_answer", "Awaiting answer"


class MessageRole(models.TextChoices):
    USER = "user", "User"
    ASSISTANT = "assistant", "Assistant"
    TOOL = "tool", "Tool result"
    EVENT = "event", "System event"


class TurnTrigger(models.TextChoices):
    """What started a turn; the consent gate and the tool filter read it (seed 000)."""

    USER_MESSAGE = "user_message", "User message"
    MOTOR_RESULT = "motor_result", "Motor result"
    SCHEDULE = "schedule", "Schedule"


class Conversation(models.Model):
    agent = models.ForeignKey(
        "cognition.Agent", on_delete=models.CASCADE, related_name="conversations"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    title = models.CharField(max_length=200, blank=True, default="")
    status = models.CharField(
        max_length=20, choices=ConversationStatus.choices, default=ConversationStatus.IDLE
    )
    # The motor question being waited on (status awaiting_answer), kept in the brain's context.
    pending_run_id = models.CharField(max_length=32, blank=True, default="")
    pending_question = models.TextField(blank=True, default="")
    pending_tool_call_id = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at", "-id"]
        indexes = [models.Index(fields=["agent", "-updated_at"])]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status="idle", pending_run_id="")
                | models.Q(status="awaiting_answer") & ~models.Q(pending_run_id=""),
                name="conversation_pending_run_iff_awaiting_answer",
            )
        ]

    def __str__(self) -> str:
        return f"conversation {self.pk} with {self.agent_id and self.agent.name}"


class Message(models.Model):
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages"
    )
    role = models.CharField(max_length=16, choices=MessageRole.choices)
    trigger = models.CharField(max_length=16, choices=TurnTrigger.choices)
    text = models.TextField(blank=True, default="")
    # assistant: the calls the model asked for ([{id, name, arguments}]).
    tool_calls = models.JSONField(default=list, blank=True)
    # tool: which call this answers, its tool, and the dispatcher's {ok, result | error}.
    tool_call_id = models.CharField(max_length=200, blank=True, default="")
    tool_name = models.CharField(max_length=64, blank=True, default="")
    tool_result = models.JSONField(null=True, blank=True)
    # event: {"type": motor_result | skill_review | skill_approved | schedule | turn_error, …}
    event = models.JSONField(null=True, blank=True)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The human who wrote a user message or clicked a button.",
    )
    signal = models.ForeignKey(
        "runs.Signal", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["conversation", "id"])]

    def __str__(self) -> str:
        return f"{self.role} message {self.pk}"


class ConversationRun(models.Model):
    """A run the brain started from this conversation: its signals wake this conversation, and
    the chat page shows its progress."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="runs")
    run = models.OneToOneField(
        "runs.MotorRun", on_delete=models.CASCADE, related_name="conversation_link"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"run {self.run_id} of conversation {self.conversation_id}"


class WakeState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"


class BrainWake(models.Model):
    """One signal handed to the built-in brain: unique per signal, so a repeat is a no-op."""

    signal = models.OneToOneField(
        "runs.Signal", on_delete=models.CASCADE, related_name="brain_wake"
    )
    conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.SET_NULL, related_name="wakes"
    )
    state = models.CharField(max_length=16, choices=WakeState.choices, default=WakeState.QUEUED)
    outcome = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    handled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"wake for signal {self.signal_id} ({self.state})"
