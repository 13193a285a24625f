"""The skill cortex of an agent, in the database (seed 003): regions with their sensory pattern,
candidate skills per region with their learned weight, and prefrontal lessons.

Registered in the cognition app (imported by cognition.models). Fields only; every change goes
through cognition.cortex.learning / cleanup, one transaction each, under the agent's Cortex row
lock (cognition.cortex.locking).
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

#: seed 003 Phase 4.1: a skill enters the cortex with this weight
INITIAL_WEIGHT = 0.5
#: seed 003 §4.3: a new lesson's confidence
LESSON_INITIAL_CONFIDENCE = 0.6


class Cortex(models.Model):
    """One agent's cortex: the row every update of it locks first. `generation` counts updates
    (an update bumps it before reading, which is also how SQLite's write lock is taken up front).
    `rebuilt_at` is set when a corrupt cortex was cleared and rebuilt (boundary rule 6)."""

    agent = models.OneToOneField("cognition.Agent", on_delete=models.CASCADE, related_name="cortex")
    generation = models.PositiveBigIntegerField(default=0)
    rebuilt_at = models.DateTimeField(null=True, blank=True)
    rebuilt_reason = models.CharField(max_length=300, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "cortices"

    def __str__(self) -> str:
        return f"cortex of {self.agent_id and self.agent.name}"


class CortexRegion(models.Model):
    """A capability area (`name`, e.g. "sales-report") and its sensory pattern: the signal
    words (lowercase, entity-free, at most 10) a task is matched against."""

    cortex = models.ForeignKey(Cortex, on_delete=models.CASCADE, related_name="regions")
    name = models.CharField(max_length=100)
    signals = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["cortex_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cortex", "name"], name="cortex_region_name_unique"),
        ]

    def __str__(self) -> str:
        return self.name


class CortexCandidate(models.Model):
    """A skill the cortex holds for a region, with what every use of it taught (Phase 4.1)."""

    region = models.ForeignKey(CortexRegion, on_delete=models.CASCADE, related_name="candidates")
    # A deleted skill leaves the cortex with it.
    skill = models.ForeignKey("skills.Skill", on_delete=models.CASCADE, related_name="+")
    #: where the skill was acquired from (a registry's name, "local", a URL)
    source = models.CharField(max_length=200, blank=True, default="")
    #: the version the cortex learned on (reflex locks it: another version resets reflex)
    version = models.PositiveIntegerField()
    weight = models.FloatField(default=INITIAL_WEIGHT)
    successes = models.PositiveIntegerField(default=0)
    failures = models.PositiveIntegerField(default=0)
    #: when each success of the last 7 days happened (ISO-8601, oldest first); its length is the
    #: formula's successes_in_last_7d
    recent_successes = models.JSONField(default=list, blank=True)
    consecutive_successes = models.PositiveIntegerField(default=0)
    last_used = models.DateTimeField(null=True, blank=True)
    reflex = models.BooleanField(default=False)
    #: "read:…", "write:…", "delete:…", "shell:…", "credential:…" (cognition.cortex.plan)
    side_effects = models.JSONField(default=list, blank=True)
    skill_md_chars = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["region_id", "-weight", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["region", "skill"], name="cortex_candidate_one_per_region"
            ),
            models.CheckConstraint(
                condition=models.Q(weight__gte=0.0) & models.Q(weight__lte=1.0),
                name="cortex_candidate_weight_0_to_1",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.skill_id and self.skill.name} v{self.version} ({self.weight:.2f})"

    @property
    def successes_last_7d(self) -> int:
        return len(self.recent_successes or [])


class LessonKind(models.TextChoices):
    """The three structured lessons of seed 003 §4.3 (nothing free-form)."""

    DEPENDENCY_WARNING = "dependency_warning", "Dependency warning"
    SKILL_QUALITY_WARNING = "skill_quality_warning", "Skill quality warning"
    ENV_READY = "env_ready", "Environment ready"


class CortexLesson(models.Model):
    """A prefrontal lesson. dependency_warning: `region`, `key` (the dependency), `action`;
    skill_quality_warning: `skill_name`, `detail`; env_ready: `region`, `key` (a credential)."""

    cortex = models.ForeignKey(Cortex, on_delete=models.CASCADE, related_name="lessons")
    kind = models.CharField(max_length=32, choices=LessonKind.choices)
    # A lesson linked to a region goes when the region is pruned.
    region = models.ForeignKey(
        CortexRegion, null=True, blank=True, on_delete=models.CASCADE, related_name="lessons"
    )
    skill_name = models.CharField(max_length=100, blank=True, default="")
    key = models.CharField(max_length=100, blank=True, default="")
    action = models.CharField(max_length=64, blank=True, default="")
    detail = models.CharField(max_length=300, blank=True, default="")
    confidence = models.FloatField(default=LESSON_INITIAL_CONFIDENCE)
    validations = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["cortex_id", "-confidence", "id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(kind__in=LessonKind.values), name="cortex_lesson_kind_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(confidence__gte=0.0) & models.Q(confidence__lte=1.0),
                name="cortex_lesson_confidence_0_to_1",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.key or self.skill_name} ({self.confidence:.1f})"


class FailureClass(models.TextChoices):
    """Seed 003 §3.4's failure types, with Phase 4.1's decay for each (see learning.DECAY)."""

    DEPENDENCY_MISSING = "dependency_missing", "Dependency missing"
    API_ERROR = "api_error", "API error"
    AUTH_ERROR = "auth_error", "Auth error"
    TASK_MISMATCH = "task_mismatch", "Task mismatch"
    RUNTIME_ERROR = "runtime_error", "Runtime error"


class CortexOutcome(models.Model):
    """One run outcome the cortex learned from: the ledger that makes learning idempotent (a
    redelivered outcome finds its key and changes nothing) and the history the admin shows.
    `key` is "signal:<id>" for an outcome learned from a motor_result signal."""

    cortex = models.ForeignKey(Cortex, on_delete=models.CASCADE, related_name="outcomes")
    key = models.CharField(max_length=100)
    run_id = models.CharField(max_length=32, blank=True, default="")
    skill_name = models.CharField(max_length=100)
    region_name = models.CharField(max_length=100, blank=True, default="")
    success = models.BooleanField()
    failure_class = models.CharField(
        max_length=32, choices=FailureClass.choices, blank=True, default=""
    )
    weight_before = models.FloatField()
    weight_after = models.FloatField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["cortex", "key"], name="cortex_outcome_key_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.skill_name}: {'success' if self.success else self.failure_class}"


class FollowUpAction(models.TextChoices):
    """What the cortex does after a learned outcome, outside the learning's transaction."""

    #: §4.5: disable the agent's policy for the skill (skills.disabling.policy_release)
    RELEASE = "release", "Release the skill"
    #: §3.4 api_error: a new attempt of the failed run, once, after the wait
    RETRY = "retry", "Retry the run once"


class CortexFollowUp(models.Model):
    """An outbox row: something an outcome obliges the cortex to do, written in the same
    transaction as the learning, so a worker dying after that commit loses nothing. Carried out
    at most once (`done_at`, set in the transaction that does the work) by whichever comes
    first: the hook right after learning, the follow-up task, or the periodic sweep."""

    cortex = models.ForeignKey(Cortex, on_delete=models.CASCADE, related_name="follow_ups")
    outcome = models.ForeignKey(CortexOutcome, on_delete=models.CASCADE, related_name="follow_ups")
    action = models.CharField(max_length=16, choices=FollowUpAction.choices)
    skill_name = models.CharField(max_length=100)
    run_id = models.CharField(max_length=32, blank=True, default="")
    #: not before this moment (a retry waits MOTOR_CORTEX_RETRY_WAIT_SECONDS)
    due_at = models.DateTimeField(default=timezone.now)
    #: how many times carrying it out was begun
    tries = models.PositiveIntegerField(default=0)
    done_at = models.DateTimeField(null=True, blank=True)
    #: what happened: "released", "already_released", "superseded: …", "retried",
    #: "not_retried: …"
    result = models.CharField(max_length=300, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["outcome", "action"], name="cortex_follow_up_once_per_outcome"
            ),
            models.CheckConstraint(
                condition=models.Q(action__in=FollowUpAction.values),
                name="cortex_follow_up_action_valid",
            ),
        ]
        indexes = [models.Index(fields=["done_at", "due_at"])]

    def __str__(self) -> str:
        return f"{self.action} {self.skill_name} ({'done' if self.done_at else 'pending'})"
