"""Database connection hygiene for code that waits (LLM replies, tool calls, long-polls)."""

from __future__ import annotations

from django.db import DEFAULT_DB_ALIAS, connections


def release_db_connection() -> None:
    """Give this thread's database connection back before a long wait.

    With the connection pool (PostgreSQL's default here, settings.DATABASES) it returns to the
    pool at once and the next query takes one again, so N threads that wait need no N
    connections. Without a pool the connection is only closed when it is not meant to persist
    (CONN_MAX_AGE 0). Never inside a transaction: nothing is released there.
    """
    connection = connections[DEFAULT_DB_ALIAS]
    if connection.connection is None or connection.in_atomic_block:
        return
    if getattr(connection, "pool", None) is not None or not connection.settings_dict.get(
        "CONN_MAX_AGE"
    ):
        connection.close()
