"""The registry of dependency layers: one row per (skill version, dependency list).

The row is the lock that lets concurrent runs needing the same layer install it once (the one
that claims the row builds; the others wait for its status), and what the garbage collector
reads. The layer's files live in MOTOR_DEPENDENCY_LAYERS_DIR/<key>, which exists only complete:
a build writes into a temporary directory and renames it there (runs.layers).
"""

from __future__ import annotations

from django.db import models


class LayerStatus(models.TextChoices):
    BUILDING = "building", "Building"
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"


class DependencyLayer(models.Model):
    key = models.CharField(
        max_length=64,
        unique=True,
        help_text="sha256 hex of the skill version's content hash and the sorted packages.",
    )
    # Given as a string: runs may use skills, never the other way round.
    skill_version = models.ForeignKey(
        "skills.SkillVersion",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    packages = models.JSONField(default=list, help_text="Pinned entries, sorted.")
    status = models.CharField(max_length=16, choices=LayerStatus.choices)
    build_serial = models.PositiveIntegerField(
        default=0, help_text="Counts claims to build; a builder's writes name its own."
    )
    builder = models.CharField(max_length=200, blank=True, default="")
    build_expires_at = models.DateTimeField(
        null=True, blank=True, help_text="A build not finished by then may be taken over."
    )
    message = models.TextField(
        blank=True, default="", help_text="The installer's output of the last build (tail)."
    )
    install_ms = models.PositiveIntegerField(default=0)
    size_bytes = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=LayerStatus.values),
                name="dependencylayer_status_valid",
            )
        ]

    def __str__(self) -> str:
        return f"layer {self.key[:12]} ({self.status}): {', '.join(self.packages)}"
