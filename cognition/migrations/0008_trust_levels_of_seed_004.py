"""Trust levels of seed 004 replace untrusted/standard/trusted (which nothing read), and every
change of a level is recorded in an append-only table.

Existing agents map: untrusted -> suggest, standard -> supervised_auto, trusted -> bounded_auto.
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

from skills.append_only import forward_statements, reverse_statements

LEGACY = {"untrusted": "suggest", "standard": "supervised_auto", "trusted": "bounded_auto"}
REVERSE = {new: old for old, new in LEGACY.items()}
TABLE = "cognition_trustlevelchange"
COLUMNS = ("agent_name", "from_level", "to_level", "actor_label", "reason", "created_at")
FKS = ("agent_id", "actor_id")


def map_levels(apps, schema_editor):  # type: ignore[no-untyped-def]
    Agent = apps.get_model("cognition", "Agent")
    for old, new in LEGACY.items():
        Agent.objects.filter(trust_level=old).update(trust_level=new)


def unmap_levels(apps, schema_editor):  # type: ignore[no-untyped-def]
    Agent = apps.get_model("cognition", "Agent")
    Agent.objects.filter(trust_level="observe").update(trust_level="untrusted")
    for new, old in REVERSE.items():
        Agent.objects.filter(trust_level=new).update(trust_level=old)


def triggers(apps, schema_editor):  # type: ignore[no-untyped-def]
    vendor = schema_editor.connection.vendor
    for statement in forward_statements(vendor, TABLE, COLUMNS, FKS):
        schema_editor.execute(statement)


def drop_triggers(apps, schema_editor):  # type: ignore[no-untyped-def]
    for statement in reverse_statements(schema_editor.connection.vendor, TABLE):
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [
        ("cognition", "0007_credential_names_any_case"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="TrustLevelChange",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("agent_name", models.CharField(max_length=100)),
                ("from_level", models.CharField(max_length=16)),
                (
                    "to_level",
                    models.CharField(
                        choices=[
                            ("observe", "Observe (read only)"),
                            ("suggest", "Suggest (every call approved)"),
                            ("supervised_auto", "Supervised auto (high risk approved)"),
                            ("bounded_auto", "Bounded auto"),
                        ],
                        max_length=16,
                    ),
                ),
                ("actor_label", models.CharField(max_length=200)),
                ("reason", models.TextField(blank=True, default="")),
                (
                    "created_at",
                    models.DateTimeField(db_index=True, default=django.utils.timezone.now),
                ),
            ],
            options={
                "ordering": ["-created_at", "-id"],
            },
        ),
        migrations.AlterModelOptions(
            name="agent",
            options={
                "ordering": ["name"],
                "permissions": [("change_trust_level", "Can change an agent's trust level")],
            },
        ),
        migrations.AlterField(
            model_name="agent",
            name="trust_level",
            field=models.CharField(
                choices=[
                    ("observe", "Observe (read only)"),
                    ("suggest", "Suggest (every call approved)"),
                    ("supervised_auto", "Supervised auto (high risk approved)"),
                    ("bounded_auto", "Bounded auto"),
                ],
                default="supervised_auto",
                max_length=16,
            ),
        ),
        migrations.RunPython(map_levels, unmap_levels),
        migrations.AddConstraint(
            model_name="agent",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("trust_level__in", ["observe", "suggest", "supervised_auto", "bounded_auto"])
                ),
                name="agent_trust_level_valid",
            ),
        ),
        migrations.AddField(
            model_name="trustlevelchange",
            name="actor",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddField(
            model_name="trustlevelchange",
            name="agent",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="trust_changes",
                to="cognition.agent",
            ),
        ),
        migrations.RunPython(triggers, drop_triggers),
    ]
