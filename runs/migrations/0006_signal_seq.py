"""Per-agent signal sequence numbers (runs.outbox), nullable run for run-less signals."""

import django.db.models.deletion
from django.db import migrations, models


def number_existing(apps, schema_editor):
    Signal = apps.get_model("runs", "Signal")
    SignalCounter = apps.get_model("runs", "SignalCounter")
    last: dict[int, int] = {}
    for signal in Signal.objects.order_by("id").only("id", "agent_id"):
        last[signal.agent_id] = last.get(signal.agent_id, 0) + 1
        Signal.objects.filter(pk=signal.pk).update(seq=last[signal.agent_id])
    for agent_id, seq in last.items():
        SignalCounter.objects.create(agent_id=agent_id, last_seq=seq)


class Migration(migrations.Migration):
    dependencies = [
        ("cognition", "0003_idempotency_record"),
        ("runs", "0005_run_saved_credentials"),
    ]

    operations = [
        migrations.CreateModel(
            name="SignalCounter",
            fields=[
                (
                    "agent",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="+",
                        serialize=False,
                        to="cognition.agent",
                    ),
                ),
                ("last_seq", models.BigIntegerField(default=0)),
            ],
        ),
        migrations.AddField(
            model_name="signal",
            name="seq",
            field=models.BigIntegerField(
                null=True, help_text="Position in the agent's signal stream (1, 2, 3, …)."
            ),
        ),
        migrations.RunPython(number_existing, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="signal",
            name="seq",
            field=models.BigIntegerField(
                help_text="Position in the agent's signal stream (1, 2, 3, …)."
            ),
        ),
        migrations.AlterField(
            model_name="signal",
            name="run",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="signals",
                to="runs.motorrun",
            ),
        ),
        migrations.AlterField(
            model_name="signal",
            name="kind",
            field=models.CharField(
                choices=[
                    ("motor_result", "Motor result"),
                    ("schedule_skipped", "Schedule skipped"),
                ],
                max_length=32,
            ),
        ),
        migrations.AddConstraint(
            model_name="signal",
            constraint=models.UniqueConstraint(
                fields=("agent", "seq"), name="signal_unique_agent_seq"
            ),
        ),
    ]
