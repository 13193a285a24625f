"""SQL for append-only audit tables: triggers that refuse UPDATE and DELETE in the database.

Used by migrations (on PostgreSQL and SQLite alike). The only UPDATE let through is the one
Django's on_delete=SET_NULL issues when a referenced row is deleted (a foreign key becoming
NULL). DELETE is refused, except — when `purge_window` names a table — rows older than the
`before` of a row of that table: the retention purge inserts its window, deletes, and removes
the window in one transaction, so nothing younger than the retention can be deleted, by the
application or by a stray SQL session.
"""

from __future__ import annotations

from collections.abc import Sequence


def _postgres(table: str, columns: Sequence[str], fks: Sequence[str], purge_window: str) -> str:
    new = ", ".join(f"NEW.{c}::text" for c in columns)
    old = ", ".join(f"OLD.{c}::text" for c in columns)
    fk_changes = "".join(
        f"\n        OR (NEW.{f} IS NOT NULL AND NEW.{f} IS DISTINCT FROM OLD.{f})" for f in fks
    )
    # Table and column names come from migrations, never from input.
    if purge_window:
        exists = "SELECT 1 FROM " + purge_window + " w WHERE OLD.created_at < w.before"  # noqa: S608
        delete_body = f"\n    IF EXISTS ({exists}) THEN\n        RETURN OLD;\n    END IF;"
    else:
        delete_body = ""
    return f"""
CREATE OR REPLACE FUNCTION {table}_refuse_update() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION USING
        MESSAGE = '{table}: audit rows are append-only (id ' || OLD.id || ')',
        ERRCODE = 'integrity_constraint_violation';
END
$$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION {table}_refuse_delete() RETURNS trigger AS $$
BEGIN{delete_body}
    RAISE EXCEPTION USING
        MESSAGE = '{table}: audit rows are append-only (id ' || OLD.id || ')',
        ERRCODE = 'integrity_constraint_violation';
END
$$ LANGUAGE plpgsql;

CREATE TRIGGER {table}_append_only
    BEFORE UPDATE ON {table}
    FOR EACH ROW
    WHEN (ROW({new}) IS DISTINCT FROM ROW({old}){fk_changes})
    EXECUTE FUNCTION {table}_refuse_update();

CREATE TRIGGER {table}_no_delete
    BEFORE DELETE ON {table}
    FOR EACH ROW EXECUTE FUNCTION {table}_refuse_delete();
"""


def _sqlite(table: str, columns: Sequence[str], fks: Sequence[str], purge_window: str) -> list[str]:
    changed = " OR ".join(
        [f"NEW.{c} IS NOT OLD.{c}" for c in columns]
        + [f"(NEW.{f} IS NOT NULL AND NEW.{f} IS NOT OLD.{f})" for f in fks]
    )
    guard = (
        f"\n    WHEN NOT EXISTS (SELECT 1 FROM {purge_window} w WHERE OLD.created_at < w.before)"  # noqa: S608
        if purge_window
        else ""
    )
    return [
        f"""CREATE TRIGGER {table}_append_only BEFORE UPDATE ON {table}
    WHEN {changed}
    BEGIN SELECT RAISE(ABORT, '{table}: audit rows are append-only'); END""",
        f"""CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table}{guard}
    BEGIN SELECT RAISE(ABORT, '{table}: audit rows are append-only'); END""",
    ]


def forward_statements(
    vendor: str,
    table: str,
    columns: Sequence[str],
    fks: Sequence[str] = (),
    *,
    purge_window: str = "",
) -> list[str]:
    """The statements that make `table` append-only on `vendor` (postgresql or sqlite).

    `columns`: every column but the id and the nullable foreign keys `fks` (whose only allowed
    change is to NULL).
    """
    if vendor == "postgresql":
        return [_postgres(table, columns, fks, purge_window)]
    if vendor == "sqlite":
        return _sqlite(table, columns, fks, purge_window)
    return []


def reverse_statements(vendor: str, table: str) -> list[str]:
    """The statements that undo `forward_statements`."""
    if vendor == "postgresql":
        return [
            f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}",
            f"DROP TRIGGER IF EXISTS {table}_no_delete ON {table}",
            f"DROP FUNCTION IF EXISTS {table}_refuse_update()",
            f"DROP FUNCTION IF EXISTS {table}_refuse_delete()",
        ]
    if vendor == "sqlite":
        return [
            f"DROP TRIGGER IF EXISTS {table}_append_only",
            f"DROP TRIGGER IF EXISTS {table}_no_delete",
        ]
    return []
