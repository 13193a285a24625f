"""The SQLite the embedded database needs: 3.35 or newer, checked when the settings load.

The run ledger's guarded writes use `UPDATE … RETURNING` and `INSERT … RETURNING` (one
statement that both checks the fencing token and reports what it wrote); SQLite has RETURNING
since 3.35.0 (2021). An older library would fail on the first run with a syntax error, so a
process refuses to start instead, saying what to do.
"""

from __future__ import annotations

import sqlite3

from django.core.exceptions import ImproperlyConfigured

#: the oldest SQLite with RETURNING
MIN_SQLITE = (3, 35, 0)


def require_sqlite(version: str | None = None) -> None:
    """Raise ImproperlyConfigured unless `version` (default: this interpreter's SQLite library)
    is at least MIN_SQLITE."""
    found = version or sqlite3.sqlite_version
    parts = tuple(int(part) for part in found.split(".")[:3] if part.isdigit())
    if parts >= MIN_SQLITE:
        return None
    needed = ".".join(str(part) for part in MIN_SQLITE[:2])
    raise ImproperlyConfigured(
        f"SQLite {found} is too old: Motor Cortex needs SQLite {needed} or newer (for "
        "RETURNING). Use a Python built with a newer SQLite (python.org builds and current "
        "distributions have one), or set DATABASE_URL to a PostgreSQL database."
    )
