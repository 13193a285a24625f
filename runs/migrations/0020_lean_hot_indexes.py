"""Fewer indexes to maintain on the run loop's hot tables.

- runs_motorrun: the index of (status, lease expiry) becomes one of status alone. Every fenced
  write renews the lease; with its expiry indexed, each renewal wrote a new entry into all of
  the table's indexes (no HOT update). The reaper finds its runnable runs by status.
- runs_step: no index of the attempt alone (step_unique_position starts with it).
- runs_toolcallaudit (one row per tool call): no text-pattern twins of its indexes (nothing
  filters them by prefix) and no index of agent_ref_id alone (the agent's history index starts
  with it).

The field changes are written as plain index statements: on SQLite, Django would rebuild the
audit table for them, which drops its append-only triggers.
"""

import django.db.models.deletion
from django.db import migrations, models

# (index, table, column) of an index that db_index=True made and Meta.indexes does not keep
DROPPED = [
    ("runs_step_attempt_id_75fa38ab", "runs_step", "attempt_id"),
    ("runs_toolcallaudit_agent_ref_id_83fcc824", "runs_toolcallaudit", "agent_ref_id"),
    ("runs_toolcallaudit_run_id_654527f1", "runs_toolcallaudit", "run_id"),
    ("runs_toolcallaudit_run_ref_720697bf", "runs_toolcallaudit", "run_ref"),
    ("runs_toolcallaudit_skill_name_4d160e96", "runs_toolcallaudit", "skill_name"),
    ("runs_toolcallaudit_tool_f517f7ea", "runs_toolcallaudit", "tool"),
]
#: the PostgreSQL text-pattern twins of the indexes above, of varchar columns
PATTERN_TWINS = {"run_id", "run_ref", "skill_name", "tool"}


def drop_field_indexes(apps, schema_editor):  # type: ignore[no-untyped-def]
    for name, _table, column in DROPPED:
        schema_editor.execute(f'DROP INDEX IF EXISTS "{name}"')
        if column in PATTERN_TWINS:
            schema_editor.execute(f'DROP INDEX IF EXISTS "{name}_like"')


def create_field_indexes(apps, schema_editor):  # type: ignore[no-untyped-def]
    postgresql = schema_editor.connection.vendor == "postgresql"
    for name, table, column in DROPPED:
        schema_editor.execute(f'CREATE INDEX "{name}" ON "{table}" ("{column}")')
        if postgresql and column in PATTERN_TWINS:
            schema_editor.execute(
                f'CREATE INDEX "{name}_like" ON "{table}" ("{column}" varchar_pattern_ops)'
            )


class Migration(migrations.Migration):
    dependencies = [
        ("cognition", "0011_cortex_follow_ups"),
        ("runs", "0019_run_placement_paused"),
        ("skills", "0008_index_stamps"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="motorrun", name="runs_motorr_status_8a5758_idx"),
        migrations.AddIndex(
            model_name="motorrun",
            index=models.Index(fields=["status"], name="motorrun_status"),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="step",
                    name="attempt",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="steps",
                        to="runs.attempt",
                    ),
                ),
                migrations.AlterField(
                    model_name="toolcallaudit",
                    name="agent_ref_id",
                    field=models.BigIntegerField(),
                ),
                migrations.AlterField(
                    model_name="toolcallaudit",
                    name="run",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="runs.motorrun",
                    ),
                ),
                migrations.AlterField(
                    model_name="toolcallaudit",
                    name="run_ref",
                    field=models.CharField(max_length=32),
                ),
                migrations.AlterField(
                    model_name="toolcallaudit",
                    name="skill_name",
                    field=models.CharField(blank=True, default="", max_length=64),
                ),
                migrations.AlterField(
                    model_name="toolcallaudit",
                    name="tool",
                    field=models.CharField(max_length=64),
                ),
            ],
            database_operations=[migrations.RunPython(drop_field_indexes, create_field_indexes)],
        ),
        migrations.AddIndex(
            model_name="toolcallaudit",
            index=models.Index(fields=["run"], name="toolcallaudit_run"),
        ),
        migrations.AddIndex(
            model_name="toolcallaudit",
            index=models.Index(fields=["run_ref"], name="toolcallaudit_run_ref"),
        ),
        migrations.AddIndex(
            model_name="toolcallaudit",
            index=models.Index(fields=["skill_name"], name="toolcallaudit_skill_name"),
        ),
        migrations.AddIndex(
            model_name="toolcallaudit",
            index=models.Index(fields=["tool"], name="toolcallaudit_tool"),
        ),
    ]
