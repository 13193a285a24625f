"""The immutability triggers also exist on the embedded SQLite database (the dev default)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import django
django.setup()
from django.db import IntegrityError, transaction
from django.contrib.auth import get_user_model
from cognition.models import Agent
from skills.bundle import bundle_from_files
from skills.models import PolicyAuditEvent, SkillFile, SkillVersion
from skills.install import skill_install_bundle
from skills.services import Actor

bundle = bundle_from_files(
    {"SKILL.md": b"---\nname: demo\ndescription: d\n---\nbody\n"}, dir_name="demo"
)
owner = get_user_model().objects.create_user(username="o")
agent = Agent.objects.create(name="a", owner=owner)
result = skill_install_bundle(bundle=bundle, actor=Actor.system("t"), agent=agent)
refused = []
for label, change in [
    ("file", lambda: SkillFile.objects.update(data=b"x")),
    ("version", lambda: SkillVersion.objects.update(content_hash="sha256:" + "0" * 64)),
    ("audit-update", lambda: PolicyAuditEvent.objects.update(reason="x")),
    ("audit-delete", lambda: PolicyAuditEvent.objects.all().delete()),
]:
    try:
        with transaction.atomic():
            change()
    except IntegrityError:
        refused.append(label)
agent.delete()  # SET_NULL on the audit rows is still allowed
print(",".join(refused), PolicyAuditEvent.objects.filter(agent__isnull=True).count())
"""


@pytest.mark.slow
def test_sqlite_refuses_rewrites_of_versions_files_and_audit(tmp_path: Path):
    # given a fresh SQLite database migrated from scratch
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "MOTOR_DATA_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "config.settings",
    }
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)

    # when rows are rewritten through the ORM
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout

    # then every rewrite was refused and deletion of the agent still nulls the references
    assert out.split() == ["file,version,audit-update,audit-delete", "2"]
