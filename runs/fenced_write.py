"""One fenced write of the run loop: a short transaction of a few prepared statements.

Each write of a slice must prove the slice's lease (`runs.lease`) before it changes anything.
Here a write is one transaction of plain SQL statements, the same on PostgreSQL and SQLite:
first the fencing UPDATE (it renews the lease, or frees it when the slice ends with this write,
and holds the run's row lock until the commit), then the writes it guards, each of which also
requires the slice's token (`held_sql`), so a stale slice changes nothing. On PostgreSQL the
statements are prepared, bound on the server and sent with their BEGIN and COMMIT in one round
trip (psycopg's pipeline); SQLite runs in the process and needs no such care. Through the ORM
the same write cost several round trips and most of its time was Python building SQL
(docs/design-notes.md measures both).

The SQL is the same on both databases but for `sql_now`, `sql_later`, `sql_append` and
`sql_typed`. The writes themselves are in `runs.ledger` (an iteration's) and
`runs.ledger_start` (a slice's claim, a run's creation).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from functools import cache
from typing import Any

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import Field

from runs.lease import Lease, stale_lease
from runs.models import MotorRun

#: one statement of a write: SQL with %s placeholders, its parameters, and whether it returns rows
Statement = tuple[str, Sequence[Any], bool]

# The functions building SQL text are cached; their `postgresql` argument is the cache's key,
# since the text follows the dialect of the default database (the `sql_now` … `sql_typed` below).


def db_connection() -> Any:
    return connections[DEFAULT_DB_ALIAS]


def on_postgresql() -> bool:
    return bool(db_connection().vendor == "postgresql")


def quote(name: str) -> str:
    return str(db_connection().ops.quote_name(name))


def prep(model: type[Any], name: str, value: Any) -> Any:
    field = model._meta.get_field(name)
    return field.get_db_prep_save(value, db_connection())


# --- the dialect's words -------------------------------------------------------------------------


def sql_now() -> str:
    """The database's time (the lease's clock), as a value of a DateTimeField column."""
    if on_postgresql():
        return "STATEMENT_TIMESTAMP()"
    return "STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'now')"  # Django's own form of Now() on SQLite


def sql_later(seconds: str) -> str:
    """The database's time plus the SQL expression `seconds`."""
    if on_postgresql():
        return f"STATEMENT_TIMESTAMP() + ({seconds}) * INTERVAL '1 second'"
    return f"STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'now', ({seconds}) || ' seconds')"


def sql_append(column: str) -> str:
    """The JSON array in `column` with one more element, the JSON text of a parameter."""
    if on_postgresql():
        return f"{column} || jsonb_build_array(CAST(%s AS jsonb))"
    return f"json_insert({column}, '$[#]', json(%s))"


def sql_typed(field: Field[Any, Any]) -> str:
    """A parameter for `field`'s column in a SELECT list: PostgreSQL gives an untyped one the
    type text, which does not convert to every column type (jsonb); SQLite needs no type."""
    if on_postgresql():
        return f"CAST(%s AS {field.db_type(db_connection())})"
    return "%s"


#: psycopg's prepare_threshold that prepares only the statements executed with prepare=True
_ONLY_WHEN_ASKED = 2**31 - 1

# --- one write -----------------------------------------------------------------------------------


def write(statements: Sequence[Statement], *, durable: bool = True) -> list[tuple[int, Any]]:
    """Run `statements` in order as one transaction (inside a caller's transaction, a savepoint
    of it) and return each one's (rows affected, first returned row or None). All or nothing:
    an error rolls back what they did and reaches the caller as Django's error.

    Not `durable` (PostgreSQL): the commit returns before its WAL is flushed (synchronous_commit
    off for this one transaction). Only for writes a database crash may lose: a crash loses at
    most the unflushed tail, and every later durable commit flushes it too. The claim, the
    reply and the result may be lost together with whatever followed them, which looks exactly
    like a worker that died before writing them (the model is asked again; a call whose result
    is lost is reported as interrupted, never run again). An intent is always durable before
    its call starts. SQLite commits as its `synchronous` pragma says (settings.DATABASES).
    """
    connection = db_connection()
    if not on_postgresql():
        results: list[tuple[int, Any]] = []
        with transaction.atomic(), connection.cursor() as cursor:
            for sql, params, returns in statements:
                cursor.execute(sql, params)
                rows = cursor.fetchall() if returns else []
                results.append(
                    (len(rows) if returns else cursor.rowcount, rows[0] if rows else None)
                )
        return results
    return _pipeline(statements, durable=durable)


def _pipeline(statements: Sequence[Statement], *, durable: bool) -> list[tuple[int, Any]]:
    """`write` on PostgreSQL: the transaction in one round trip, each statement prepared once
    per connection (pooled connections keep them) with its parameters bound on the server:
    these few statements run several times per iteration, and planning them and quoting their
    JSON into the SQL text would cost more than running them."""
    connection = db_connection()
    connection.ensure_connection()
    conn = connection.connection
    if conn.prepare_threshold is None:
        # Django opens its connections with psycopg's preparing off (prepare_threshold None),
        # which also ignores `prepare=True`: each statement would be parsed and planned anew on
        # every call. A threshold nothing reaches prepares these statements and nothing else.
        conn.prepare_threshold = _ONLY_WHEN_ASKED
    nested = connection.in_atomic_block
    begin, commit, undo = (
        ("SAVEPOINT ledger", "RELEASE SAVEPOINT ledger", "ROLLBACK TO SAVEPOINT ledger")
        if nested
        else ("BEGIN", "COMMIT", "ROLLBACK")
    )
    # Django's connections make client-side-binding cursors; these bind on the server.
    cursors = [psycopg.Cursor(conn) for _ in statements]
    with connection.wrap_database_errors:
        try:
            with conn.pipeline():
                conn.execute(begin)
                if not durable and not nested:
                    conn.execute("SET LOCAL synchronous_commit TO OFF")
                for cursor, (sql, params, _) in zip(cursors, statements, strict=True):
                    cursor.execute(sql, params, prepare=True)
                conn.execute(commit)
        except BaseException:
            in_transaction = conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
            if nested or in_transaction:
                with contextlib.suppress(psycopg.Error):
                    conn.execute(undo)
            raise
        results = []
        for cursor, (_, _, returns) in zip(cursors, statements, strict=True):
            # (`description` would build a column object per returned column on every call)
            result = cursor.pgresult
            row = cursor.fetchone() if returns and result is not None and result.nfields else None
            results.append((cursor.rowcount, row))
            cursor.close()
        return results


# --- the fence ------------------------------------------------------------------------------------


@cache
def _fence_sql(release: bool, postgresql: bool, counting: bool = False) -> str:
    """The fencing UPDATE: renews the lease, or with `release` frees it (the slice ends with
    this write). Either way the unfinished-slice count is reset: the write is progress. With
    `counting` (the write of a model reply) it also counts the run's iteration and adds its
    energy charge. Parameters: seconds the lease lives (renew only), the charge (counting
    only), run id, token."""
    if release:
        sets = (
            f"{quote('lease_expires_at')} = NULL, {quote('lease_owner')} = '', "
            f"{quote('idle_since')} = {sql_now()}"
        )
    else:
        sets = f"{quote('lease_expires_at')} = {sql_later('%s')}"
    if counting:
        sets += (
            f", {quote('iterations')} = {quote('iterations')} + 1, "
            f"{quote('energy_cost')} = {quote('energy_cost')} + %s"
        )
    return (
        f"UPDATE {quote(MotorRun._meta.db_table)} SET {sets}, {quote('redelivery_count')} = 0 "  # noqa: S608 - quoted model names; values are parameters
        f"WHERE {quote('id')} = %s AND {quote('lease_token')} = %s"
    )


def _fence(lease: Lease, *, release: bool = False, charge: float | None = None) -> Statement:
    head: list[Any] = [] if release else [lease.lifetime.total_seconds()]
    if charge is not None:
        head.append(charge)
    sql = _fence_sql(release, on_postgresql(), charge is not None)
    return sql, [*head, lease.run_id, lease.token], False


@cache
def held_sql(postgresql: bool) -> str:
    """A guarded write's condition: the slice's token is still the run's (parameters: run id,
    token). Once the fence matched, its row lock keeps it so until the commit."""
    return (
        f"EXISTS (SELECT 1 FROM {quote(MotorRun._meta.db_table)} "  # noqa: S608 - quoted names
        f"WHERE {quote('id')} = %s AND {quote('lease_token')} = %s)"
    )


def held_params(lease: Lease) -> list[Any]:
    """The parameters of `held_sql` for `lease`."""
    return [lease.run_id, lease.token]


def fenced(
    lease: Lease,
    statements: Sequence[Statement],
    *,
    release: bool = False,
    durable: bool,
    charge: float | None = None,
) -> list[tuple[int, Any]]:
    """The fence, then `statements` (each guarded by `held_sql`), as one write; LeaseLost when the
    fence did not match (and so nothing changed). With `charge`, the fence counts an iteration
    of the run and adds the charge to its energy cost."""
    fence = _fence(lease, release=release, charge=charge)
    results = write([fence, *statements], durable=durable)
    if results[0][0] != 1:
        raise stale_lease(lease)
    return results[1:]
