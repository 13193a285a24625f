"""Deployed MCP servers and the tools they registered: what the database says is deployed.

A row of `DeployedServer` is one skill version deployed as a stdio MCP server. At most one row
per skill is live (deployed, disabled or failed); the ones it replaced are superseded, kept
for history. Any worker starts a live, deployed row's server on first use (forge.runtime);
nothing here depends on a process surviving a worker restart.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from skills.models import Skill, SkillVersion

#: the separator of a qualified tool name: `<skill>__<tool>`
TOOL_SEPARATOR = "__"
#: how many of the latest calls the failure rate is computed over
RECENT_CALLS = 20


class ServerStatus(models.TextChoices):
    DEPLOYED = "deployed", "Deployed"
    DISABLED = "disabled", "Disabled"
    FAILED = "failed", "Failed"
    SUPERSEDED = "superseded", "Superseded"
    REMOVED = "removed", "Removed"


#: the statuses of the one row per skill that is not history
LIVE_STATUSES = (ServerStatus.DEPLOYED, ServerStatus.DISABLED, ServerStatus.FAILED)


class Semantics(models.TextChoices):
    READ = "read", "Read"
    WRITE = "write", "Write"


class DeployedServer(models.Model):
    """One skill version deployed as an MCP server, with the policy it runs under (the
    approved domains, credential names and limits, copied at deployment)."""

    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="mcp_servers")
    version = models.OneToOneField(
        SkillVersion, on_delete=models.CASCADE, related_name="mcp_server"
    )
    # Given as a string: forge must not import the cognition app (dependency direction).
    #: the agent whose approved policy the server runs under (its vault supplies credentials)
    agent = models.ForeignKey(
        "cognition.Agent", on_delete=models.CASCADE, related_name="mcp_servers"
    )
    status = models.CharField(
        max_length=16, choices=ServerStatus.choices, default=ServerStatus.DEPLOYED
    )
    content_hash = models.CharField(max_length=80)
    allowed_domains = models.JSONField(default=list, blank=True)
    #: environment variable -> vault credential name (never a value)
    credentials = models.JSONField(default=dict, blank=True)
    limits = models.JSONField(default=dict, blank=True)
    #: consecutive crashes without a successful call in between (any worker)
    crash_count = models.PositiveIntegerField(default=0)
    #: why the server failed: how it ended and the tail of its stderr (credentials redacted)
    failure = models.TextField(blank=True, default="")
    #: outcomes of the latest calls, oldest first: "1" success, "0" failure
    recent = models.CharField(max_length=RECENT_CALLS, blank=True, default="")
    #: when the owner was last told the skill fails too often (not again for the same streak)
    failing_signalled_at = models.DateTimeField(null=True, blank=True)
    deployed_by = models.CharField(max_length=200, blank=True, default="")
    #: who last changed the status (a person's label, or "worker" for a crash limit) and when;
    #: a call of a tool that is not deployed names them to the model
    status_by = models.CharField(max_length=200, blank=True, default="")
    status_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("-created_at",)
        constraints = (
            models.UniqueConstraint(
                fields=("skill",),
                condition=Q(status__in=["deployed", "disabled", "failed"]),
                name="forge_one_live_server_per_skill",
            ),
        )

    def __str__(self) -> str:
        return f"{self.skill.name} v{self.version.number} ({self.status})"

    @property
    def failure_rate(self) -> float | None:
        """Failed share of the latest calls (None before any call)."""
        if not self.recent:
            return None
        return self.recent.count("0") / len(self.recent)


class McpTool(models.Model):
    """One tool a deployed server offered in `tools/list`, offered to runs as `qualified_name`
    (`<skill>__<tool>`), with its usage counts."""

    server = models.ForeignKey(DeployedServer, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=64)
    qualified_name = models.CharField(max_length=160)
    description = models.TextField(blank=True, default="")
    input_schema = models.JSONField(default=dict)
    semantics = models.CharField(max_length=8, choices=Semantics.choices)
    calls = models.PositiveIntegerField(default=0)
    failures = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")
    last_called_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("server", "name")
        constraints = (
            models.UniqueConstraint(fields=("server", "name"), name="forge_tool_once_per_server"),
        )

    def __str__(self) -> str:
        return self.qualified_name


# The SkillForge flow's models live in their own module (one job per file); Django finds them here.
from forge.flow_models import (  # noqa: E402, F401
    ACTIVE_STATES,
    MAX_ATTEMPTS,
    TERMINAL_STATES,
    WORKER_STATES,
    FlowEvent,
    FlowMode,
    FlowState,
    ForgeFlow,
)
