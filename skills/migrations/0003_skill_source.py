"""Skill.source: where a skill comes from, part of its identity on import.

Existing skills get the source of their first version: "local" for one learned by a run or
pasted (admin, API), else the path or archive name its import recorded; empty when the first
version recorded nothing (the field then says "unknown", and imports over it are refused).
"""

from __future__ import annotations

from django.db import migrations, models

PASTED_LABELS = frozenset({"pasted", "api", "pasted in the admin"})


def backfill_sources(apps, schema_editor):  # type: ignore[no-untyped-def]
    skill_model = apps.get_model("skills", "Skill")
    version_model = apps.get_model("skills", "SkillVersion")
    for skill in skill_model.objects.filter(source="").iterator():
        first = version_model.objects.filter(skill_id=skill.pk).order_by("number").first()
        if first is None:
            continue
        recorded = (first.provenance or {}).get("source")
        if first.extracted_from or recorded in PASTED_LABELS:
            source = "local"
        elif isinstance(recorded, str) and recorded:
            source = recorded[:2000]
        else:
            continue
        skill_model.objects.filter(pk=skill.pk).update(source=source)


class Migration(migrations.Migration):
    dependencies = [("skills", "0002_immutability_triggers")]

    operations = [
        migrations.AddField(
            model_name="skill",
            name="source",
            field=models.CharField(blank=True, default="", max_length=2000),
        ),
        migrations.RunPython(backfill_sources, migrations.RunPython.noop),
    ]
