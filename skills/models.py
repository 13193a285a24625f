"""Skills, their immutable versions and files, per-agent policies and the policy audit trail.

Fields, constraints, state enums and django-fsm transitions only. Every state change happens in a
skills service (the conventions are in `skills.services`), which locks the row, calls a
transition, saves and writes a `PolicyAuditEvent`.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone
from django_fsm import FSMField, FSMModelMixin, transition

SKILL_NAME_MAX_LENGTH = 64  # characters, Agent Skills spec
CONTENT_HASH_MAX_LENGTH = 71  # "sha256:" + 64 hex characters
SKILL_FILE_PATH_MAX_LENGTH = 1024  # characters, relative POSIX path inside a skill
SKILL_SOURCE_MAX_LENGTH = 2000  # characters
#: The source of skills written here: pasted (admin, API) or learned by a run.
LOCAL_SOURCE = "local"


class PolicyStatus(models.TextChoices):
    """Where a skill stands for one agent (seed 000 "Status States")."""

    PENDING_REVIEW = "pending_review", "Pending review"
    REVIEWED = "reviewed", "Reviewed"
    APPROVED = "approved", "Approved"
    NEEDS_REAPPROVAL = "needs_reapproval", "Needs re-approval"


class AuditAction(models.TextChoices):
    """What a `PolicyAuditEvent` records."""

    POLICY_CREATED = "policy_created", "Policy created"
    CONTENT_CHANGED = "content_changed", "Content changed"
    REVIEWED = "reviewed", "Reviewed"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    HASH_MISMATCH = "hash_mismatch", "Hash mismatch at load"
    ROLLED_BACK = "rolled_back", "Rolled back"
    POLICY_UPDATED = "policy_updated", "Policy updated"
    SKILL_INSTALLED = "skill_installed", "Skill installed"
    SKILL_DELETED = "skill_deleted", "Skill deleted"


class Skill(models.Model):
    """A named skill. Its content lives in immutable `SkillVersion` rows.

    Its identity is its name *and* its `source`: an import brings a new version only when it
    comes from the same source (see `skills.imports`).
    """

    name = models.CharField(max_length=SKILL_NAME_MAX_LENGTH, unique=True)
    description = models.TextField(blank=True, default="")
    # Where the skill comes from: "local" (pasted, or learned by a run), the absolute path of
    # the directory it was imported from, an archive's file name, or what the importer stated
    # (a registry URL, a publisher). Empty: not recorded (rows older than this field whose
    # first version said nothing).
    source = models.CharField(max_length=SKILL_SOURCE_MAX_LENGTH, blank=True, default="")
    current_version = models.ForeignKey(
        "skills.SkillVersion",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(name__regex=r"^[a-z][a-z0-9-]*[a-z0-9]$"),
                name="skill_name_install_pattern",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class SkillVersion(models.Model):
    """One immutable snapshot of a skill's files. Never updated after creation."""

    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    content_hash = models.CharField(max_length=CONTENT_HASH_MAX_LENGTH)
    description = models.TextField(blank=True, default="")
    frontmatter = models.JSONField(default=dict, blank=True)
    # {"source": URL or path, "fetched_at": ISO-8601}
    provenance = models.JSONField(default=dict, blank=True)
    # {"run_id", "timestamp", "changed_files", "deleted_files"}; empty when not extracted
    extracted_from = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_by_label = models.CharField(max_length=200, blank=True, default="")
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["skill", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["skill", "number"], name="skill_version_number_unique"),
            models.CheckConstraint(
                condition=models.Q(number__gte=1), name="skill_version_number_gte_1"
            ),
            models.CheckConstraint(
                condition=models.Q(content_hash__regex=r"^sha256:[0-9a-f]{64}$"),
                name="skill_version_content_hash_format",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.skill.name} v{self.number}"


class SkillFile(models.Model):
    """One file of a version: relative path, size, digest and bytes (so every host sees it)."""

    version = models.ForeignKey(SkillVersion, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=SKILL_FILE_PATH_MAX_LENGTH)
    size = models.PositiveBigIntegerField(help_text="bytes")
    sha256 = models.CharField(max_length=64)
    data = models.BinaryField()

    class Meta:
        ordering = ["version", "path"]
        constraints = [
            models.UniqueConstraint(fields=["version", "path"], name="skill_file_path_unique"),
            models.CheckConstraint(
                condition=~models.Q(path="policy.json"), name="skill_file_not_policy_json"
            ),
            models.CheckConstraint(
                condition=models.Q(sha256__regex=r"^[0-9a-f]{64}$"),
                name="skill_file_sha256_format",
            ),
        ]

    def __str__(self) -> str:
        return self.path


class Policy(FSMModelMixin, models.Model):
    """What one agent may do with one skill (the seeds' policy.json), and its approval state.

    `credential_values` holds Fernet ciphertext of a JSON object (see `skills.crypto`); it is
    written and read only through services/selectors and never rendered.
    """

    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="policies")
    # Given as a string: skills must not import the cognition app (dependency direction).
    agent = models.ForeignKey(
        "cognition.Agent", on_delete=models.CASCADE, related_name="skill_policies"
    )
    status = FSMField(
        max_length=32,
        choices=PolicyStatus.choices,
        default=PolicyStatus.PENDING_REVIEW,
        protected=True,
    )
    allowed_domains = models.JSONField(default=list, blank=True)
    required_credentials = models.JSONField(default=list, blank=True)
    tools = models.JSONField(default=list, blank=True)
    dependencies = models.JSONField(default=list, blank=True)
    inputs = models.JSONField(default=dict, blank=True, help_text="JSON schema of the inputs.")
    # The programs the skill's bash calls may run (plain names present in the sandbox); empty:
    # the sandbox's default allowlist. Checked by skills.toolpolicy.shell when saved, enforced
    # by the sandbox's bash validator and its PATH of links.
    shell_allowlist = models.JSONField(default=list, blank=True)
    credential_values = models.TextField(blank=True, default="", editable=False)

    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    approved_at = models.DateTimeField(null=True, blank=True)
    approved_content_hash = models.CharField(
        max_length=CONTENT_HASH_MAX_LENGTH, blank=True, default=""
    )
    approved_version = models.ForeignKey(
        SkillVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    review_facts = models.JSONField(default=dict, blank=True)
    reviewed_at = models.DateTimeField(null=True, blank=True)
    reviewed_hash = models.CharField(max_length=CONTENT_HASH_MAX_LENGTH, blank=True, default="")
    rejection_note = models.TextField(blank=True, default="")

    # Disabled by staff: the skill stays installed and the policy keeps its status and approval,
    # but no run of it starts for this agent until it is enabled again (skills.disabling).
    disabled_at = models.DateTimeField(null=True, blank=True)
    disabled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    disabled_reason = models.TextField(blank=True, default="")

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["skill__name", "agent_id"]
        verbose_name_plural = "policies"
        permissions = [("approve_policy", "Can approve a skill policy")]
        constraints = [
            models.UniqueConstraint(
                fields=["skill", "agent"], name="policy_one_per_skill_and_agent"
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=PolicyStatus.values), name="policy_status_valid"
            ),
            # An approved policy always says which content it approved.
            models.CheckConstraint(
                condition=~models.Q(status=PolicyStatus.APPROVED)
                | ~models.Q(approved_content_hash=""),
                name="policy_approved_has_hash",
            ),
        ]

    def __str__(self) -> str:
        # Never include credential values here: __str__ feeds repr(), logs and the admin.
        return f"{self.skill_id and self.skill.name} for {self.agent_id and self.agent.name} ({self.status})"

    # --- transitions (in-memory only; services save and audit) ---------------------------------

    @transition(field=status, source="*", target=PolicyStatus.PENDING_REVIEW)
    def content_changed(self) -> None:
        """New content was installed for this agent (extraction, import, rollback)."""
        self.reviewed_at = None
        self.reviewed_hash = ""
        self.review_facts = {}

    # From reviewed too: a review of content that is no longer current is redone (the service
    # refuses to redo a review that is still current).
    @transition(
        field=status,
        source=[PolicyStatus.PENDING_REVIEW, PolicyStatus.REVIEWED, PolicyStatus.NEEDS_REAPPROVAL],
        target=PolicyStatus.REVIEWED,
    )
    def review(self, *, facts: dict[str, object], content_hash: str, at: object) -> None:
        """The deterministic review ran over `content_hash`."""
        self.review_facts = facts
        self.reviewed_hash = content_hash
        self.reviewed_at = at

    @transition(
        field=status,
        source=[PolicyStatus.REVIEWED, PolicyStatus.NEEDS_REAPPROVAL],
        target=PolicyStatus.APPROVED,
    )
    def approve(self, *, by: object, at: object, content_hash: str, version: SkillVersion) -> None:
        """A human approved this content for this agent (approval, re-approval, onboarding)."""
        self.approved_by = by
        self.approved_at = at
        self.approved_content_hash = content_hash
        self.approved_version = version
        self.rejection_note = ""

    @transition(
        field=status,
        source=[
            PolicyStatus.PENDING_REVIEW,
            PolicyStatus.REVIEWED,
            PolicyStatus.NEEDS_REAPPROVAL,
        ],
        target=PolicyStatus.PENDING_REVIEW,
    )
    def reject(self, *, note: str) -> None:
        """A human declined; the skill stays unapproved with the note."""
        self.rejection_note = note

    @transition(field=status, source=PolicyStatus.APPROVED, target=PolicyStatus.NEEDS_REAPPROVAL)
    def hash_mismatch(self) -> None:
        """Content loaded for execution no longer matches the approved hash."""

    @transition(field=status, source="*", target=PolicyStatus.APPROVED)
    def restore_approved(
        self, *, by: object, at: object, content_hash: str, version: SkillVersion
    ) -> None:
        """Rollback to content this agent's policy approved before (per the audit trail)."""
        self.approved_by = by
        self.approved_at = at
        self.approved_content_hash = content_hash
        self.approved_version = version


class PolicyAuditEvent(models.Model):
    """Append-only record of every transition and policy edit.

    Outlives the policy, skill and agent it names: the foreign keys become NULL on deletion and
    the plain `skill_name` / `agent_ref_id` / `agent_name` columns keep the facts. `changes`
    holds field names and old/new values, and for credentials only names and "[set]".
    """

    policy = models.ForeignKey(
        Policy, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_events"
    )
    skill = models.ForeignKey(
        Skill, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_events"
    )
    skill_name = models.CharField(max_length=SKILL_NAME_MAX_LENGTH)
    agent = models.ForeignKey(
        "cognition.Agent",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="skill_audit_events",
    )
    agent_ref_id = models.BigIntegerField(null=True, blank=True)
    agent_name = models.CharField(max_length=100, blank=True, default="")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    actor_label = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    action = models.CharField(max_length=32, choices=AuditAction.choices)
    from_status = models.CharField(max_length=32, blank=True, default="")
    to_status = models.CharField(max_length=32, blank=True, default="")
    reason = models.TextField(blank=True, default="")
    content_hash = models.CharField(max_length=CONTENT_HASH_MAX_LENGTH, blank=True, default="")
    version_number = models.PositiveIntegerField(null=True, blank=True)
    changes = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["agent_ref_id", "skill_name", "action"])]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(action__in=AuditAction.values), name="audit_action_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.skill_name} {self.action} by {self.actor_label}"


# The skill index's tables (skills.index); imported here so the app registers them.
from skills.index.models import SkillEmbedding, SkillIndexEntry, SkillIndexState  # noqa: E402, F401


class VersionProbe(models.Model):
    """What running a version in a throwaway sandbox showed, for its review: the tools its MCP
    server listed (name, description, input schema, declared semantics) and its test results.

    Written by whoever ran it (SkillForge after its tests); never an approval.
    """

    version = models.OneToOneField(SkillVersion, on_delete=models.CASCADE, related_name="probe")
    tools = models.JSONField(default=list, blank=True)
    tests_passed = models.BooleanField()
    test_output = models.TextField(blank=True, default="")
    checked_by = models.CharField(max_length=200)
    checked_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"probe of {self.version}"
