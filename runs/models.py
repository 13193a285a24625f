"""The Motor Cortex runtime's ledger: runs, attempts, steps, approvals and the signal outbox.

Fields, constraints, state enums and django-fsm transitions only. Transitions change in-memory
fields; `runs.services` locks, saves, audits and schedules follow-up work.
"""

from __future__ import annotations

import secrets
from datetime import datetime

from django.db import models
from django.utils import timezone
from django_fsm import FSMField, FSMModelMixin, transition

#: iterations of an attempt unless the caller asks for another cap (seed 001 core.act default)
DEFAULT_MAX_ITERATIONS = 20
#: hard ceiling on iterations of one attempt (seed 001 Phase 2: history compaction and the rolling
#: summary every ROLLING_SUMMARY_EVERY iterations, runs.compaction, keep the prompt bounded)
MAX_ITERATIONS_CEILING = 50
#: iterations granted to a retry attempt (seed 001 attempt model)
RETRY_MAX_ITERATIONS = 15
#: an agentic run never runs longer than this, in seconds (seed 001 core.act)
MAX_RUN_TIMEOUT_S = 600
#: what a skill review run may use (seed 000 skill_review), and its iteration cap
REVIEW_TOOLS: tuple[str, ...] = ("read", "list", "glob", "grep")
REVIEW_MAX_ITERATIONS = 10


def new_run_id() -> str:
    """A short public run id such as ``run_3f9a0c1b2d4e`` (48 random bits)."""
    return "run_" + secrets.token_hex(6)


class RunStatus(models.TextChoices):
    CREATED = "created", "Created"
    RUNNING = "running", "Running"
    AWAITING_INPUT = "awaiting_input", "Awaiting input"
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


#: statuses that hold the per-agent mutex (a paused run still owns the agent's hands)
ACTIVE_STATUSES: tuple[str, ...] = (
    RunStatus.CREATED,
    RunStatus.RUNNING,
    RunStatus.AWAITING_INPUT,
    RunStatus.AWAITING_APPROVAL,
)
TERMINAL_STATUSES: tuple[str, ...] = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


class AttemptStatus(models.TextChoices):
    RUNNING = "running", "Running"
    AWAITING_INPUT = "awaiting_input", "Awaiting input"
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"


class FailureCategory(models.TextChoices):
    TOOL_FAILURE = "tool_failure", "Tool failure"
    MODEL_FAILURE = "model_failure", "Model failure"
    BUDGET_EXHAUSTED = "budget_exhausted", "Budget exhausted"
    INVALID_TASK = "invalid_task", "Invalid task"
    CANCELLED = "cancelled", "Cancelled"
    TIMEOUT = "timeout", "Timeout"


class Trigger(models.TextChoices):
    USER_MESSAGE = "user_message", "User message"
    MOTOR_RESULT = "motor_result", "Motor result"
    SCHEDULE = "schedule", "Schedule"
    API = "api", "API"


class StepState(models.TextChoices):
    INTENT = "intent", "Intent (written before the call runs)"
    DONE = "done", "Done (result recorded)"


class ApprovalStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    CONSUMED = "consumed", "Consumed"
    EXPIRED = "expired", "Expired"
    REJECTED = "rejected", "Rejected"


class SignalKind(models.TextChoices):
    MOTOR_RESULT = "motor_result", "Motor result"
    #: a scheduled occurrence that did not start a run, with the reason (never silent)
    SCHEDULE_SKIPPED = "schedule_skipped", "Schedule skipped"
    #: a deployed MCP skill fails too many of its latest calls; its owner may improve it
    SKILL_FAILING = "skill_failing", "Skill failing"


class SignalPriority(models.IntegerChoices):
    HIGH = 1, "High"
    NORMAL = 2, "Normal"


class MotorRun(FSMModelMixin, models.Model):
    """One delegated agentic task, with everything it was granted spelled out explicitly."""

    id = models.CharField(primary_key=True, max_length=32, default=new_run_id, editable=False)
    # Given as a string: runs must not import the cognition app (dependency direction).
    agent = models.ForeignKey(
        "cognition.Agent", on_delete=models.PROTECT, related_name="motor_runs"
    )
    skill = models.ForeignKey(
        "skills.Skill", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    skill_version = models.ForeignKey(
        "skills.SkillVersion",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="runs",
    )
    task = models.TextField()
    skill_instructions = models.TextField(blank=True, default="")
    skill_candidates = models.TextField(
        blank=True,
        default="",
        help_text=(
            "A run bound to no skill: the skills that may fit its task, one line each (the "
            "skill index's top-k); the model reads one in full with skill_describe."
        ),
    )
    tools = models.JSONField(default=list, blank=True, help_text="Granted tools, aliases expanded.")
    allowed_domains = models.JSONField(default=list, blank=True)
    credential_names = models.JSONField(
        default=list, blank=True, help_text="Names only; values never leave the vault."
    )
    missing_credentials = models.JSONField(
        default=list,
        blank=True,
        help_text=(
            "While awaiting input: the credential names nobody has set; the run resumes when "
            "they are set in the vault (never through an answer)."
        ),
    )
    workspace = models.CharField(max_length=500, blank=True, default="")
    saved_credentials = models.TextField(
        blank=True,
        default="",
        editable=False,
        help_text=(
            "Values the run saved with save_credential, encrypted (skills.crypto); merged into "
            "the new skill's policy at extraction, cleared when the run ends."
        ),
    )

    status = FSMField(
        max_length=32, choices=RunStatus.choices, default=RunStatus.CREATED, protected=True
    )
    trigger = models.CharField(max_length=16, choices=Trigger.choices, default=Trigger.API)
    parent_run = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="child_runs"
    )
    approval_required = models.BooleanField(default=False)
    review = models.BooleanField(
        default=False,
        help_text="A skill review run: read-only tools, no network, no host-side tools.",
    )
    timeout_s = models.PositiveIntegerField(default=MAX_RUN_TIMEOUT_S)
    max_iterations = models.PositiveSmallIntegerField(default=DEFAULT_MAX_ITERATIONS)
    max_attempts = models.PositiveSmallIntegerField(default=3)
    current_attempt_index = models.PositiveSmallIntegerField(default=0)
    result = models.JSONField(null=True, blank=True)

    # Execution lease: whoever holds the highest token may write; see runs.lease.
    lease_token = models.BigIntegerField(default=0)
    lease_owner = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # When the lease was last released (or the run created): the reaper's clock for lost wake-ups.
    idle_since = models.DateTimeField(null=True, blank=True)
    # How many times a slice was started on this run without finishing (poison detection).
    redelivery_count = models.PositiveIntegerField(default=0)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    # seconds spent paused for a human (an answer, an approval, a credential): not counted
    # against timeout_s, which budgets the run's own work
    waited_s = models.PositiveIntegerField(default=0)
    iterations = models.PositiveIntegerField(
        default=0,
        help_text="Model replies recorded over all attempts (the energy formula's count).",
    )
    energy_cost = models.FloatField(
        default=0.0,
        help_text="Energy this run took from its agent: the base at creation plus each paid "
        "iteration (0.0-1.0 scale).",
    )
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # The authority behind the Redis fast path: one active run per agent.
            models.UniqueConstraint(
                fields=["agent"],
                condition=models.Q(status__in=ACTIVE_STATUSES),
                name="motorrun_one_active_per_agent",
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=RunStatus.values), name="motorrun_status_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(max_iterations__gte=1)
                & models.Q(max_iterations__lte=MAX_ITERATIONS_CEILING),
                name="motorrun_max_iterations_1_to_50",
            ),
            models.CheckConstraint(
                condition=models.Q(timeout_s__gte=1) & models.Q(timeout_s__lte=MAX_RUN_TIMEOUT_S),
                name="motorrun_timeout_1_to_600_s",
            ),
            models.CheckConstraint(
                condition=models.Q(max_attempts__gte=1), name="motorrun_max_attempts_positive"
            ),
        ]
        # Not the lease's expiry: every fenced write renews it, and an indexed column that
        # changes makes PostgreSQL write a new entry into each of the table's indexes (no HOT
        # update). The reaper's runnable runs, found by status, are at most one per agent.
        indexes = [models.Index(fields=["status"], name="motorrun_status")]

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    # --- transitions (in-memory only; services save, audit and enqueue) ------------------------

    @transition(field=status, source=RunStatus.CREATED, target=RunStatus.RUNNING)
    def start(self, *, at: datetime) -> None:
        self.started_at = at

    @transition(field=status, source=RunStatus.RUNNING, target=RunStatus.AWAITING_INPUT)
    def await_input(self) -> None:
        """The motor asked the user a question; the loop pauses."""

    @transition(field=status, source=RunStatus.RUNNING, target=RunStatus.AWAITING_APPROVAL)
    def await_approval(self) -> None:
        """An action waits for the owner's approval; the loop pauses."""

    @transition(
        field=status,
        source=[RunStatus.AWAITING_INPUT, RunStatus.AWAITING_APPROVAL],
        target=RunStatus.RUNNING,
    )
    def resume(self) -> None:
        """An answer or a decision arrived; the loop continues where it paused.

        The pause (since the run was last saved, when it started waiting) is added to waited_s,
        so time spent waiting for a human does not use up the run's time budget.
        """
        if self.updated_at is not None:
            paused = (timezone.now() - self.updated_at).total_seconds()
            self.waited_s += max(0, int(paused))

    @transition(field=status, source=RunStatus.RUNNING, target=RunStatus.COMPLETED)
    def complete(self, *, result: dict[str, object], at: datetime) -> None:
        self.result = result
        self.completed_at = at
        self.lease_expires_at = None

    @transition(field=status, source=list(ACTIVE_STATUSES), target=RunStatus.FAILED)
    def fail(self, *, result: dict[str, object], at: datetime) -> None:
        self.result = result
        self.completed_at = at
        self.lease_expires_at = None

    @transition(field=status, source=list(ACTIVE_STATUSES), target=RunStatus.CANCELLED)
    def cancel(self, *, result: dict[str, object], at: datetime) -> None:
        self.result = result
        self.completed_at = at
        self.lease_expires_at = None

    @transition(
        field=status,
        source=RunStatus.FAILED,
        target=RunStatus.RUNNING,
        conditions=[lambda run: run.current_attempt_index + 1 < run.max_attempts],
    )
    def retry(self) -> None:
        """A failed run gets a new attempt (clean messages, recovery context)."""
        self.current_attempt_index += 1
        self.completed_at = None
        self.result = None


class Attempt(FSMModelMixin, models.Model):
    """One try at a run: its own conversation, step cursor and failure summary."""

    run = models.ForeignKey(MotorRun, on_delete=models.CASCADE, related_name="attempts")
    index = models.PositiveSmallIntegerField()
    status = FSMField(
        max_length=32,
        choices=AttemptStatus.choices,
        default=AttemptStatus.RUNNING,
        protected=True,
    )
    messages = models.JSONField(
        default=list, blank=True, help_text="The chat of this attempt (placeholders only)."
    )
    iteration = models.PositiveSmallIntegerField(
        default=0, help_text="Step cursor: LLM calls recorded so far in this attempt."
    )
    max_iterations = models.PositiveSmallIntegerField(default=DEFAULT_MAX_ITERATIONS)
    llm_calls = models.PositiveIntegerField(
        default=0, help_text="LLM answers received for this attempt (its replies and its hint)."
    )
    prompt_tokens = models.PositiveBigIntegerField(
        default=0, help_text="Prompt tokens those answers reported (their usage)."
    )
    completion_tokens = models.PositiveBigIntegerField(
        default=0, help_text="Completion tokens those answers reported (their usage)."
    )
    energy_cost = models.FloatField(
        default=0.0, help_text="Energy its iterations past the free ones took (no base)."
    )
    recovery_context = models.JSONField(null=True, blank=True)
    failure = models.JSONField(null=True, blank=True)
    pending_question = models.TextField(blank=True, default="")
    pending_tool_call_id = models.CharField(max_length=200, blank=True, default="")
    started_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "index"]
        constraints = [
            models.UniqueConstraint(fields=["run", "index"], name="attempt_unique_index_per_run"),
            models.CheckConstraint(
                condition=models.Q(max_iterations__gte=1)
                & models.Q(max_iterations__lte=MAX_ITERATIONS_CEILING),
                name="attempt_max_iterations_1_to_50",
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=AttemptStatus.values), name="attempt_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id} attempt {self.index + 1} ({self.status})"

    @transition(field=status, source=AttemptStatus.RUNNING, target=AttemptStatus.AWAITING_INPUT)
    def await_input(self, *, question: str, tool_call_id: str) -> None:
        self.pending_question = question
        self.pending_tool_call_id = tool_call_id

    @transition(field=status, source=AttemptStatus.RUNNING, target=AttemptStatus.AWAITING_APPROVAL)
    def await_approval(self, *, tool_call_id: str) -> None:
        self.pending_tool_call_id = tool_call_id

    @transition(
        field=status,
        source=[AttemptStatus.AWAITING_INPUT, AttemptStatus.AWAITING_APPROVAL],
        target=AttemptStatus.RUNNING,
    )
    def resume(self) -> None:
        self.pending_question = ""
        self.pending_tool_call_id = ""

    @transition(field=status, source=AttemptStatus.RUNNING, target=AttemptStatus.COMPLETED)
    def complete(self, *, at: datetime) -> None:
        self.completed_at = at

    @transition(
        field=status,
        source=[
            AttemptStatus.RUNNING,
            AttemptStatus.AWAITING_INPUT,
            AttemptStatus.AWAITING_APPROVAL,
        ],
        target=AttemptStatus.FAILED,
    )
    def fail(self, *, failure: dict[str, object], at: datetime) -> None:
        self.failure = failure
        self.completed_at = at
        self.pending_question = ""
        self.pending_tool_call_id = ""


class Step(models.Model):
    """One tool call of the trace. Written as `intent` before the call runs, `done` after."""

    # no index of its own: step_unique_position's (attempt, iteration, call_index) serves it
    attempt = models.ForeignKey(
        Attempt, on_delete=models.CASCADE, related_name="steps", db_index=False
    )
    iteration = models.PositiveSmallIntegerField(help_text="The LLM call that requested it.")
    call_index = models.PositiveSmallIntegerField(help_text="Position among that call's tools.")
    tool_call_id = models.CharField(max_length=200)
    tool = models.CharField(max_length=64)
    arguments = models.JSONField(
        default=dict, blank=True, help_text="As the model sent them: placeholders, never values."
    )
    state = models.CharField(max_length=8, choices=StepState.choices, default=StepState.INTENT)
    result = models.JSONField(null=True, blank=True, help_text="The tool result envelope.")
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    model = models.CharField(max_length=200, blank=True, default="")
    reasoning = models.TextField(blank=True, default="")
    lease_token = models.BigIntegerField(help_text="Fencing token of the slice that wrote it.")
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["attempt", "iteration", "call_index"]
        constraints = [
            models.UniqueConstraint(
                fields=["attempt", "iteration", "call_index"], name="step_unique_position"
            ),
            models.CheckConstraint(
                condition=models.Q(state=StepState.INTENT) | models.Q(result__isnull=False),
                name="step_done_has_result",
            ),
        ]

    def __str__(self) -> str:
        return (
            f"{self.attempt} iteration {self.iteration} call {self.call_index + 1}: "
            f"{self.tool} ({self.state})"
        )


class ApprovalRequest(FSMModelMixin, models.Model):
    """An owner's go-ahead for exactly one action: {run, step, hash of the canonical call}."""

    run = models.ForeignKey(MotorRun, on_delete=models.CASCADE, related_name="approvals")
    step = models.ForeignKey(
        Step, null=True, blank=True, on_delete=models.CASCADE, related_name="approvals"
    )
    action_hash = models.CharField(max_length=71, help_text="sha256: + hex of the canonical call.")
    action = models.JSONField(default=dict, blank=True, help_text="{tool, arguments} approved.")
    summary = models.TextField(blank=True, default="")
    used_at = models.DateTimeField(
        null=True, blank=True, help_text="When the approved action was started (at most once)."
    )
    status = FSMField(
        max_length=16,
        choices=ApprovalStatus.choices,
        default=ApprovalStatus.PENDING,
        protected=True,
    )
    expires_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.CharField(
        max_length=200,
        blank=True,
        default="",
        help_text="Who approved or rejected it (the actor: user:<name>, agent:<name>, reaper).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["run"],
                condition=models.Q(status=ApprovalStatus.PENDING),
                name="approval_one_pending_per_run",
            ),
        ]

    def __str__(self) -> str:
        return f"approval {self.pk} for {self.run_id} ({self.status})"

    @transition(field=status, source=ApprovalStatus.PENDING, target=ApprovalStatus.CONSUMED)
    def consume(self, *, at: datetime, by: str = "") -> None:
        self.decided_at = at
        self.decided_by = by[:200]

    @transition(field=status, source=ApprovalStatus.PENDING, target=ApprovalStatus.EXPIRED)
    def expire(self, *, at: datetime, by: str = "") -> None:
        self.decided_at = at
        self.decided_by = by[:200]

    @transition(field=status, source=ApprovalStatus.PENDING, target=ApprovalStatus.REJECTED)
    def reject(self, *, at: datetime, by: str = "") -> None:
        self.decided_at = at
        self.decided_by = by[:200]


class Signal(models.Model):
    """Outbox row for the brain side, written in the transaction that caused it.

    `seq` numbers an agent's signals 1, 2, 3, … and is taken under a per-agent row lock held to
    commit (runs.outbox), so an agent's signals become visible in `seq` order: a reader that keeps
    the last `seq` it processed as its cursor never skips one. The global `id` gives no such
    promise across transactions.
    """

    id = models.BigAutoField(primary_key=True)
    kind = models.CharField(max_length=32, choices=SignalKind.choices)
    run = models.ForeignKey(
        MotorRun, null=True, blank=True, on_delete=models.CASCADE, related_name="signals"
    )
    agent = models.ForeignKey("cognition.Agent", on_delete=models.CASCADE, related_name="signals")
    seq = models.BigIntegerField(help_text="Position in the agent's signal stream (1, 2, 3, …).")
    payload = models.JSONField()
    priority = models.PositiveSmallIntegerField(
        choices=SignalPriority.choices, default=SignalPriority.HIGH
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["agent", "id"])]
        constraints = [
            models.UniqueConstraint(fields=["agent", "seq"], name="signal_unique_agent_seq")
        ]

    def __str__(self) -> str:
        return f"signal {self.id} {self.kind} #{self.seq} for agent {self.agent_id and self.agent.name}"


class SignalCounter(models.Model):
    """The last `Signal.seq` handed out per agent; its row lock orders an agent's signals."""

    agent = models.OneToOneField(
        "cognition.Agent", primary_key=True, on_delete=models.CASCADE, related_name="+"
    )
    last_seq = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"agent {self.agent_id and self.agent.name}: last signal #{self.last_seq}"


class RunEvent(models.Model):
    """Audit trail of run state changes: who moved which run from what to what."""

    run = models.ForeignKey(MotorRun, on_delete=models.CASCADE, related_name="events")
    from_status = models.CharField(max_length=32, blank=True, default="")
    to_status = models.CharField(max_length=32)
    actor = models.CharField(max_length=200, help_text="worker:<owner>, agent:<id>, user:<id>.")
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.run_id}: {self.from_status or '-'} -> {self.to_status}"


class Artifact(models.Model):
    """A file a run produced, kept outside its workspace (runs.artifacts) for a retention period.

    `path` is the file's place in the workspace (relative, "/"-separated), `name` its base name;
    the bytes live under MOTOR_ARTIFACTS_DIR/<run id>/artifacts/<path>.
    """

    run = models.ForeignKey(MotorRun, on_delete=models.CASCADE, related_name="artifacts")
    name = models.CharField(max_length=255)
    path = models.CharField(max_length=1000)
    size = models.BigIntegerField(help_text="Bytes.")
    sha256 = models.CharField(max_length=64, help_text="Hex digest of the bytes.")
    mime = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "path"]
        constraints = [
            models.UniqueConstraint(fields=["run", "path"], name="artifact_unique_path_per_run"),
            models.CheckConstraint(condition=models.Q(size__gte=0), name="artifact_size_positive"),
        ]
        indexes = [models.Index(fields=["created_at"])]

    def __str__(self) -> str:
        return f"{self.run_id}:{self.path}"


class PendingWakeup(models.Model):
    """A run's wake-up message the broker refused (it was unreachable): the wake-up sweep
    (`runs.wakeups`) sends it again once the broker is back. One row per run and token."""

    run = models.ForeignKey(MotorRun, on_delete=models.CASCADE, related_name="+")
    token = models.BigIntegerField(help_text="The lease token the message is meant for.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "token"], name="pendingwakeup_one_per_token")
        ]

    def __str__(self) -> str:
        return f"{self.run_id} @ token {self.token}"


from runs.audit_models import AuditPurgeWindow, ToolCallAudit  # noqa: E402, F401 - registered here
from runs.browser_models import BrowserSelector, BrowserTime  # noqa: E402, F401 - registered here
from runs.host_models import RunPlacement, WorkerHost  # noqa: E402, F401 - registered here
from runs.layer_models import DependencyLayer, LayerStatus  # noqa: E402, F401 - registered here
