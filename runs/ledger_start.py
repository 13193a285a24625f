"""The writes that begin things: a slice's claim of its run (with a new run's start), the rare
take-over from a dead local process, and a run's creation. Fenced writes as in
`runs.fenced_write`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from django.db import DEFAULT_DB_ALIAS, transaction
from django.utils import timezone

from runs.fenced_write import (
    Statement,
    db_connection,
    on_postgresql,
    prep,
    quote,
    sql_later,
    sql_now,
    sql_typed,
    write,
)
from runs.lease import Lease, lease_take_over_from_dead, lease_ttl
from runs.models import Attempt, MotorRun, RunEvent, RunStatus
from runs.wakeups import wakeup_remember

# --- the claim -----------------------------------------------------------------------------------


@cache
def _claim_sql(with_token: bool, postgresql: bool) -> tuple[str, str, str]:
    """The claim's three statements: the claim itself (returning the run as claimed), the audit
    row of the start it makes of a created run, and the read of the run's current attempt.
    Parameters of the claim: owner; seconds the lease lives; the status and time values of the
    start; run id; the claimability test's (owner; or token, owner, token + 1)."""
    runs, attempts = quote(MotorRun._meta.db_table), quote(Attempt._meta.db_table)
    status, lease_token = quote("status"), quote("lease_token")
    expires, owner_column = quote("lease_expires_at"), quote("lease_owner")
    timeout, redelivery = quote("timeout_s"), quote("redelivery_count")
    started, updated = quote("started_at"), quote("updated_at")
    free = f"({expires} IS NULL OR {expires} < {sql_now()} OR {owner_column} = %s)"
    if not with_token:
        claimable = free
    else:
        claimable = (
            f"(({lease_token} = %s AND {free}) OR ({lease_token} = %s AND {expires} < {sql_now()}))"
        )
    returned = ", ".join(quote(f.column) for f in MotorRun._meta.concrete_fields)
    claim = (
        f"UPDATE {runs} SET {lease_token} = {lease_token} + 1, {owner_column} = %s, "  # noqa: S608 - quoted names; values are parameters
        # the lease never outlives the run's own timeout (runs.lease.lease_ttl)
        f"{expires} = {sql_later(f'CASE WHEN {timeout} < %s THEN {timeout} ELSE %s END')}, "
        f"{redelivery} = CASE WHEN {status} IN (%s, %s) THEN {redelivery} + 1 "
        f"ELSE {redelivery} END, "
        f"{started} = CASE WHEN {status} = %s THEN %s ELSE {started} END, "
        f"{updated} = CASE WHEN {status} = %s THEN %s ELSE {updated} END, "
        f"{status} = CASE WHEN {status} = %s THEN %s ELSE {status} END "
        f"WHERE {quote('id')} = %s AND {claimable} RETURNING {returned}"
    )
    # The claim started the run exactly when it stamped this claim's own start time on it.
    event_columns = ("run_id", "from_status", "to_status", "actor", "detail", "created_at")
    event_fields = [RunEvent._meta.get_field(name) for name in event_columns[1:]]
    event = (
        f"INSERT INTO {quote(RunEvent._meta.db_table)} "  # noqa: S608 - quoted names
        f"({', '.join(quote(f.column) for f in (RunEvent._meta.get_field('run'), *event_fields))}) "
        f"SELECT {quote('id')}, {', '.join(sql_typed(f) for f in event_fields)} FROM {runs} "
        f"WHERE {quote('id')} = %s AND {owner_column} = %s AND {started} = %s"
    )
    # with the run's agent and skill, as far as a slice reads them (its policy, its log lines)
    agents, skills = (quote(model._meta.db_table) for model in (_agent_model(), _skill_model()))
    attempt = (
        "SELECT "  # noqa: S608 - quoted names
        + ", ".join(f"a.{quote(f.column)}" for f in Attempt._meta.concrete_fields)
        + ", "
        + ", ".join(f"g.{quote(f.column)}" for f in _agent_fields())
        + ", "
        + ", ".join(f"s.{quote(f.column)}" for f in _skill_fields())
        + f" FROM {attempts} a JOIN {runs} r ON a.{quote('run_id')} = r.{quote('id')} "
        f"AND a.{quote('index')} = r.{quote('current_attempt_index')} "
        f"JOIN {agents} g ON g.{quote('id')} = r.{quote('agent_id')} "
        f"LEFT JOIN {skills} s ON s.{quote('id')} = r.{quote('skill_id')} "
        f"WHERE r.{quote('id')} = %s AND r.{owner_column} = %s"
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
    now = prep(MotorRun, "started_at", timezone.now())
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
        prep(RunEvent, "detail", {}),
        prep(RunEvent, "created_at", timezone.now()),
        run_id,
        owner,
        now,
    ]
    claim, event, read = _claim_sql(expected_token is not None, on_postgresql())
    results = write(
        [(claim, claim_params, True), (event, event_params, False), (read, [run_id, owner], True)],
        durable=False,
    )
    (claimed, run_row), _, (_, attempt_row) = results
    if not claimed or run_row is None or attempt_row is None:
        return None
    run = _hydrate(MotorRun, MotorRun._meta.concrete_fields, run_row)
    attempt_fields = Attempt._meta.concrete_fields
    attempt = _hydrate(Attempt, attempt_fields, attempt_row[: len(attempt_fields)])
    # run.agent (and run.skill) without a query of their own: only these fields are loaded,
    # any other is read when first used, as with QuerySet.only()
    rest = attempt_row[len(attempt_fields) :]
    agent_fields, skill_fields = _agent_fields(), _skill_fields()
    run_agent = MotorRun._meta.get_field("agent")
    run_agent.set_cached_value(
        run, _hydrate(_agent_model(), agent_fields, rest[: len(agent_fields)])
    )
    skill_row = rest[len(agent_fields) :]
    if run.skill_id is not None and skill_row[0] is not None:
        skill = _hydrate(_skill_model(), skill_fields, skill_row)
        MotorRun._meta.get_field("skill").set_cached_value(run, skill)
    lease = Lease(run_id=run_id, token=run.lease_token, owner=owner, ttl=lease_ttl(run.timeout_s))
    return lease, run, attempt


def _agent_model() -> Any:
    # the runtime names no brain-side module: the run's own foreign key knows the table
    return MotorRun._meta.get_field("agent").related_model


def _skill_model() -> Any:
    return MotorRun._meta.get_field("skill").related_model


def _agent_fields() -> tuple[Any, ...]:
    """The agent's fields a slice reads: its name (log lines) and trust level (its policy)."""
    meta = _agent_model()._meta
    return tuple(meta.get_field(name) for name in ("id", "name", "trust_level"))


def _skill_fields() -> tuple[Any, ...]:
    meta = _skill_model()._meta
    return tuple(meta.get_field(name) for name in ("id", "name"))


def _hydrate(model: type[Any], fields: Any, values: Any) -> Any:
    """A model instance from one row of its concrete columns, as the ORM would load it."""
    connection = db_connection()
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
    connection = db_connection()
    statements: list[Statement] = []
    for obj in objects:
        fields = [
            field
            for field in obj._meta.concrete_fields
            if not (field.primary_key and getattr(obj, field.attname) is None)
        ]
        columns = ", ".join(quote(field.column) for field in fields)
        values = ", ".join("%s" for _ in fields)
        table = quote(obj._meta.db_table)
        sql = f"INSERT INTO {table} ({columns}) VALUES ({values}) RETURNING {quote(obj._meta.pk.column)}"  # noqa: S608 - quoted model names; values are parameters
        params = [field.get_db_prep_save(field.pre_save(obj, True), connection) for field in fields]
        statements.append((sql, params, True))
    results = write(statements)
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
