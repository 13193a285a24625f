"""The run loop's frequent fenced writes: each a short transaction of a few prepared statements.

A slice starts with its claim (and, for a new run, the start); then each iteration writes twice:
the model's reply with the intent of its first tool call, then the call's result (a further call
of the same reply has an intent write of its own). Each write must prove the slice's lease
(`runs.lease`) before it changes anything. Here a write is one transaction of plain SQL
statements, the same on PostgreSQL and SQLite: first the fencing UPDATE (it renews the lease, or
frees it when the slice ends with this write, and holds the run's row lock until the commit),
then the writes it guards, each of which also requires the slice's token, so a stale slice
changes nothing. On PostgreSQL the statements are prepared, bound on the server and sent with
their BEGIN and COMMIT in one round trip (psycopg's pipeline); SQLite runs in the process and
needs no such care. Through the ORM the same write cost several round trips and most of its
time was Python building SQL (docs/design-notes.md measures both).

The SQL is the same on both databases but for `_now`, `_later`, `_append` and `_typed`.
Each writing function raises LeaseLost, having changed nothing, when the slice's token is stale.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import Field
from django.utils import timezone

from runs.lease import Lease, lease_take_over_from_dead, lease_ttl, stale_lease
from runs.models import Attempt, MotorRun, RunEvent, RunStatus, Step, StepState
from runs.wakeups import wakeup_remember

#: one statement of a write: SQL with %s placeholders, its parameters, and whether it returns rows
Statement = tuple[str, Sequence[Any], bool]

# The functions building SQL text are cached; their `postgresql` argument is the cache's key,
# since the text follows the dialect of the default database (the `_now` … `_typed` below).


def _connection() -> Any:
    return connections[DEFAULT_DB_ALIAS]


def _postgresql() -> bool:
    return bool(_connection().vendor == "postgresql")


def _quote(name: str) -> str:
    return str(_connection().ops.quote_name(name))


def _prep(model: type[Any], name: str, value: Any) -> Any:
    field = model._meta.get_field(name)
    return field.get_db_prep_save(value, _connection())


# --- the dialect's words -------------------------------------------------------------------------


def _now() -> str:
    """The database's time (the lease's clock), as a value of a DateTimeField column."""
    if _postgresql():
        return "STATEMENT_TIMESTAMP()"
    return "STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'now')"  # Django's own form of Now() on SQLite


def _later(seconds: str) -> str:
    """The database's time plus the SQL expression `seconds`."""
    if _postgresql():
        return f"STATEMENT_TIMESTAMP() + ({seconds}) * INTERVAL '1 second'"
    return f"STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'now', ({seconds}) || ' seconds')"


def _append(column: str) -> str:
    """The JSON array in `column` with one more element, the JSON text of a parameter."""
    if _postgresql():
        return f"{column} || jsonb_build_array(CAST(%s AS jsonb))"
    return f"json_insert({column}, '$[#]', json(%s))"


def _typed(field: Field[Any, Any]) -> str:
    """A parameter for `field`'s column in a SELECT list: PostgreSQL gives an untyped one the
    type text, which does not convert to every column type (jsonb); SQLite needs no type."""
    if _postgresql():
        return f"CAST(%s AS {field.db_type(_connection())})"
    return "%s"


# --- one write -----------------------------------------------------------------------------------


def _write(statements: Sequence[Statement], *, durable: bool = True) -> list[tuple[int, Any]]:
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
    connection = _connection()
    if not _postgresql():
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
    """`_write` on PostgreSQL: the transaction in one round trip, each statement prepared once
    per connection (pooled connections keep them) with its parameters bound on the server:
    these few statements run several times per iteration, and planning them and quoting their
    JSON into the SQL text would cost more than running them."""
    connection = _connection()
    connection.ensure_connection()
    conn = connection.connection
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
            f"{_quote('lease_expires_at')} = NULL, {_quote('lease_owner')} = '', "
            f"{_quote('idle_since')} = {_now()}"
        )
    else:
        sets = f"{_quote('lease_expires_at')} = {_later('%s')}"
    if counting:
        sets += (
            f", {_quote('iterations')} = {_quote('iterations')} + 1, "
            f"{_quote('energy_cost')} = {_quote('energy_cost')} + %s"
        )
    return (
        f"UPDATE {_quote(MotorRun._meta.db_table)} SET {sets}, {_quote('redelivery_count')} = 0 "  # noqa: S608 - quoted model names; values are parameters
        f"WHERE {_quote('id')} = %s AND {_quote('lease_token')} = %s"
    )


def _fence(lease: Lease, *, release: bool = False, charge: float | None = None) -> Statement:
    head: list[Any] = [] if release else [lease.lifetime.total_seconds()]
    if charge is not None:
        head.append(charge)
    sql = _fence_sql(release, _postgresql(), charge is not None)
    return sql, [*head, lease.run_id, lease.token], False


@cache
def _held_sql(postgresql: bool) -> str:
    """A guarded write's condition: the slice's token is still the run's (parameters: run id,
    token). Once the fence matched, its row lock keeps it so until the commit."""
    return (
        f"EXISTS (SELECT 1 FROM {_quote(MotorRun._meta.db_table)} "  # noqa: S608 - quoted names
        f"WHERE {_quote('id')} = %s AND {_quote('lease_token')} = %s)"
    )


def _held(lease: Lease) -> list[Any]:
    """The parameters of `_held_sql` for `lease`."""
    return [lease.run_id, lease.token]


def _fenced(
    lease: Lease,
    statements: Sequence[Statement],
    *,
    release: bool = False,
    durable: bool,
    charge: float | None = None,
) -> list[tuple[int, Any]]:
    """The fence, then `statements` (each guarded by `_held`), as one write; LeaseLost when the
    fence did not match (and so nothing changed). With `charge`, the fence counts an iteration
    of the run and adds the charge to its energy cost."""
    fence = _fence(lease, release=release, charge=charge)
    results = _write([fence, *statements], durable=durable)
    if results[0][0] != 1:
        raise stale_lease(lease)
    return results[1:]


# --- the writes of an iteration ------------------------------------------------------------------


@cache
def _reply_sql(postgresql: bool) -> str:
    held = _held_sql(postgresql)
    added = ", ".join(
        f"{_quote(column)} = {_quote(column)} + %s"
        for column in ("prompt_tokens", "completion_tokens", "energy_cost")
    )
    return (
        f"UPDATE {_quote(Attempt._meta.db_table)} SET {_quote('messages')} = "  # noqa: S608 - quoted model names; values are parameters
        f"{_append(_quote('messages'))}, {_quote('iteration')} = %s, "
        f"{_quote('llm_calls')} = {_quote('llm_calls')} + 1, {added} "
        f"WHERE {_quote('id')} = %s AND {held}"
    )


def _agent_model() -> Any:
    # the runtime names no brain-side module: the run's own foreign key knows the table
    return MotorRun._meta.get_field("agent").related_model


def _energy_level_sql(postgresql: bool) -> str:
    """An agent's energy now as an SQL expression over its row: the stored level plus
    regeneration since `last_energy_at`, at most 1.0 (cognition.energy.energy_level's rule).
    Parameter: the regeneration per hour."""
    energy, since = _quote("energy"), _quote("last_energy_at")
    if postgresql:
        hours = f"CAST(EXTRACT(EPOCH FROM ({_now()} - {since})) AS double precision) / 3600.0"
        least = "LEAST"
    else:
        hours = f"(julianday('now') - julianday({since})) * 24.0"
        least = "MIN"
    return f"{least}(1.0, {energy} + CASE WHEN {since} IS NULL THEN 0.0 ELSE %s * {hours} END)"


@cache
def _charge_sql(postgresql: bool) -> str:
    """Take an iteration's charge from the agent: its level now minus the charge (never below
    0), stamped now. Parameters: regeneration per hour, charge, agent id, then `_held`'s."""
    greatest = "GREATEST" if postgresql else "MAX"
    level = _energy_level_sql(postgresql)
    return (
        f"UPDATE {_quote(_agent_model()._meta.db_table)} SET "  # noqa: S608 - quoted model names; values are parameters
        f"{_quote('energy')} = {greatest}(0.0, {level} - %s), "
        f"{_quote('last_energy_at')} = {_now()} "
        f"WHERE {_quote('id')} = %s AND {_held_sql(postgresql)}"
    )


def ledger_energy_level(agent_id: int) -> float:
    """The energy agent `agent_id` has now (0.0 when it no longer exists). One read."""
    sql = (
        f"SELECT {_energy_level_sql(_postgresql())} "  # noqa: S608 - quoted model names
        f"FROM {_quote(_agent_model()._meta.db_table)} WHERE {_quote('id')} = %s"
    )
    with _connection().cursor() as cursor:
        cursor.execute(sql, [_regen_per_hour(), agent_id])
        row = cursor.fetchone()
    return round(float(row[0]), 6) if row else 0.0


def _regen_per_hour() -> float:
    return float(settings.MOTOR_ENERGY_REGEN_PER_HOUR)


def ledger_record_reply(
    lease: Lease,
    attempt: Attempt,
    message: dict[str, Any],
    *,
    intent: Step | None = None,
    run: MotorRun | None = None,
    charge: float = 0.0,
    tokens: tuple[int, int] = (0, 0),
) -> None:
    """Append the model's reply to the attempt's messages and count the iteration, the LLM call
    and the `tokens` (prompt, completion) its answer reported; with `intent` (unsaved, for the
    new iteration), also insert that call's Step row in the same write, durably, so the call
    may start once this returns.

    With `run`, the run's iteration is counted too and `charge` (the iteration's energy, see
    runs.accounting) is added to the run's and the attempt's energy cost and taken from the
    run's agent (never below 0), all in this same write: what the run says it cost is what
    the agent lost.

    `attempt`, `run` (and `intent`'s primary key) are updated in memory once the write
    succeeded.
    """
    iteration = attempt.iteration + 1
    held = _held(lease)
    charged = charge if run is not None else 0.0
    reply_params = [json.dumps(message), iteration, *tokens, charged, attempt.pk, *held]
    statements: list[Statement] = [(_reply_sql(_postgresql()), reply_params, False)]
    if intent is not None:
        statements.append(_insert_step(lease, intent))
    if run is not None and charged > 0:
        agent_params = [_regen_per_hour(), charged, run.agent_id, *held]
        statements.append((_charge_sql(_postgresql()), agent_params, False))
    results = _fenced(
        lease,
        statements,
        # a lost charge is lost with its reply, which is then asked for and charged again
        durable=intent is not None,
        charge=charged if run is not None else None,
    )
    if intent is not None:
        _saved(intent, results[1])
    attempt.iteration = iteration
    attempt.messages = [*attempt.messages, message]
    attempt.llm_calls += 1
    attempt.prompt_tokens += tokens[0]
    attempt.completion_tokens += tokens[1]
    attempt.energy_cost += charged
    if run is not None:
        run.iterations += 1
        run.energy_cost += charged


@cache
def _step_columns() -> tuple[Field[Any, Any], ...]:
    return tuple(field for field in Step._meta.concrete_fields if not field.primary_key)


@cache
def _insert_step_sql(postgresql: bool) -> str:
    fields = _step_columns()
    columns = ", ".join(_quote(field.column) for field in fields)
    values = ", ".join(_typed(field) for field in fields)
    return (
        f"INSERT INTO {_quote(Step._meta.db_table)} ({columns}) SELECT {values} "  # noqa: S608 - quoted model names; values are parameters
        f"WHERE {_held_sql(postgresql)} RETURNING {_quote('id')}"
    )


def _insert_step(lease: Lease, step: Step) -> Statement:
    """The guarded insert of `step` (unsaved), returning its id."""
    connection = _connection()
    values = [
        field.get_db_prep_save(field.pre_save(step, True), connection) for field in _step_columns()
    ]
    held = _held(lease)
    return _insert_step_sql(_postgresql()), [*values, *held], True


def _saved(step: Step, result: tuple[int, Any]) -> None:
    """`step` as inserted by `_insert_step` (its primary key set, no longer adding)."""
    count, row = result
    if count != 1 or row is None:  # the fence matched, so the guard did too
        raise RuntimeError(f"the intent of {step.tool_call_id} was not inserted")
    step.pk = row[0]
    step._state.adding = False
    step._state.db = DEFAULT_DB_ALIAS


def ledger_add_intent(lease: Lease, step: Step) -> None:
    """Insert `step` (state intent, not yet saved), durably, and set its primary key."""
    results = _fenced(lease, [_insert_step(lease, step)], durable=True)
    _saved(step, results[0])


@cache
def _result_sql(postgresql: bool) -> tuple[str, str]:
    held = _held_sql(postgresql)
    step = (
        f"UPDATE {_quote(Step._meta.db_table)} SET {_quote('state')} = %s, "  # noqa: S608 - quoted model names; values are parameters
        f"{_quote('result')} = %s, {_quote('duration_ms')} = %s, {_quote('completed_at')} = %s "
        f"WHERE {_quote('id')} = %s AND {held}"
    )
    attempt = (
        f"UPDATE {_quote(Attempt._meta.db_table)} SET {_quote('messages')} = "  # noqa: S608 - quoted model names; values are parameters
        f"{_append(_quote('messages'))} WHERE {_quote('id')} = %s AND {held}"
    )
    return step, attempt


@cache
def _audit_columns(model: type[Any]) -> tuple[Field[Any, Any], ...]:
    return tuple(field for field in model._meta.concrete_fields if not field.primary_key)


@cache
def _insert_audit_sql(model: type[Any], postgresql: bool) -> str:
    fields = _audit_columns(model)
    columns = ", ".join(_quote(field.column) for field in fields)
    values = ", ".join(_typed(field) for field in fields)
    return (
        f"INSERT INTO {_quote(model._meta.db_table)} ({columns}) SELECT {values} "  # noqa: S608 - quoted model names; values are parameters
        f"WHERE {_held_sql(postgresql)}"
    )


def _insert_audit(lease: Lease, audit: Any) -> Statement:
    """The guarded insert of the audit row `audit` (an unsaved ToolCallAudit)."""
    connection = _connection()
    model = type(audit)
    values = [
        field.get_db_prep_save(field.pre_save(audit, True), connection)
        for field in _audit_columns(model)
    ]
    return _insert_audit_sql(model, _postgresql()), [*values, *_held(lease)], False


def ledger_record_result(
    lease: Lease,
    attempt: Attempt,
    step: Step,
    result: dict[str, Any],
    tool_message: dict[str, Any],
    *,
    release: bool,
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
    step_sql, attempt_sql = _result_sql(_postgresql())
    held = _held(lease)
    step_params = [
        StepState.DONE.value,
        _prep(Step, "result", result),
        duration_ms,
        _prep(Step, "completed_at", completed_at),
        step.pk,
        *held,
    ]
    attempt_params = [json.dumps(tool_message), attempt.pk, *held]
    statements: list[Statement] = [
        (step_sql, step_params, False),
        (attempt_sql, attempt_params, False),
    ]
    if audit is not None:
        statements.append(_insert_audit(lease, audit))
    _fenced(
        lease,
        statements,
        release=release,
        durable=False,
    )
    step.state = StepState.DONE
    step.result = result
    step.duration_ms = duration_ms
    step.completed_at = completed_at
    attempt.messages = [*attempt.messages, tool_message]


# --- the claim -----------------------------------------------------------------------------------


@cache
def _claim_sql(with_token: bool, postgresql: bool) -> tuple[str, str, str]:
    """The claim's three statements: the claim itself (returning the run as claimed), the audit
    row of the start it makes of a created run, and the read of the run's current attempt.
    Parameters of the claim: owner; seconds the lease lives; the status and time values of the
    start; run id; the claimability test's (owner; or token, owner, token + 1)."""
    runs, attempts = _quote(MotorRun._meta.db_table), _quote(Attempt._meta.db_table)
    status, lease_token = _quote("status"), _quote("lease_token")
    expires, owner_column = _quote("lease_expires_at"), _quote("lease_owner")
    timeout, redelivery = _quote("timeout_s"), _quote("redelivery_count")
    started, updated = _quote("started_at"), _quote("updated_at")
    free = f"({expires} IS NULL OR {expires} < {_now()} OR {owner_column} = %s)"
    if not with_token:
        claimable = free
    else:
        claimable = (
            f"(({lease_token} = %s AND {free}) OR ({lease_token} = %s AND {expires} < {_now()}))"
        )
    returned = ", ".join(_quote(f.column) for f in MotorRun._meta.concrete_fields)
    claim = (
        f"UPDATE {runs} SET {lease_token} = {lease_token} + 1, {owner_column} = %s, "  # noqa: S608 - quoted names; values are parameters
        # the lease never outlives the run's own timeout (runs.lease.lease_ttl)
        f"{expires} = {_later(f'CASE WHEN {timeout} < %s THEN {timeout} ELSE %s END')}, "
        f"{redelivery} = CASE WHEN {status} IN (%s, %s) THEN {redelivery} + 1 "
        f"ELSE {redelivery} END, "
        f"{started} = CASE WHEN {status} = %s THEN %s ELSE {started} END, "
        f"{updated} = CASE WHEN {status} = %s THEN %s ELSE {updated} END, "
        f"{status} = CASE WHEN {status} = %s THEN %s ELSE {status} END "
        f"WHERE {_quote('id')} = %s AND {claimable} RETURNING {returned}"
    )
    # The claim started the run exactly when it stamped this claim's own start time on it.
    event_columns = ("run_id", "from_status", "to_status", "actor", "detail", "created_at")
    event_fields = [RunEvent._meta.get_field(name) for name in event_columns[1:]]
    event = (
        f"INSERT INTO {_quote(RunEvent._meta.db_table)} "  # noqa: S608 - quoted names
        f"({', '.join(_quote(f.column) for f in (RunEvent._meta.get_field('run'), *event_fields))}) "
        f"SELECT {_quote('id')}, {', '.join(_typed(f) for f in event_fields)} FROM {runs} "
        f"WHERE {_quote('id')} = %s AND {owner_column} = %s AND {started} = %s"
    )
    attempt = (
        "SELECT "  # noqa: S608 - quoted names
        + ", ".join(f"a.{_quote(f.column)}" for f in Attempt._meta.concrete_fields)
        + f" FROM {attempts} a JOIN {runs} r ON a.{_quote('run_id')} = r.{_quote('id')} "
        f"AND a.{_quote('index')} = r.{_quote('current_attempt_index')} "
        f"WHERE r.{_quote('id')} = %s AND r.{owner_column} = %s"
    )
    return claim, event, attempt


def ledger_claim(
    *, run_id: str, owner: str, expected_token: int | None, actor: str
) -> tuple[Lease, MotorRun, Attempt] | None:
    """Claim the run for a slice and, when it is still `created`, start it (running,
    started_at, its audit row); return the lease, the run and its current attempt as they now
    are. None when it is not this caller's turn. One write.

    Claimable: without `expected_token`, a lease that is free, expired or already `owner`'s;
    with it (the token a wake-up message was sent for), also when the run's token moved one
    past it and that newer lease expired unreleased (the slice that took this very message
    stalled or died); a released lease at a newer token means the message was already served.
    The claim bumps the token, stamps owner and expiry (database time, never past the run's
    own timeout) and counts the slice (`redelivery_count` of a created or running run; the
    slice resets it when it ends).
    """
    now = _prep(MotorRun, "started_at", timezone.now())
    created, running = RunStatus.CREATED.value, RunStatus.RUNNING.value
    seconds = lease_ttl().total_seconds()
    test: list[Any] = (
        [owner] if expected_token is None else [expected_token, owner, expected_token + 1]
    )
    claim_params = [
        owner,
        *(seconds, seconds),
        *(created, running),
        *(created, now),
        *(created, now),
        *(created, running),
        run_id,
        *test,
    ]
    event_params = [
        created,
        running,
        actor,
        _prep(RunEvent, "detail", {}),
        _prep(RunEvent, "created_at", timezone.now()),
        run_id,
        owner,
        now,
    ]
    claim, event, read = _claim_sql(expected_token is not None, _postgresql())
    results = _write(
        [(claim, claim_params, True), (event, event_params, False), (read, [run_id, owner], True)],
        durable=False,
    )
    (claimed, run_row), _, (_, attempt_row) = results
    if not claimed or run_row is None or attempt_row is None:
        return None
    run = _hydrate(MotorRun, MotorRun._meta.concrete_fields, run_row)
    attempt = _hydrate(Attempt, Attempt._meta.concrete_fields, attempt_row)
    lease = Lease(run_id=run_id, token=run.lease_token, owner=owner, ttl=lease_ttl(run.timeout_s))
    return lease, run, attempt


def _hydrate(model: type[Any], fields: Any, values: Any) -> Any:
    """A model instance from one row of its concrete columns, as the ORM would load it."""
    connection = _connection()
    converted = []
    for field, value in zip(fields, values, strict=True):
        # the database backend's converters, then the field's, as a query's compiler applies them
        column = field.get_col(model._meta.db_table)
        converters = connection.ops.get_db_converters(column) + field.get_db_converters(connection)
        for converter in converters:
            value = converter(value, column, connection)
        converted.append(value)
    return model.from_db(DEFAULT_DB_ALIAS, [field.attname for field in fields], converted)


def ledger_take_over(
    *, run_id: str, owner: str, expected_token: int | None, actor: str
) -> tuple[Lease, MotorRun, Attempt] | None:
    """Claim a run whose live lease belongs to a dead local process (see
    `runs.lease.lease_take_over_from_dead`), starting it when still `created`, like
    `ledger_claim`. None when its holder is alive or elsewhere. Rare (after a worker died):
    one ORM transaction."""
    with transaction.atomic():
        claimed = lease_take_over_from_dead(
            run_id=run_id, owner=owner, expected_token=expected_token, count_slice=True
        )
        if claimed is None:
            return None
        lease, run = claimed
        if run.status == RunStatus.CREATED:
            run.start(at=timezone.now())
            run.save(update_fields=["status", "started_at", "updated_at"])
            RunEvent.objects.create(
                run=run, from_status=RunStatus.CREATED, to_status=run.status, actor=actor, detail={}
            )
        attempt = Attempt.objects.get(run_id=run_id, index=run.current_attempt_index)
    return lease, run, attempt


# --- a run's creation ----------------------------------------------------------------------------


def ledger_insert(*objects: Any, announce: Callable[[], bool] | None = None) -> None:
    """Insert unsaved model instances whose primary keys are set or generated, all or none, in
    one write (inside a caller's transaction, a savepoint of it: a refused insert leaves the
    transaction usable). Foreign keys are checked when the outermost transaction commits.

    `announce` (the first object must be the new MotorRun) tells a worker about the run, once
    the rows have committed (at once outside a transaction), and not at all when they are
    refused. It returns False when the broker refused the message (unreachable): the run stays
    created, with its first wake-up in the outbox (runs.wakeups). Nothing after the commit
    fails the creation: an announcement that raises is logged, and its run is found by the
    reaper as after a crash.
    """
    connection = _connection()
    statements: list[Statement] = []
    for obj in objects:
        fields = [
            field
            for field in obj._meta.concrete_fields
            if not (field.primary_key and getattr(obj, field.attname) is None)
        ]
        columns = ", ".join(_quote(field.column) for field in fields)
        values = ", ".join("%s" for _ in fields)
        table = _quote(obj._meta.db_table)
        sql = f"INSERT INTO {table} ({columns}) VALUES ({values}) RETURNING {_quote(obj._meta.pk.column)}"  # noqa: S608 - quoted model names; values are parameters
        params = [field.get_db_prep_save(field.pre_save(obj, True), connection) for field in fields]
        statements.append((sql, params, True))
    results = _write(statements)
    for obj, (_, row) in zip(objects, results, strict=True):
        if obj.pk is None:
            obj.pk = row[0]
        obj._state.adding = False
        obj._state.db = DEFAULT_DB_ALIAS
    if announce is None:
        return
    run_id = objects[0].pk

    def announce_or_remember() -> None:
        if not announce():
            wakeup_remember(run_id, 0)

    transaction.on_commit(announce_or_remember, robust=True)
