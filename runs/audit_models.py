"""The per-call audit trail: one append-only row for every tool invocation of every run.

Rows outlive the run, the agent and the skill they name (plain columns keep the facts; the
foreign keys become NULL). Database triggers refuse UPDATE and DELETE; the only rows that can
be deleted are older than an `AuditPurgeWindow` the retention purge opens (runs.audit).
Imported by `runs.models` so Django registers them.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

#: characters of a call's output kept in its audit row
OUTPUT_SUMMARY_CHARS = 500


class ToolCallAudit(models.Model):
    """One tool call: who asked, what was decided, what it took and what came back (redacted)."""

    # Each call inserts a row: its indexes are the ones a query uses (Meta.indexes), without
    # the text-pattern twins Django adds to an indexed CharField (nothing filters these by
    # prefix), and agent_ref_id is served by the index that starts with it.
    run = models.ForeignKey(
        "runs.MotorRun",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
    )
    run_ref = models.CharField(max_length=32)
    attempt = models.PositiveIntegerField(help_text="The attempt's number within the run.")
    iteration = models.PositiveIntegerField()
    call_index = models.PositiveIntegerField()
    agent = models.ForeignKey(
        "cognition.Agent", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    agent_ref_id = models.BigIntegerField()
    agent_name = models.CharField(max_length=100)
    skill_name = models.CharField(max_length=64, blank=True, default="")
    skill_version_hash = models.CharField(max_length=71, blank=True, default="")
    tool = models.CharField(max_length=64)
    inputs = models.JSONField(default=dict, help_text="The call's arguments, redacted.")
    output_summary = models.TextField(blank=True, default="", help_text="Redacted, truncated.")
    success = models.BooleanField()
    error_code = models.CharField(max_length=64, blank=True, default="")
    duration_ms = models.PositiveIntegerField(default=0)
    decision = models.CharField(max_length=32, help_text="The rule of the policy decision.")
    approval_required = models.BooleanField(default=False)
    approved_by = models.CharField(max_length=200, blank=True, default="")
    trust_level = models.CharField(max_length=16)
    actor = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "tool call audit row"
        indexes = [
            models.Index(fields=["agent_ref_id", "-created_at", "-id"]),
            models.Index(fields=["run"], name="toolcallaudit_run"),
            models.Index(fields=["run_ref"], name="toolcallaudit_run_ref"),
            models.Index(fields=["skill_name"], name="toolcallaudit_skill_name"),
            models.Index(fields=["tool"], name="toolcallaudit_tool"),
        ]

    def __str__(self) -> str:
        outcome = "ok" if self.success else (self.error_code or "failed")
        return f"{self.run_ref} #{self.iteration}.{self.call_index} {self.tool}: {outcome}"


class AuditPurgeWindow(models.Model):
    """While a row exists, audit rows created before its `before` may be deleted. The purge
    inserts one, deletes and removes it in the same transaction."""

    before = models.DateTimeField()

    def __str__(self) -> str:
        return f"purge before {self.before.isoformat()}"
