"""The per-call audit trail, append-only by triggers; rows past retention are deleted only
inside a purge window (runs.audit.tool_audit_purge)."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

from skills.append_only import forward_statements, reverse_statements

TABLE = "runs_toolcallaudit"
COLUMNS = (
    "run_ref",
    "attempt",
    "iteration",
    "call_index",
    "agent_ref_id",
    "agent_name",
    "skill_name",
    "skill_version_hash",
    "tool",
    "inputs",
    "output_summary",
    "success",
    "error_code",
    "duration_ms",
    "decision",
    "approval_required",
    "approved_by",
    "trust_level",
    "actor",
    "created_at",
)
FKS = ("run_id", "agent_id")


def triggers(apps, schema_editor):  # type: ignore[no-untyped-def]
    vendor = schema_editor.connection.vendor
    for statement in forward_statements(
        vendor, TABLE, COLUMNS, FKS, purge_window="runs_auditpurgewindow"
    ):
        schema_editor.execute(statement)


def drop_triggers(apps, schema_editor):  # type: ignore[no-untyped-def]
    for statement in reverse_statements(schema_editor.connection.vendor, TABLE):
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [
        ("cognition", "0008_trust_levels_of_seed_004"),
        ("runs", "0011_pending_wakeup_outbox"),
    ]

    operations = [
        migrations.CreateModel(
            name="AuditPurgeWindow",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("before", models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name="ToolCallAudit",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("run_ref", models.CharField(db_index=True, max_length=32)),
                (
                    "attempt",
                    models.PositiveIntegerField(help_text="The attempt's number within the run."),
                ),
                ("iteration", models.PositiveIntegerField()),
                ("call_index", models.PositiveIntegerField()),
                ("agent_ref_id", models.BigIntegerField(db_index=True)),
                ("agent_name", models.CharField(max_length=100)),
                (
                    "skill_name",
                    models.CharField(blank=True, db_index=True, default="", max_length=64),
                ),
                ("skill_version_hash", models.CharField(blank=True, default="", max_length=71)),
                ("tool", models.CharField(db_index=True, max_length=64)),
                (
                    "inputs",
                    models.JSONField(default=dict, help_text="The call's arguments, redacted."),
                ),
                (
                    "output_summary",
                    models.TextField(blank=True, default="", help_text="Redacted, truncated."),
                ),
                ("success", models.BooleanField()),
                ("error_code", models.CharField(blank=True, default="", max_length=64)),
                ("duration_ms", models.PositiveIntegerField(default=0)),
                (
                    "decision",
                    models.CharField(help_text="The rule of the policy decision.", max_length=32),
                ),
                ("approval_required", models.BooleanField(default=False)),
                ("approved_by", models.CharField(blank=True, default="", max_length=200)),
                ("trust_level", models.CharField(max_length=16)),
                ("actor", models.CharField(max_length=200)),
                (
                    "created_at",
                    models.DateTimeField(db_index=True, default=django.utils.timezone.now),
                ),
                (
                    "agent",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="cognition.agent",
                    ),
                ),
                (
                    "run",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="runs.motorrun",
                    ),
                ),
            ],
            options={
                "verbose_name": "tool call audit row",
                "ordering": ["-created_at", "-id"],
                "indexes": [
                    models.Index(
                        fields=["agent_ref_id", "-created_at", "-id"],
                        name="runs_toolca_agent_r_e83249_idx",
                    )
                ],
            },
        ),
        migrations.RunPython(triggers, drop_triggers),
    ]
