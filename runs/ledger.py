"""The run loop's frequent fenced writes, each in one statement on PostgreSQL.

A slice starts with its claim (and, for a new run, the start); then each iteration writes twice:
the model's reply with the intent of its first tool call, then the call's result (a further call
of the same reply has an intent write of its own). Each write must first prove the slice's lease
(`runs.lease.lease_fence`) and then change one or two rows. Through the ORM that is BEGIN, the
fencing UPDATE, the writes and COMMIT, and most of its cost is Python building SQL. On PostgreSQL
the functions here send the fencing UPDATE and the writes it guards as one statement — the
writes are chained behind the fence in data-modifying CTEs, so they change nothing unless the
fence matched — in autocommit: one round trip and one commit per write. Other databases (SQLite) get the same writes as an ORM transaction.

Each function raises LeaseLost, having changed nothing, when the slice's token is stale.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Callable
from functools import cache
from typing import Any

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import Field
from django.utils import timezone

from runs.lease import (
    Lease,
    lease_claim_run,
    lease_fence,
    lease_release,
    lease_take_over_from_dead,
    lease_ttl,
    stale_lease,
)
from runs.models import Attempt, MotorRun, PendingWakeup, RunEvent, RunStatus, Step, StepState
from runs.wakeups import wakeup_remember


def _single_statement(choice: bool | None) -> bool:
    """One statement on PostgreSQL unless `choice` says otherwise (False: the ORM transaction,
    which any database runs)."""
    postgresql = connections[DEFAULT_DB_ALIAS].vendor == "postgresql"
    return postgresql if choice is None else choice and postgresql


def _quote(name: str) -> str:
    return connections[DEFAULT_DB_ALIAS].ops.quote_name(name)


def _prep(model: type[Any], name: str, value: Any) -> Any:
    field = model._meta.get_field(name)
    return field.get_db_prep_save(value, connections[DEFAULT_DB_ALIAS])


@cache
def _fence_sql(release: bool, durable: bool = True) -> str:
    """The fencing UPDATE as a CTE named `fence`: renews the lease, or with `release` frees it
    (the slice ends with this write). Either way the unfinished-slice count is reset: the write
    is progress. Parameters: ttl (renew only), run id, token.

    Not `durable`: the statement's commit does not wait for its WAL flush (synchronous_commit
    off for this one transaction). Only for writes a database crash may lose: a crash loses at
    most the unflushed tail, and every later durable commit flushes it too. So the reply and
    the result writes may be lost together with whatever followed them, which looks exactly
    like a worker that died before writing them (the model is asked again; a call whose result
    is lost is reported as interrupted, never run again). An intent is always durable before
    its call starts.
    """
    run = _quote(MotorRun._meta.db_table)
    if release:
        sets = (
            f"{_quote('lease_expires_at')} = NULL, {_quote('lease_owner')} = '', "
            f"{_quote('idle_since')} = STATEMENT_TIMESTAMP()"
        )
    else:
        sets = f"{_quote('lease_expires_at')} = STATEMENT_TIMESTAMP() + %s"
    unflushed = "" if durable else "FROM (SELECT set_config('synchronous_commit', 'off', true)) u "
    return (
        f"WITH fence AS (UPDATE {run} SET {sets}, {_quote('redelivery_count')} = 0 {unflushed}"  # noqa: S608 - quoted model names; values are parameters
        f"WHERE {_quote('id')} = %s AND {_quote('lease_token')} = %s RETURNING 1)"
    )


def _fence_params(lease: Lease, release: bool) -> list[Any]:
    head: list[Any] = [] if release else [lease.lifetime]
    return [*head, lease.run_id, lease.token]


def _execute(
    sql: str, params: list[Any], *, after_creation_of: str | None = None
) -> tuple[int, Any]:
    """Run one of these statements on PostgreSQL; (rows affected, first returned row or None).

    Through psycopg's own cursor with server-side parameters, prepared once per connection
    (pooled connections keep them): these few statements run several times per iteration, and
    planning them and quoting their JSON into the SQL text would cost more than running them.
    Errors are Django's (IntegrityError, ...), as from any ORM query.

    `after_creation_of` (a run id): first wait for that run's creation to end, if it is still
    in progress (`_insert_announced`) — a shared wait on its creation lock, sent with the
    statement in one round trip and one transaction, so the statement reads after the wait
    and sees the run if its creation committed.
    """
    connection = connections[DEFAULT_DB_ALIAS]
    connection.ensure_connection()
    conn = connection.connection
    # Django's connections make client-side-binding cursors; this one binds on the server.
    with connection.wrap_database_errors, psycopg.Cursor(conn) as cursor:
        if after_creation_of is None:
            cursor.execute(sql, params, prepare=True)
        else:
            with conn.pipeline(), psycopg.Cursor(conn) as wait:
                key = [CREATION_LOCK, _creation_key(after_creation_of)]
                wait.execute(_AWAIT_CREATION, key, prepare=True)
                cursor.execute(sql, params, prepare=True)
        # (`description` would build a column object per returned column on every call)
        result = cursor.pgresult
        row = cursor.fetchone() if result is not None and result.nfields else None
        return cursor.rowcount, row


def ledger_record_reply(
    lease: Lease,
    attempt: Attempt,
    message: dict[str, Any],
    *,
    intent: Step | None = None,
    single_statement: bool | None = None,
) -> None:
    """Append the model's reply to the attempt's messages and count the iteration; with
    `intent` (unsaved, for the new iteration), also insert that call's Step row in the same
    write, durably, so the call may start once this returns.

    `attempt` (and `intent`'s primary key) are updated in memory once the write succeeded.
    """
    iteration = attempt.iteration + 1
    if _single_statement(single_statement):
        table = _quote(Attempt._meta.db_table)
        messages = _quote("messages")
        update = (
            f"UPDATE {table} SET {messages} = {messages} || %s, "  # noqa: S608 - quoted model names; values are parameters
            f"{_quote('iteration')} = %s WHERE {_quote('id')} = %s AND EXISTS (SELECT 1 FROM fence)"
        )
        params = [
            *_fence_params(lease, False),
            _prep(Attempt, "messages", [message]),
            iteration,
            attempt.pk,
        ]
        if intent is None:
            sql = f"{_fence_sql(False, durable=False)} {update}"
            if _execute(sql, params)[0] != 1:
                raise stale_lease(lease)
        else:
            insert, values = _insert_step(intent)
            sql = f"{_fence_sql(False)}, reply AS ({update} RETURNING 1) {insert} FROM reply"
            _insert_returning(lease, intent, sql, [*params, *values])
        attempt.iteration = iteration
        attempt.messages = [*attempt.messages, message]
        return
    with transaction.atomic():
        lease_fence(lease)
        attempt.iteration = iteration
        attempt.messages = [*attempt.messages, message]
        attempt.save(update_fields=["iteration", "messages"])
        if intent is not None:
            intent.save(force_insert=True)


@cache
def _step_columns() -> tuple[Field[Any, Any], ...]:
    return tuple(field for field in Step._meta.concrete_fields if not field.primary_key)


@cache
def _insert_step_sql() -> str:
    connection = connections[DEFAULT_DB_ALIAS]
    fields = _step_columns()
    columns = ", ".join(_quote(field.column) for field in fields)
    values = ", ".join(f"CAST(%s AS {field.db_type(connection)})" for field in fields)
    return f"INSERT INTO {_quote(Step._meta.db_table)} ({columns}) SELECT {values}"  # noqa: S608 - quoted model names; values are parameters


def _insert_step(step: Step) -> tuple[str, list[Any]]:
    """`INSERT INTO step (...) SELECT <values>` (the caller adds the FROM) and its values."""
    connection = connections[DEFAULT_DB_ALIAS]
    values = [
        field.get_db_prep_save(field.pre_save(step, True), connection) for field in _step_columns()
    ]
    return _insert_step_sql(), values


def _insert_returning(lease: Lease, step: Step, sql: str, params: list[Any]) -> None:
    count, row = _execute(f"{sql} RETURNING {_quote('id')}", params)
    if count != 1 or row is None:
        raise stale_lease(lease)
    step.pk = row[0]
    step._state.adding = False
    step._state.db = DEFAULT_DB_ALIAS


def ledger_add_intent(lease: Lease, step: Step, *, single_statement: bool | None = None) -> None:
    """Insert `step` (state intent, not yet saved), durably, and set its primary key."""
    if _single_statement(single_statement):
        insert, values = _insert_step(step)
        _insert_returning(
            lease,
            step,
            f"{_fence_sql(False)} {insert} FROM fence",
            [*_fence_params(lease, False), *values],
        )
        return
    with transaction.atomic():
        lease_fence(lease)
        step.save(force_insert=True)


def ledger_record_result(
    lease: Lease,
    attempt: Attempt,
    step: Step,
    result: dict[str, Any],
    tool_message: dict[str, Any],
    *,
    release: bool,
    single_statement: bool | None = None,
    audit: Any = None,
) -> None:
    """Mark `step` done with `result`, append `tool_message` to the attempt, and reset the
    unfinished-slice count; with `release`, also free the lease (the slice ends here). With
    `audit` (an unsaved `ToolCallAudit`), its row is inserted by the same write.

    The in-memory `step` and `attempt` are updated once the write succeeded. Queuing the next
    slice after a release is the caller's.
    """
    completed_at = timezone.now()
    duration_ms = int(result.get("duration_ms") or 0)
    if _single_statement(single_statement):
        steps, attempts = _quote(Step._meta.db_table), _quote(Attempt._meta.db_table)
        messages = _quote("messages")
        sql = (
            f"{_fence_sql(release, durable=False)}, done AS (UPDATE {steps} SET {_quote('state')} = %s, "  # noqa: S608 - quoted model names; values are parameters
            f"{_quote('result')} = %s, {_quote('duration_ms')} = %s, "
            f"{_quote('completed_at')} = %s WHERE {_quote('id')} = %s "
            f"AND EXISTS (SELECT 1 FROM fence) RETURNING 1) "
            f"{_audit_cte(audit)}"
            f"UPDATE {attempts} SET {messages} = {messages} || %s "
            f"WHERE {_quote('id')} = %s AND EXISTS (SELECT 1 FROM done)"
        )
        params = [
            *_fence_params(lease, release),
            StepState.DONE.value,
            _prep(Step, "result", result),
            duration_ms,
            _prep(Step, "completed_at", completed_at),
            step.pk,
            *_audit_params(audit),
            _prep(Attempt, "messages", [tool_message]),
            attempt.pk,
        ]
        if _execute(sql, params)[0] != 1:
            raise stale_lease(lease)
        _apply_result(attempt, step, result, tool_message, duration_ms, completed_at)
        return
    with transaction.atomic():
        lease_fence(lease, redelivery_count=0)
        _apply_result(attempt, step, result, tool_message, duration_ms, completed_at)
        step.save(update_fields=["state", "result", "duration_ms", "completed_at"])
        attempt.save(update_fields=["messages"])
        if audit is not None:
            audit.save(force_insert=True)
        if release and not lease_release(lease, slice_done=True):
            raise stale_lease(lease)


def _audit_fields(audit: Any) -> list[Any]:
    return [f for f in type(audit)._meta.concrete_fields if not f.primary_key]


def _audit_cte(audit: Any) -> str:
    """The audit row's INSERT as a CTE that runs only when the result was written."""
    if audit is None:
        return ""
    fields = _audit_fields(audit)
    table = _quote(type(audit)._meta.db_table)
    columns = ", ".join(_quote(f.column) for f in fields)
    values = ", ".join(["%s"] * len(fields))
    return (
        f", audit AS (INSERT INTO {table} ({columns}) SELECT {values} "  # noqa: S608 - quoted model names; values are parameters
        f"WHERE EXISTS (SELECT 1 FROM done) RETURNING 1) "
    )


def _audit_params(audit: Any) -> list[Any]:
    if audit is None:
        return []
    connection = connections[DEFAULT_DB_ALIAS]
    return [f.get_db_prep_save(getattr(audit, f.attname), connection) for f in _audit_fields(audit)]


def _apply_result(
    attempt: Attempt,
    step: Step,
    result: dict[str, Any],
    tool_message: dict[str, Any],
    duration_ms: int,
    completed_at: Any,
) -> None:
    step.state = StepState.DONE
    step.result = result
    step.duration_ms = duration_ms
    step.completed_at = completed_at
    attempt.messages = [*attempt.messages, tool_message]


@cache
def _claim_sql(with_token: bool) -> str:
    """The claim statement of `ledger_claim`, for a message's token (`with_token`) or none.
    Parameters: run id; the claimability test's (owner; or token, owner, token + 1); owner, ttl;
    the status and time values of the start; the audit row's."""
    run_fields = MotorRun._meta.concrete_fields
    attempt_fields = Attempt._meta.concrete_fields
    runs, attempts = _quote(MotorRun._meta.db_table), _quote(Attempt._meta.db_table)
    events = _quote(RunEvent._meta.db_table)
    free = (
        "(r.lease_expires_at IS NULL OR r.lease_expires_at < STATEMENT_TIMESTAMP() "
        "OR r.lease_owner = %s)"
    )
    if not with_token:
        claimable = free
    else:
        claimable = (
            f"((r.lease_token = %s AND {free}) OR "
            "(r.lease_token = %s AND r.lease_expires_at < STATEMENT_TIMESTAMP()))"
        )
    return (
        # not flushed before it returns (see _fence_sql): a claim lost in a database crash
        # leaves the run as it was, and every later durable write of the slice flushes it
        f"WITH target AS (SELECT r.id, r.status AS was FROM {runs} r, "  # noqa: S608 - quoted names
        "(SELECT set_config('synchronous_commit', 'off', true)) u "
        f"WHERE r.id = %s AND {claimable} FOR UPDATE OF r), "
        f"claimed AS (UPDATE {runs} r SET lease_token = r.lease_token + 1, lease_owner = %s, "
        # the lease never outlives the run's own timeout (runs.lease.lease_ttl)
        "lease_expires_at = STATEMENT_TIMESTAMP() + LEAST(%s, r.timeout_s * INTERVAL '1 second'), "
        "redelivery_count = CASE WHEN r.status IN (%s, %s) THEN r.redelivery_count + 1 "
        "ELSE r.redelivery_count END, "
        "status = CASE WHEN r.status = %s THEN %s ELSE r.status END, "
        "started_at = CASE WHEN r.status = %s THEN %s ELSE r.started_at END, "
        "updated_at = CASE WHEN r.status = %s THEN %s ELSE r.updated_at END "
        f"FROM target WHERE r.id = target.id RETURNING r.*, target.was), "
        f"event AS (INSERT INTO {events} (run_id, from_status, to_status, actor, detail, "
        "created_at) SELECT id, %s, %s, %s, %s, %s FROM claimed WHERE was = %s) "
        "SELECT "
        + ", ".join(f"c.{_quote(f.column)}" for f in run_fields)
        + ", "
        + ", ".join(f"a.{_quote(f.column)}" for f in attempt_fields)
        + f" FROM claimed c JOIN {attempts} a ON a.run_id = c.id "
        "AND a.index = c.current_attempt_index"
    )


def ledger_claim(
    *, run_id: str, owner: str, expected_token: int | None, actor: str
) -> tuple[Lease, MotorRun, Attempt] | None:
    """Claim the run for a slice (see `runs.lease.lease_claim_run`, counting the slice) and, when
    it is still `created`, start it (running, started_at, its audit row); return the lease, the
    run and its current attempt as they now are. None when it is not this caller's turn.

    On PostgreSQL all of it is one statement; elsewhere one ORM transaction.
    """
    if not _single_statement(None):
        return _claim_orm(run_id=run_id, owner=owner, expected_token=expected_token, actor=actor)
    params: list[Any] = (
        [owner] if expected_token is None else [expected_token, owner, expected_token + 1]
    )
    now = timezone.now()
    created, running = RunStatus.CREATED.value, RunStatus.RUNNING.value
    params = [
        run_id,
        *params,
        owner,
        lease_ttl(),
        created,
        running,
        created,
        running,
        created,
        now,
        created,
        now,
        created,
        running,
        actor,
        _prep(RunEvent, "detail", {}),
        now,
        created,
    ]
    sql = _claim_sql(expected_token is not None)
    # A run's first message (token 0) may come while run_start is still committing the run.
    row = _execute(sql, params, after_creation_of=run_id if expected_token == 0 else None)[1]
    if row is None:
        return None
    run_fields, attempt_fields = MotorRun._meta.concrete_fields, Attempt._meta.concrete_fields
    run = _hydrate(MotorRun, run_fields, row[: len(run_fields)])
    attempt = _hydrate(Attempt, attempt_fields, row[len(run_fields) :])
    lease = Lease(run_id=run_id, token=run.lease_token, owner=owner, ttl=lease_ttl(run.timeout_s))
    return lease, run, attempt


def _hydrate(model: type[Any], fields: Any, values: Any) -> Any:
    """A model instance from one row of its concrete columns, as the ORM would load it."""
    connection = connections[DEFAULT_DB_ALIAS]
    converted = [
        field.from_db_value(value, None, connection)
        if value is not None and hasattr(field, "from_db_value")
        else value
        for field, value in zip(fields, values, strict=True)
    ]
    return model.from_db(DEFAULT_DB_ALIAS, [field.attname for field in fields], converted)


def _claim_orm(
    *, run_id: str, owner: str, expected_token: int | None, actor: str
) -> tuple[Lease, MotorRun, Attempt] | None:
    return _claimed(
        lease_claim_run, run_id=run_id, owner=owner, expected_token=expected_token, actor=actor
    )


def ledger_take_over(
    *, run_id: str, owner: str, expected_token: int | None, actor: str
) -> tuple[Lease, MotorRun, Attempt] | None:
    """Claim a run whose live lease belongs to a dead local process (see
    `runs.lease.lease_take_over_from_dead`), starting it when still `created`, like
    `ledger_claim`. None when its holder is alive or elsewhere."""
    return _claimed(
        lease_take_over_from_dead,
        run_id=run_id,
        owner=owner,
        expected_token=expected_token,
        actor=actor,
    )


def _claimed(
    claim: Any, *, run_id: str, owner: str, expected_token: int | None, actor: str
) -> tuple[Lease, MotorRun, Attempt] | None:
    """`claim` (one of runs.lease's claims, counting the slice) as one ORM transaction with the
    start of a created run and the read of its current attempt."""
    with transaction.atomic():
        claimed = claim(run_id=run_id, owner=owner, expected_token=expected_token, count_slice=True)
        if claimed is None:
            return None
        lease, run = claimed
        if run.status == RunStatus.CREATED:
            _start(run, actor=actor)
        attempt = Attempt.objects.get(run_id=run_id, index=run.current_attempt_index)
    return lease, run, attempt


def _start(run: MotorRun, *, actor: str) -> None:
    """created → running, with its audit row. Inside the claim's transaction."""
    run.start(at=timezone.now())
    run.save(update_fields=["status", "started_at", "updated_at"])
    RunEvent.objects.create(
        run=run, from_status=RunStatus.CREATED, to_status=run.status, actor=actor, detail={}
    )


def ledger_insert(*objects: Any, announce: Callable[[], bool] | None = None) -> None:
    """Insert unsaved model instances whose primary keys are set or generated, all or none.

    Outside a transaction on PostgreSQL one statement (a data-modifying CTE per row), whose
    foreign keys are checked when it ends; otherwise the ORM's inserts in one transaction (or
    savepoint), whose foreign keys are checked when the outermost transaction commits.

    `announce` (the first object must be the new MotorRun) tells a worker about the run. It
    runs once the rows are sure to be found by the worker it reaches, and not at all when they
    are refused: on commit in general; outside a transaction on PostgreSQL once the rows are
    written and before their commit, under the run's creation lock (see `_insert_announced`),
    so the worker is on its way while the commit is flushed. `announce` returns False when the
    broker refused the message (unreachable): the run is created all the same, with its first
    wake-up in the outbox (runs.wakeups), in the same commit where there is one.
    """
    connection = connections[DEFAULT_DB_ALIAS]
    if not _single_statement(None) or connection.in_atomic_block:
        # Inside a transaction a savepoint keeps a refused insert from aborting it.
        with transaction.atomic():
            for obj in objects:
                obj.save(force_insert=True)
        if announce is not None:
            run_id = objects[0].pk

            def announce_or_remember() -> None:
                if not announce():
                    wakeup_remember(run_id, 0)

            # robust: the run has committed, so nothing after it may fail the start (a wake-up
            # neither sent nor kept is found by the reaper, as after a crash)
            transaction.on_commit(announce_or_remember, robust=True)
        return
    parts: list[str] = []
    params: list[Any] = []
    for obj in objects:
        fields = [
            field
            for field in obj._meta.concrete_fields
            if not (field.primary_key and getattr(obj, field.attname) is None)
        ]
        columns = ", ".join(_quote(field.column) for field in fields)
        values = ", ".join("%s" for _ in fields)
        table = _quote(obj._meta.db_table)
        parts.append(f"INSERT INTO {table} ({columns}) VALUES ({values})")  # noqa: S608
        params += [
            field.get_db_prep_save(field.pre_save(obj, True), connection) for field in fields
        ]
    *head, last = parts
    ctes = ", ".join(f"i{index} AS ({part})" for index, part in enumerate(head))
    sql = f"WITH {ctes} {last}" if ctes else last
    if announce is None:
        _execute(sql, params)
    else:
        _insert_announced(objects[0].pk, sql, params, announce)
    for obj in objects:
        obj._state.adding = False
        obj._state.db = DEFAULT_DB_ALIAS


# --- a run's creation and its first message ------------------------------------------------------

#: first key of the advisory lock a run's creation holds until its commit (the second key is
#: derived from the run id, `_creation_key`)
CREATION_LOCK = 0x6D63
#: a creating transaction left idle this long (its announcement stuck) is ended by PostgreSQL,
#: which releases a worker waiting for it; the creation then fails and nothing is created
CREATION_IDLE_TIMEOUT = "10s"


_TAKE_CREATION_LOCK = "SELECT pg_advisory_xact_lock(%s, %s)"
#: runs.wakeups.wakeup_remember, inside the creating transaction
_REMEMBER_WAKEUP = (
    f"INSERT INTO {PendingWakeup._meta.db_table} (run_id, token, created_at) "  # noqa: S608 - our table
    "VALUES (%s, %s, STATEMENT_TIMESTAMP()) ON CONFLICT DO NOTHING"
)
_AWAIT_CREATION = "SELECT pg_advisory_xact_lock_shared(%s, %s)"


def _creation_key(run_id: str) -> int:
    """The run's creation lock's second key: a signed 32-bit hash of its id (two runs that share
    one only make a first claim wait for the other's commit, never for longer)."""
    return zlib.crc32(run_id.encode()) - 2**31


def _insert_announced(
    run_id: str, sql: str, params: list[Any], announce: Callable[[], bool]
) -> None:
    """Insert a new run with `sql`, call `announce` (its first message), then commit, so that
    the worker's wake-up overlaps the commit.

    One round trip opens the transaction, takes the run's creation lock and inserts, with the
    foreign keys checked at once: a refused run (unknown agent, agent busy) fails before it is
    announced. A first claim (`ledger_claim` for token 0) waits for the creation lock before
    it reads, so it finds the run once committed, or nothing (and drops the message) if the
    commit fails or the creator dies before it. A message the broker refused goes to the
    outbox in the same transaction.
    """
    connection = connections[DEFAULT_DB_ALIAS]
    connection.ensure_connection()
    conn = connection.connection
    with connection.wrap_database_errors, psycopg.Cursor(conn) as cursor:
        try:
            with conn.pipeline():
                cursor.execute("BEGIN")
                cursor.execute(
                    f"SET LOCAL idle_in_transaction_session_timeout = '{CREATION_IDLE_TIMEOUT}'"
                )
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
                cursor.execute(
                    _TAKE_CREATION_LOCK, [CREATION_LOCK, _creation_key(run_id)], prepare=True
                )
                cursor.execute(sql, params, prepare=True)
            if not announce():
                cursor.execute(_REMEMBER_WAKEUP, [run_id, 0], prepare=True)
            cursor.execute("COMMIT")
        except BaseException:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                with contextlib.suppress(psycopg.Error):
                    cursor.execute("ROLLBACK")
            raise
