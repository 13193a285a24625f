"""manage.py export_audit --since 2026-01-01 --format jsonl [--output FILE]

Streams the per-call audit trail as JSON lines, oldest first, in constant memory (keyset
batches; each line is written as soon as it is read).
"""

from __future__ import annotations

import sys
import time as clock
from datetime import datetime, time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from runs.audit import jsonl_line, tool_audit_iter

FORMATS = ("jsonl",)


def parse_since(raw: str) -> datetime:
    """An ISO-8601 date or date-time; naive values are in the server's time zone."""
    try:
        moment = parse_datetime(raw)
        if moment is None:
            day = parse_date(raw)
            moment = datetime.combine(day, time.min) if day is not None else None
    except ValueError:
        moment = None
    if moment is None:
        raise CommandError(
            f"--since: {raw!r} is not an ISO-8601 date or date-time (e.g. 2026-01-31 or "
            "2026-01-31T12:00:00Z)."
        )
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment)
    return moment


class Command(BaseCommand):
    help = "Export the tool-call audit trail as JSON lines (constant memory)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--since", help="Only rows created at or after this ISO date/time.")
        parser.add_argument("--format", default="jsonl", help="Output format: jsonl.")
        parser.add_argument("--output", help="Write to this file instead of standard output.")
        parser.add_argument("--batch", type=int, default=2000, help="Rows per database query.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["format"] not in FORMATS:
            raise CommandError(
                f"--format: {options['format']!r} is not one of {', '.join(FORMATS)}."
            )
        if options["batch"] < 1:
            raise CommandError("--batch: must be 1 or more.")
        since = parse_since(options["since"]) if options["since"] else None
        started = clock.monotonic()
        rows = tool_audit_iter(since=since, batch=options["batch"])
        if options["output"]:
            with open(options["output"], "w", encoding="utf-8") as out:
                count = self._write(rows, out)
        else:
            count = self._write(rows, self.stdout)
        seconds = clock.monotonic() - started
        sys.stderr.write(
            f"exported {count} audit rows in {seconds:.1f} s ({count / max(seconds, 1e-9):.0f} "
            "rows/s)\n"
        )

    @staticmethod
    def _write(rows: Any, out: Any) -> int:
        count = 0
        for row in rows:
            out.write(jsonl_line(row) + "\n")
            count += 1
        return count
