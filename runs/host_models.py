"""Worker hosts and where each run's workspace lives.

A worker host announces itself with a `WorkerHost` row whose heartbeat it renews (runs.hosts);
a run's `RunPlacement` names the host holding its workspace and the last snapshot of it in
object storage (runs.snapshots), so a slice can be sent to that host while it lives and the
workspace restored anywhere once it is gone.
"""

from __future__ import annotations

from django.db import models


class WorkerHost(models.Model):
    host_id = models.CharField(max_length=200, primary_key=True)
    instance = models.CharField(
        max_length=64,
        help_text="Random id of the process announcing this host; a new one per start.",
    )
    machine = models.CharField(
        max_length=200, default="", help_text="Hostname of the machine the process runs on."
    )
    pid = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField(help_text="The database's time of the last heartbeat.")

    def __str__(self) -> str:
        return self.host_id


class RunPlacement(models.Model):
    run = models.OneToOneField(
        "runs.MotorRun", primary_key=True, on_delete=models.CASCADE, related_name="placement"
    )
    host_id = models.CharField(
        max_length=200,
        blank=True,
        default="",
        db_index=True,
        help_text="The host holding the workspace now; empty once its host is gone.",
    )
    workspace_name = models.CharField(
        max_length=500, help_text="The workspace's path inside MOTOR_WORKSPACES_DIR, on any host."
    )
    manifest = models.JSONField(
        default=dict, help_text="Last snapshot: {path: [sha256, size, mode]}; empty before one."
    )
    snapshot_seq = models.PositiveIntegerField(default=0, help_text="Snapshots taken so far.")
    paused_reason = models.TextField(
        blank=True,
        default="",
        help_text="Why the run waits (its snapshot storage is unreachable); empty while it runs.",
    )
    paused_at = models.DateTimeField(
        null=True,
        blank=True,
        db_index=True,
        help_text="When the run started waiting for its storage.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.run_id} on {self.host_id or '?'}"
