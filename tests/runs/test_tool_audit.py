"""The per-call audit trail: what a row keeps (never a credential value), that the database
refuses to change or delete it, the retention purge, and the streaming export."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from runs.audit import CallFacts, tool_audit_purge, tool_audit_row
from runs.audit_models import AuditPurgeWindow, ToolCallAudit
from tests.skills.admin_support import make_agent, make_user

pytestmark = pytest.mark.django_db

SECRET = "sk-live-0123456789abcdef"  # noqa: S105 - test data


def _facts(agent, *, run_id: str = "r1") -> CallFacts:
    return CallFacts(
        run_id=run_id,
        attempt=1,
        iteration=3,
        call_index=0,
        agent_id=agent.pk,
        agent_name=agent.name,
        skill_name="weather",
        skill_version_hash="sha256:" + "a" * 64,
        trust_level="supervised_auto",
        actor="worker:w1",
    )


def _row(agent, *, tool="fetch", ok=True, created_at=None, run_id="r1") -> ToolCallAudit:
    row = tool_audit_row(
        _facts(agent, run_id=run_id),
        tool=tool,
        arguments={"url": "https://api.test/x"},
        result={"ok": ok, "output": "done", "error_code": None if ok else "http_error"},
        decision="approved_skill",
        approval_required=False,
    )
    row.run_id = None  # no MotorRun row in these tests; run_ref keeps the id
    if created_at is not None:
        row.created_at = created_at
    row.save(force_insert=True)
    return row


def test_a_row_keeps_the_call_with_every_credential_value_redacted():
    agent = make_agent("scout", owner=make_user("owner"))

    row = tool_audit_row(
        _facts(agent),
        tool="fetch",
        arguments={"url": f"https://api.test/?key={SECRET}", "headers": {"X": SECRET}},
        result={
            "ok": False,
            "output": f"echo {SECRET}",
            "error_code": "http_error",
            "duration_ms": 42,
        },
        decision="trust_level",
        approval_required=True,
        approved_by="admin:olivia",
        credentials={"api_key": SECRET},
    )

    assert row.inputs == {
        "url": "https://api.test/?key=<credential:api_key>",
        "headers": {"X": "<credential:api_key>"},
    }
    assert row.output_summary == "echo <credential:api_key>"
    assert (row.success, row.error_code, row.duration_ms) == (False, "http_error", 42)
    assert (row.approval_required, row.approved_by, row.trust_level) == (
        True,
        "admin:olivia",
        "supervised_auto",
    )
    assert SECRET not in json.dumps(row.inputs) + row.output_summary


def test_a_saved_credentials_value_is_never_kept_even_when_unknown_and_long_inputs_are_cut():
    agent = make_agent("scout", owner=make_user("owner"))

    saved = tool_audit_row(
        _facts(agent),
        tool="save_credential",
        arguments={"name": "token", "value": "brand-new-secret-never-seen"},
        result={"ok": True, "output": "saved token"},
        decision="trust_level",
        approval_required=False,
    )
    written = tool_audit_row(
        _facts(agent),
        tool="write",
        arguments={"path": "a.txt", "content": "x" * 2000},
        result={"ok": True, "output": "y" * 2000},
        decision="trust_level",
        approval_required=False,
    )

    assert saved.inputs == {"name": "token", "value": "[redacted]"}
    assert written.inputs["content"] == "x" * 500 + "… (2000 characters)"
    assert written.output_summary == "y" * 500 + "… (2000 characters)"


def _raw(sql: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql)


def test_the_database_refuses_to_update_or_delete_a_row_by_orm_or_raw_sql():
    agent = make_agent("scout", owner=make_user("owner"))
    row = _row(agent)
    before = list(ToolCallAudit.objects.values())

    attempts = [
        lambda: ToolCallAudit.objects.filter(pk=row.pk).update(success=False),
        lambda: ToolCallAudit.objects.filter(pk=row.pk).delete(),
        lambda: _raw(f"UPDATE runs_toolcallaudit SET output_summary = 'x' WHERE id = {row.pk}"),
        lambda: _raw(f"DELETE FROM runs_toolcallaudit WHERE id = {row.pk}"),
    ]
    for attempt in attempts:
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            attempt()

    assert list(ToolCallAudit.objects.values()) == before


def test_the_purge_deletes_only_rows_past_retention(settings):
    settings.MOTOR_AUDIT_RETENTION_DAYS = 30
    agent = make_agent("scout", owner=make_user("owner"))
    now = timezone.now()
    old = _row(agent, created_at=now - timedelta(days=31))
    young = _row(agent, created_at=now - timedelta(days=29))

    deleted = tool_audit_purge(now=now)

    assert deleted == 1
    assert list(ToolCallAudit.objects.values_list("pk", flat=True)) == [young.pk]
    assert not ToolCallAudit.objects.filter(pk=old.pk).exists()
    assert not AuditPurgeWindow.objects.exists()


def test_a_purge_window_never_lets_a_younger_row_be_deleted():
    agent = make_agent("scout", owner=make_user("owner"))
    now = timezone.now()
    young = _row(agent, created_at=now - timedelta(days=1))

    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditPurgeWindow.objects.create(before=now - timedelta(days=2))
        _raw(f"DELETE FROM runs_toolcallaudit WHERE id = {young.pk}")

    assert ToolCallAudit.objects.filter(pk=young.pk).exists()


def test_export_streams_rows_since_a_date_as_json_lines(tmp_path):
    agent = make_agent("scout", owner=make_user("owner"))
    now = timezone.now()
    _row(agent, created_at=now - timedelta(days=10), run_id="old")
    kept = [_row(agent, created_at=now - timedelta(hours=h), run_id=f"r{h}") for h in (3, 2, 1)]
    out = tmp_path / "audit.jsonl"

    call_command(
        "export_audit",
        since=(now - timedelta(days=1)).isoformat(),
        format="jsonl",
        output=str(out),
        batch=2,
    )

    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["id"] for line in lines] == [r.pk for r in kept]
    assert [line["run_ref"] for line in lines] == ["r3", "r2", "r1"]
    assert lines[0]["inputs"] == {"url": "https://api.test/x"}
    assert lines[0]["tool"] == "fetch" and lines[0]["success"] is True


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"since": "last tuesday"}, "--since: 'last tuesday' is not an ISO-8601 date or date-time"),
        ({"format": "csv"}, "--format: 'csv' is not one of jsonl."),
        ({"batch": 0}, "--batch: must be 1 or more."),
    ],
)
def test_export_refuses_bad_options_naming_them(options, message):
    with pytest.raises(CommandError) as caught:
        call_command("export_audit", stdout=StringIO(), **options)

    assert str(caught.value).startswith(message)
