"""The brain side's identities."""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.db.models.functions import Lower
from django.utils import timezone

from skills.toolpolicy import trust


class TrustLevel(models.TextChoices):
    """How autonomously an agent's runs act (seed 004; the rules are `skills.toolpolicy`)."""

    OBSERVE = trust.TrustLevel.OBSERVE.value, "Observe (read only)"
    SUGGEST = trust.TrustLevel.SUGGEST.value, "Suggest (every call approved)"
    SUPERVISED_AUTO = trust.TrustLevel.SUPERVISED_AUTO.value, "Supervised auto (high risk approved)"
    BOUNDED_AUTO = trust.TrustLevel.BOUNDED_AUTO.value, "Bounded auto"


TOKEN_PREFIX = "mc_"  # noqa: S105 - a public marker, not a secret


def hash_token(raw: str) -> str:
    """sha256 hex of an API token; tokens are random (256 bits), so no slow hash is needed."""
    return hashlib.sha256(raw.encode()).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


class Agent(models.Model):
    """An agent identity (a "brain") that delegates tasks to Motor Cortex."""

    name = models.CharField(max_length=100, unique=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="agents"
    )
    token_hash = models.CharField(max_length=64, blank=True, default="", db_index=True)
    token_prefix = models.CharField(
        max_length=12, blank=True, default="", help_text="First characters, to recognise a token."
    )
    token_created_at = models.DateTimeField(null=True, blank=True)
    token_revoked_at = models.DateTimeField(null=True, blank=True)
    energy = models.FloatField(default=1.0, help_text="0.0 (exhausted) to 1.0 (rested).")
    # When `energy` was last written; regeneration since then is added on read (cognition.energy).
    last_energy_at = models.DateTimeField(null=True, blank=True)
    # Changed only through cognition.trust.agent_set_trust_level (staff, audited).
    trust_level = models.CharField(
        max_length=16, choices=TrustLevel.choices, default=TrustLevel.SUPERVISED_AUTO
    )
    trusted_for_relayed_consent = models.BooleanField(
        default=False,
        help_text="Lets this agent's token pass the consent gate on user_message triggers.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # Signal delivery by webhook (cognition.delivery): the URL signals are POSTed to, and the
    # signing secret, encrypted at rest (skills.crypto) and shown once when generated.
    webhook_url = models.URLField(
        max_length=500, blank=True, default="", help_text="Signals are POSTed here (empty: none)."
    )
    webhook_secret = models.TextField(
        blank=True, default="", editable=False, help_text="Encrypted at rest; never rendered."
    )
    webhook_secret_created_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["name"]
        permissions = [("change_trust_level", "Can change an agent's trust level")]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(energy__gte=0.0) & models.Q(energy__lte=1.0),
                name="agent_energy_between_0_and_1",
            ),
            models.CheckConstraint(
                condition=models.Q(trust_level__in=TrustLevel.values),
                name="agent_trust_level_valid",
            ),
        ]

    def __str__(self) -> str:
        return self.name


# Vault names are environment-variable names without the seeds' VAULT_ prefix.
CREDENTIAL_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"


class Credential(models.Model):
    """A user credential in an agent's vault. `value` holds ciphertext only (see cognition.vault)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="credentials")
    name = models.CharField(max_length=64)
    value = models.TextField(help_text="Encrypted at rest; never rendered.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["agent_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "name"], name="credential_unique_per_agent"),
            # Names match in any case (cognition.vault): `api_key` and `API_KEY` are one name.
            models.UniqueConstraint(
                "agent", Lower("name"), name="credential_unique_per_agent_any_case"
            ),
            models.CheckConstraint(
                condition=models.Q(name__regex=CREDENTIAL_NAME_PATTERN),
                name="credential_name_is_env_name",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.agent_id and self.agent.name}:{self.name}"


class PersonalToken(models.Model):
    """A human user's API token; only its sha256 is stored, the raw value is shown once."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="personal_tokens"
    )
    name = models.CharField(max_length=100)
    token_hash = models.CharField(max_length=64, unique=True)
    token_prefix = models.CharField(max_length=12)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["user_id", "-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.token_prefix}…)"


#: how long a replayed Idempotency-Key returns the first response, seconds (24 h): the default
#: of settings.MOTOR_IDEMPOTENCY_TTL_SECONDS
IDEMPOTENCY_TTL_S = 24 * 3600


class IdempotencyRecord(models.Model):
    """The first response to a POST that created something, kept for replays of its key.

    `scope` is the principal the key belongs to ("agent:<id>" or "user:<id>"): two callers may
    use the same key independently. `fingerprint` is the sha256 of the request (path, agent and
    canonical JSON body); the same key with another fingerprint is a conflict.
    """

    scope = models.CharField(max_length=64)
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)
    response_status = models.PositiveSmallIntegerField()
    response_body = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["scope", "key"], name="idempotency_key_unique_per_scope"
            )
        ]

    def __str__(self) -> str:
        return f"{self.scope}:{self.key}"


# The built-in brain's models live in their own module; importing them here registers them in
# the cognition app (one app, one migration history).
from .brain.models import (  # noqa: E402, F401
    BrainWake,
    Conversation,
    ConversationRun,
    ConversationStatus,
    Message,
    MessageRole,
    TurnTrigger,
    WakeState,
)

# --- schedules (recurring skill runs through django-celery-beat) --------------------------------


class ScheduleOutcome(models.TextChoices):
    STARTED = "started", "Started"
    SKIPPED = "skipped", "Skipped"
    FAILED = "failed", "Failed"


class ScheduleSkipReason(models.TextChoices):
    """Why a fire started no run; the check that refused it, in the order they are made."""

    SKILL_NOT_FOUND = "skill_not_found", "Skill not found"
    NOT_APPROVED = "not_approved", "Skill not approved"
    HASH_CHANGED = "hash_changed", "Skill content changed since approval"
    CREDENTIALS_MISSING = "credentials_missing", "Required credentials missing"
    AGENT_BUSY = "agent_busy", "Agent busy with another run"
    ENERGY_TOO_LOW = "energy_too_low", "Energy too low"
    ACT_FAILED = "act_failed", "core.act refused the run"


class Schedule(models.Model):
    """A recurring run of an agent's skill. Its twin django-celery-beat `PeriodicTask` row (kept
    in sync by cognition.schedules) is what beat reads; it calls `schedule_fire_task(id)`.

    Exactly one of `crontab` (five fields: minute hour day-of-month month day-of-week, read in
    `timezone`) and `interval_seconds` is set. The skill is kept by name: a skill deleted and
    re-imported under the same name is the same schedule's skill, one that is gone is a skip.
    """

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="schedules")
    skill_name = models.CharField(max_length=64)
    task = models.TextField()
    inputs = models.JSONField(default=dict, blank=True)
    crontab = models.CharField(max_length=200, blank=True, default="")
    interval_seconds = models.PositiveIntegerField(null=True, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    enabled = models.BooleanField(default=True)
    periodic_task = models.OneToOneField(
        "django_celery_beat.PeriodicTask",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        editable=False,
        related_name="motor_schedule",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        editable=False,
        related_name="motor_schedules",
    )
    created_by_label = models.CharField(max_length=200, blank=True, default="", editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["agent_id", "id"]
        constraints = [
            models.CheckConstraint(
                condition=(
                    (~models.Q(crontab="") & models.Q(interval_seconds__isnull=True))
                    | (models.Q(crontab="") & models.Q(interval_seconds__gt=0))
                ),
                name="schedule_crontab_xor_interval",
            )
        ]

    def __str__(self) -> str:
        return f"{self.skill_name} for {self.agent_id and self.agent.name} ({self.when})"

    @property
    def when(self) -> str:
        if self.crontab:
            return f"cron {self.crontab} {self.timezone}"
        return f"every {self.interval_seconds} s"


class ScheduleOccurrence(models.Model):
    """One time a schedule fired: the run it started, or why it started none."""

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="occurrences")
    fired_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=ScheduleOutcome.choices)
    reason = models.CharField(
        max_length=32, choices=ScheduleSkipReason.choices, blank=True, default=""
    )
    detail = models.TextField(blank=True, default="")
    run = models.ForeignKey(
        "runs.MotorRun",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="schedule_occurrences",
    )
    signal = models.ForeignKey(
        "runs.Signal", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["-fired_at", "-id"]
        indexes = [models.Index(fields=["schedule", "-fired_at"], name="occurrence_by_schedule")]

    def __str__(self) -> str:
        return (
            f"{self.schedule_id and self.schedule.skill_name} {self.outcome} {self.reason}".strip()
        )


# --- signal delivery (cognition.delivery) -----------------------------------------------------


class DeliveryTarget(models.TextChoices):
    WEBHOOK = "webhook", "Webhook"
    HOOK = "hook", "Brain hook"
    #: the signal was planned but its agent had no webhook and no hook was registered
    NONE = "none", "No receiver"


class DeliveryState(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERING = "delivering", "Delivering"
    RETRYING = "retrying", "Retrying"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"
    SKIPPED = "skipped", "Skipped"


class SignalDelivery(models.Model):
    """The delivery of one signal to one receiver: the agent's webhook or one brain hook.

    Rows are created when the signal is first dispatched (a signal without rows was never
    dispatched; the sweeper finds it). `attempts` counts started attempts; the state machine is
    pending → delivering → delivered | retrying → delivering … → failed after the last attempt.
    """

    signal = models.ForeignKey("runs.Signal", on_delete=models.CASCADE, related_name="deliveries")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="signal_deliveries")
    target = models.CharField(max_length=16, choices=DeliveryTarget.choices)
    #: the hook's name for target=hook; empty otherwise
    name = models.CharField(max_length=100, blank=True, default="")
    state = models.CharField(
        max_length=16, choices=DeliveryState.choices, default=DeliveryState.PENDING
    )
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    #: while delivering: when the running attempt is considered lost (its worker died)
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "signal deliveries"
        constraints = [
            models.UniqueConstraint(
                fields=["signal", "target", "name"], name="signal_delivery_unique_target"
            )
        ]
        indexes = [models.Index(fields=["state", "next_attempt_at"])]

    def __str__(self) -> str:
        label = f"{self.target}:{self.name}" if self.name else self.target
        return f"signal {self.signal_id} -> {label} ({self.state})"


class AttemptOutcome(models.TextChoices):
    IN_FLIGHT = "in_flight", "In flight"
    DELIVERED = "delivered", "Delivered"
    RETRY = "retry", "Failed, will retry"
    FAILED = "failed", "Failed, final"
    LOST = "lost", "Lost (worker died)"


class DeliveryAttempt(models.Model):
    """One try at delivering a signal: what was called, what came back, what happens next."""

    delivery = models.ForeignKey(
        SignalDelivery, on_delete=models.CASCADE, related_name="attempt_log"
    )
    signal = models.ForeignKey(
        "runs.Signal", on_delete=models.CASCADE, related_name="delivery_attempts"
    )
    number = models.PositiveSmallIntegerField(help_text="1 for the first attempt.")
    target = models.CharField(max_length=16, choices=DeliveryTarget.choices)
    url = models.CharField(max_length=500, blank=True, default="", help_text="Webhook URL.")
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True, default="")
    outcome = models.CharField(
        max_length=16, choices=AttemptOutcome.choices, default=AttemptOutcome.IN_FLIGHT
    )
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    next_retry_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["delivery", "number"], name="delivery_attempt_unique_number"
            )
        ]

    def __str__(self) -> str:
        return f"signal {self.signal_id} attempt {self.number} ({self.outcome})"


class TrustLevelChange(models.Model):
    """Append-only record of every change of an agent's trust level (database triggers refuse
    UPDATE and DELETE). Keeps the agent's name, so it outlives the agent."""

    agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.SET_NULL, related_name="trust_changes"
    )
    agent_name = models.CharField(max_length=100)
    from_level = models.CharField(max_length=16)
    to_level = models.CharField(max_length=16, choices=TrustLevel.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_label = models.CharField(max_length=200)
    reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.agent_name}: {self.from_level} → {self.to_level} by {self.actor_label}"


# Skill sources and acquisitions live in cognition.sources; importing them here registers them
# in the cognition app.
# The skill cortex's models live in their own module (seed 003); imported here to register them
# in the cognition app.
from .cortex.models import (  # noqa: E402, F401
    Cortex,
    CortexCandidate,
    CortexFollowUp,
    CortexLesson,
    CortexOutcome,
    CortexRegion,
    FailureClass,
    LessonKind,
)
from .sources.models import (  # noqa: E402, F401
    AcquisitionStatus,
    SkillAcquisition,
    SkillSource,
    SourceKind,
)
