"""The tables of skill acquisition: where skills may come from, and each proposal made from them.

Imported by `cognition.models` so Django registers them with the cognition app.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

SOURCE_NAME_MAX_LENGTH = 40
SOURCE_LOCATION_MAX_LENGTH = 2000


class SourceKind(models.TextChoices):
    """How a source is read."""

    DIRECTORY = "directory", "Local directory or git checkout"
    HTTP = "http", "HTTP registry (ClawHub-style API)"


class SkillSource(models.Model):
    """A place the agent may acquire skills from.

    A directory source is a path on this host holding skill directories (a registry's git
    checkout works as it is); an HTTP source is a registry's base URL answering
    `GET /api/v1/search?q=&limit=` and `GET /api/v1/download?slug=&version=` (the shape of
    ClawHub's API). `reviewed` says whether the registry reviews what it publishes: candidates
    from an unreviewed source are marked so, and such sources are searched only when the
    reviewed ones found fewer than two candidates (seed 003 Phase 1.3).
    """

    name = models.SlugField(
        max_length=SOURCE_NAME_MAX_LENGTH,
        unique=True,
        help_text="Short name; a skill whose name is taken by another source is installed "
        "as <skill>-<this name>.",
    )
    kind = models.CharField(max_length=16, choices=SourceKind.choices)
    location = models.CharField(
        max_length=SOURCE_LOCATION_MAX_LENGTH,
        help_text="Directory: an absolute path. HTTP: the registry's base URL "
        "(https://clawhub.ai).",
    )
    reviewed = models.BooleanField(
        default=False, help_text="The registry reviews (moderates) what it publishes."
    )
    enabled = models.BooleanField(default=True)
    position = models.PositiveSmallIntegerField(
        default=100, help_text="Sources are searched in this order (lowest first)."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["position", "name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(kind__in=SourceKind.values), name="skillsource_kind_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"

    def clean(self) -> None:
        """A directory source names an absolute path; an HTTP source an http(s) URL with a
        host and no query, fragment or credentials."""
        location = (self.location or "").strip()
        self.location = location
        if self.kind == SourceKind.DIRECTORY:
            if not PurePosixPath(location).is_absolute() or "\0" in location:
                raise ValidationError({"location": "A directory source needs an absolute path."})
            return
        parts = urlsplit(location)
        if (
            parts.scheme not in ("http", "https")
            or not parts.hostname
            or parts.query
            or parts.fragment
            or parts.username
            or parts.password
        ):
            raise ValidationError(
                {
                    "location": "An HTTP source needs the registry's base URL: http(s)://host"
                    "[:port][/path], without a query, a fragment or credentials."
                }
            )


class AcquisitionStatus(models.TextChoices):
    PROPOSED = "proposed", "Proposed (waiting for the user's yes)"
    INSTALLED = "installed", "Installed and approved"
    FAILED = "failed", "Every attempt failed"


class SkillAcquisition(models.Model):
    """Candidates presented to a user for one task, and the outcome of their yes.

    `candidates` holds what was shown (name, description, source, whether the source is
    reviewed, version, the content hash that was reviewed and the review's findings);
    `attempts` holds each install tried after the yes, in order, with its error.
    """

    agent = models.ForeignKey(
        "cognition.Agent", on_delete=models.CASCADE, related_name="skill_acquisitions"
    )
    query = models.TextField()
    status = models.CharField(
        max_length=16, choices=AcquisitionStatus.choices, default=AcquisitionStatus.PROPOSED
    )
    candidates = models.JSONField(default=list)
    attempts = models.JSONField(default=list, blank=True)
    skill = models.ForeignKey(
        "skills.Skill", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    installed_name = models.CharField(max_length=64, blank=True, default="")
    version_number = models.PositiveIntegerField(null=True, blank=True)
    decided_by_label = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=AcquisitionStatus.values),
                name="skillacquisition_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"acquisition {self.pk} for {self.agent_id} ({self.status})"
