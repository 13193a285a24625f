"""Writing, reading, exporting and purging the per-call audit trail (`ToolCallAudit`).

`tool_audit_row` builds the row of one call (redacted: no credential value survives, a
save_credential value is never kept, long strings are cut); the runtime inserts it inside the
fenced write that records the call's result. `tool_audit_purge` deletes rows older than
MOTOR_AUDIT_RETENTION_DAYS through a purge window (the triggers refuse any other DELETE).
`tool_audit_iter` streams rows in id order with keyset pagination, so an export of any size
holds one batch at a time.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from runs.audit_models import OUTPUT_SUMMARY_CHARS, AuditPurgeWindow, ToolCallAudit
from sandbox.tools import redact

logger = logging.getLogger(__name__)

#: characters of one string argument kept in an audit row
INPUT_STRING_CHARS = 500
#: what stands in for a value the audit never keeps
REDACTED = "[redacted]"
#: arguments that hold a secret by definition, per tool
SECRET_ARGUMENTS: dict[str, tuple[str, ...]] = {"save_credential": ("value",)}
#: the default retention of audit rows, days
DEFAULT_RETENTION_DAYS = 365


@dataclass(frozen=True, slots=True)
class CallFacts:
    """What the audit row of one call says besides the call itself."""

    run_id: str
    attempt: int
    iteration: int
    call_index: int
    agent_id: int
    agent_name: str
    skill_name: str
    skill_version_hash: str
    trust_level: str
    actor: str


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} characters)"


def _scrub(value: Any, credentials: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return _cut(redact(value, credentials), INPUT_STRING_CHARS)
    if isinstance(value, list):
        return [_scrub(v, credentials) for v in value]
    if isinstance(value, dict):
        return {str(k): _scrub(v, credentials) for k, v in value.items()}
    return value


def audit_inputs(
    tool: str, arguments: Mapping[str, Any] | None, credentials: Mapping[str, str]
) -> dict[str, Any]:
    """The arguments as the audit keeps them: secrets replaced, credential values redacted,
    long strings cut. Arguments that were not a JSON object are kept as `{}`."""
    if not isinstance(arguments, Mapping):
        return {}
    secret = SECRET_ARGUMENTS.get(tool, ())
    return {
        str(k): (REDACTED if k in secret else _scrub(v, credentials)) for k, v in arguments.items()
    }


def audit_output(result: Mapping[str, Any], credentials: Mapping[str, str]) -> str:
    """The call's output, redacted and cut to OUTPUT_SUMMARY_CHARS."""
    return _cut(redact(str(result.get("output", "")), credentials), OUTPUT_SUMMARY_CHARS)


def tool_audit_row(
    facts: CallFacts,
    *,
    tool: str,
    arguments: Mapping[str, Any] | None,
    result: Mapping[str, Any],
    decision: str,
    approval_required: bool,
    approved_by: str = "",
    credentials: Mapping[str, str] | None = None,
) -> ToolCallAudit:
    """The (unsaved) audit row of one call; the caller inserts it in its own transaction."""
    known = credentials or {}
    return ToolCallAudit(
        run_id=facts.run_id,
        run_ref=facts.run_id,
        attempt=facts.attempt,
        iteration=facts.iteration,
        call_index=facts.call_index,
        agent_id=facts.agent_id,
        agent_ref_id=facts.agent_id,
        agent_name=facts.agent_name,
        skill_name=facts.skill_name,
        skill_version_hash=facts.skill_version_hash,
        tool=tool[:64],
        inputs=audit_inputs(tool, arguments, known),
        output_summary=audit_output(result, known),
        success=bool(result.get("ok")),
        error_code=str(result.get("error_code") or "")[:64],
        duration_ms=max(0, int(result.get("duration_ms") or 0)),
        decision=decision[:32],
        approval_required=approval_required,
        approved_by=approved_by[:200],
        trust_level=facts.trust_level,
        actor=facts.actor[:200],
    )


def retention() -> timedelta:
    """How long audit rows are kept (MOTOR_AUDIT_RETENTION_DAYS)."""
    days = int(getattr(settings, "MOTOR_AUDIT_RETENTION_DAYS", DEFAULT_RETENTION_DAYS))
    return timedelta(days=days)


def tool_audit_purge(*, now: datetime | None = None) -> int:
    """Delete the audit rows older than the retention; return how many. Run by celery-beat
    (runs.tool_audit_purge). Nothing younger can be deleted: the window the triggers check is
    the retention's cutoff, and it exists only inside this transaction."""
    cutoff = (now or timezone.now()) - retention()
    with transaction.atomic():
        window = AuditPurgeWindow.objects.create(before=cutoff)
        deleted, _ = ToolCallAudit.objects.filter(created_at__lt=cutoff).delete()
        window.delete()
    if deleted:
        logger.info("tool audit rows purged: %d older than %s", deleted, cutoff.isoformat())
    return deleted


def tool_audit_filter(
    queryset: QuerySet[ToolCallAudit],
    *,
    agent: str | None = None,
    skill: str | None = None,
    tool: str | None = None,
    outcome: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[ToolCallAudit]:
    """`queryset` narrowed by agent name, skill name, tool, outcome (ok | failed) and a
    [since, until) range of creation times."""
    if agent:
        queryset = queryset.filter(agent_name=agent)
    if skill:
        queryset = queryset.filter(skill_name=skill)
    if tool:
        queryset = queryset.filter(tool=tool)
    if outcome in ("ok", "failed"):
        queryset = queryset.filter(success=outcome == "ok")
    if since is not None:
        queryset = queryset.filter(created_at__gte=since)
    if until is not None:
        queryset = queryset.filter(created_at__lt=until)
    return queryset


#: the columns a reader of one row sees (the admin, the API, the export)
RECORD_FIELDS = (
    "created_at",
    "run_ref",
    "attempt",
    "iteration",
    "call_index",
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
)
#: an export line also carries the row's id and the agent's id, beside its name
EXPORT_FIELDS = ("id", *RECORD_FIELDS[:5], "agent_ref_id", *RECORD_FIELDS[5:])


def tool_audit_iter(
    *, since: datetime | None = None, batch: int = 2000
) -> Iterator[dict[str, Any]]:
    """Every audit row created at or after `since`, oldest id first, as plain dicts.

    Keyset pagination by id: each query fetches at most `batch` rows, so memory stays constant
    however many rows there are.
    """
    queryset = ToolCallAudit.objects.order_by("id")
    if since is not None:
        queryset = queryset.filter(created_at__gte=since)
    last = 0
    while True:
        rows = list(queryset.filter(id__gt=last).values(*EXPORT_FIELDS)[:batch])
        if not rows:
            return
        yield from rows
        last = rows[-1]["id"]


def jsonl_line(row: Mapping[str, Any]) -> str:
    """One exported row as a JSON line (timestamps ISO-8601)."""
    out = dict(row)
    out["created_at"] = out["created_at"].isoformat()
    return json.dumps(out, ensure_ascii=False, separators=(",", ":"), sort_keys=False)
