"""The SkillForge flow: one durable state machine per skill being written, edited or improved
(re-exported by forge.models, where Django looks for them).

Fields, constraints, the state enum and django-fsm transitions only. Transitions change in-memory
fields; `forge.services` locks the row, calls one, saves it and writes a `FlowEvent` row.
"""

from __future__ import annotations

import secrets

from django.db import models
from django.utils import timezone
from django_fsm import FSMField, FSMModelMixin, transition

#: attempts at generating code that passes its tests before the flow gives up (seed 002 §6)
MAX_ATTEMPTS = 3


def new_flow_id() -> str:
    """A short public flow id such as ``forge_3f9a0c1b2d4e`` (48 random bits)."""
    return "forge_" + secrets.token_hex(6)


class FlowState(models.TextChoices):
    DESIGNING = "designing", "Designing"
    GENERATING = "generating", "Generating"
    TESTING = "testing", "Testing"
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    ACQUIRING_CREDENTIALS = "acquiring_credentials", "Acquiring credentials"
    DEPLOYING = "deploying", "Deploying"
    COMPLETE = "complete", "Complete"
    FAILED = "failed", "Failed"


#: states a flow never leaves
TERMINAL_STATES = frozenset({FlowState.COMPLETE, FlowState.FAILED})
#: every state but the terminal ones
ACTIVE_STATES = tuple(s for s in FlowState if s not in TERMINAL_STATES)
#: states in which a worker has work to do (a waiting flow is woken by an answer or a decision)
WORKER_STATES = (
    FlowState.DESIGNING,
    FlowState.GENERATING,
    FlowState.TESTING,
    FlowState.ACQUIRING_CREDENTIALS,
    FlowState.DEPLOYING,
)


class FlowMode(models.TextChoices):
    CREATE = "create", "Create a new skill"
    EDIT = "edit", "Edit an existing skill"
    IMPROVE = "improve", "Improve a failing skill"


class ForgeFlow(FSMModelMixin, models.Model):
    """One skill being generated (or changed), tested, approved and deployed.

    `files` holds the last generated bundle ({path: text}); `test_report` what its test run
    showed; `skill_version` the version it was imported as once its tests passed. The lease
    columns fence the worker that advances the flow (see `forge.lease`).
    """

    id = models.CharField(primary_key=True, max_length=32, default=new_flow_id, editable=False)
    agent = models.ForeignKey(
        "cognition.Agent", on_delete=models.CASCADE, related_name="forge_flows"
    )
    mode = models.CharField(max_length=16, choices=FlowMode.choices, default=FlowMode.CREATE)
    state = FSMField(
        max_length=32, choices=FlowState.choices, default=FlowState.DESIGNING, protected=True
    )
    #: the skill's name: given at start (edit, improve) or taken from the generated manifest
    skill_name = models.CharField(max_length=64, blank=True, default="")
    request = models.TextField(help_text="What the tool should do, in the requester's words.")
    requirements = models.JSONField(default=list, blank=True)
    #: domains the tool may reach, as the requester answered; None: not asked yet
    allowed_domains = models.JSONField(null=True, blank=True, default=None)
    #: vault entry names the tool needs (never values); None: not asked yet
    credentials = models.JSONField(null=True, blank=True, default=None)
    pending_question = models.TextField(blank=True, default="")
    #: which question is pending: "domains" or "credentials"
    pending_topic = models.CharField(max_length=16, blank=True, default="")
    attempt = models.PositiveSmallIntegerField(default=0)
    files = models.JSONField(default=dict, blank=True)
    #: what the model is told about the previous attempt (test output, parser reason)
    feedback = models.TextField(blank=True, default="")
    test_report = models.JSONField(default=dict, blank=True)
    approval = models.JSONField(default=dict, blank=True)
    base_version = models.ForeignKey(
        "skills.SkillVersion", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    skill_version = models.ForeignKey(
        "skills.SkillVersion", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    #: what the flow last told its requester (question, approval summary, result, failure)
    message = models.TextField(blank=True, default="")
    error = models.TextField(blank=True, default="")
    started_by = models.CharField(max_length=200)
    lease_token = models.PositiveBigIntegerField(default=0)
    lease_owner = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["agent", "state"])]
        constraints = [
            # One flow at a time per skill: an edit of a skill being forged is refused.
            models.UniqueConstraint(
                fields=["skill_name"],
                condition=~models.Q(state__in=[FlowState.COMPLETE, FlowState.FAILED])
                & ~models.Q(skill_name=""),
                name="forge_one_active_flow_per_skill",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.skill_name or '(unnamed)'} ({self.state})"

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    # --- transitions (in-memory only) ----------------------------------------------------------

    @transition(field=state, source=FlowState.DESIGNING, target=FlowState.DESIGNING)
    def ask(self, *, topic: str, question: str) -> None:
        self.pending_topic = topic
        self.pending_question = question
        self.message = question

    @transition(field=state, source=FlowState.DESIGNING, target=FlowState.DESIGNING)
    def answer(self) -> None:
        self.pending_topic = ""
        self.pending_question = ""

    @transition(field=state, source=FlowState.DESIGNING, target=FlowState.GENERATING)
    def design_done(self) -> None:
        self.attempt = 1

    @transition(field=state, source=FlowState.GENERATING, target=FlowState.TESTING)
    def generated(self, *, files: dict[str, str]) -> None:
        self.files = files

    @transition(
        field=state, source=[FlowState.GENERATING, FlowState.TESTING], target=FlowState.GENERATING
    )
    def regenerate(self, *, feedback: str) -> None:
        self.attempt += 1
        self.feedback = feedback

    @transition(field=state, source=FlowState.TESTING, target=FlowState.AWAITING_APPROVAL)
    def await_approval(self, *, summary: str) -> None:
        self.message = summary

    @transition(
        field=state,
        source=[FlowState.TESTING, FlowState.AWAITING_APPROVAL],
        target=FlowState.ACQUIRING_CREDENTIALS,
    )
    def acquire_credentials(self, *, message: str) -> None:
        self.message = message

    @transition(
        field=state,
        source=[FlowState.TESTING, FlowState.AWAITING_APPROVAL, FlowState.ACQUIRING_CREDENTIALS],
        target=FlowState.DEPLOYING,
    )
    def deploy(self) -> None:
        """Approved, every credential set: the version goes live next."""

    @transition(field=state, source=FlowState.DEPLOYING, target=FlowState.COMPLETE)
    def complete(self, *, message: str) -> None:
        self.message = message
        self.finished_at = timezone.now()
        self._release()

    @transition(field=state, source=list(ACTIVE_STATES), target=FlowState.FAILED)
    def fail(self, *, error: str, message: str) -> None:
        self.error = error
        self.message = message
        self.pending_question = ""
        self.pending_topic = ""
        self.finished_at = timezone.now()
        self._release()

    def _release(self) -> None:
        self.lease_owner = ""
        self.lease_expires_at = None


class FlowEvent(models.Model):
    """Audit row of one move of a flow (also a stay in designing: a question asked or answered)."""

    flow = models.ForeignKey(ForgeFlow, on_delete=models.CASCADE, related_name="events")
    from_state = models.CharField(max_length=32, blank=True, default="")
    to_state = models.CharField(max_length=32)
    actor = models.CharField(max_length=200)
    reason = models.TextField(blank=True, default="")
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.flow_id}: {self.from_state or '-'} -> {self.to_state}"
