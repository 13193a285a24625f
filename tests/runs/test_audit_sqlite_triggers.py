"""The append-only triggers of the tool-call audit and of trust changes exist on SQLite too
(the embedded default), with the same purge window."""

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
from datetime import timedelta
from django.db import IntegrityError, connection, transaction
from django.contrib.auth import get_user_model
from django.utils import timezone
from cognition.models import Agent, TrustLevelChange
from runs.audit import CallFacts, tool_audit_purge, tool_audit_row
from runs.audit_models import AuditPurgeWindow, ToolCallAudit

owner = get_user_model().objects.create_superuser("o", "o@example.org", "pw")
agent = Agent.objects.create(name="a", owner=owner)
from cognition.trust import agent_set_trust_level
agent_set_trust_level(agent=agent, level="observe", actor=owner)
facts = CallFacts("r", 1, 1, 0, agent.pk, "a", "", "", "observe", "w")
now = timezone.now()
rows = []
for days in (400, 1):
    row = tool_audit_row(facts, tool="read", arguments={}, result={"ok": True, "output": ""},
                         decision="trust_level", approval_required=False)
    row.run_id = None
    row.created_at = now - timedelta(days=days)
    row.save(force_insert=True)
    rows.append(row)
young = rows[1]
def raw(sql):
    with connection.cursor() as cursor:
        cursor.execute(sql)
refused = []
for label, change in [
    ("audit-update", lambda: ToolCallAudit.objects.update(success=False)),
    ("audit-delete", lambda: ToolCallAudit.objects.filter(pk=young.pk).delete()),
    ("audit-raw-delete", lambda: raw(f"DELETE FROM runs_toolcallaudit WHERE id = {young.pk}")),
    ("trust-update", lambda: TrustLevelChange.objects.update(reason="x")),
    ("trust-delete", lambda: TrustLevelChange.objects.all().delete()),
]:
    try:
        with transaction.atomic():
            change()
    except IntegrityError:
        refused.append(label)
print(",".join(refused), tool_audit_purge(now=now), ToolCallAudit.objects.count(),
      AuditPurgeWindow.objects.count())
"""


@pytest.mark.slow
def test_sqlite_refuses_rewrites_of_the_audit_and_purges_only_past_retention(tmp_path: Path):
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "MOTOR_DATA_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "MOTOR_AUDIT_RETENTION_DAYS": "365",
    }
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)

    out = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout

    assert out.split() == [
        "audit-update,audit-delete,audit-raw-delete,trust-update,trust-delete",
        "1",
        "1",
        "0",
    ]
