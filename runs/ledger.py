"""The run loop's frequent fenced writes: what an iteration records.

A slice starts with its claim (`runs.ledger_start`); then each iteration writes twice: the
model's reply with the intent of its first tool call, then the call's result (a further call of
the same reply has an intent write of its own). Each is one fenced write (`runs.fenced_write`):
it raises LeaseLost, having changed nothing, when the slice's token is stale.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS
from django.db.models import Field
from django.utils import timezone

from runs.fenced_write import (
    Statement,
    db_connection,
    fenced,
    held_params,
    held_sql,
    on_postgresql,
    prep,
    quote,
    sql_append,
    sql_now,
    sql_typed,
)
from runs.lease import Lease
from runs.ledger_start import ledger_claim, ledger_insert, ledger_take_over
from runs.models import Attempt, MotorRun, Step, StepState

# The claim and a run's creation were written in this module first: they are still found here.
__all__ = [
    "ledger_add_intent",
    "ledger_claim",
    "ledger_energy_level",
    "ledger_insert",
    "ledger_record_reply",
    "ledger_record_result",
    "ledger_take_over",
]


# --- the writes of an iteration ------------------------------------------------------------------


@cache
def _reply_sql(postgresql: bool) -> str:
    held = held_sql(postgresql)
    added = ", ".join(
        f"{quote(column)} = {quote(column)} + %s"
        for column in ("prompt_tokens", "completion_tokens", "energy_cost")
    )
    return (
        f"UPDATE {quote(Attempt._meta.db_table)} SET {quote('messages')} = "  # noqa: S608 - quoted model names; values are parameters
        f"{sql_append(quote('messages'))}, {quote('iteration')} = %s, "
        f"{quote('llm_calls')} = {quote('llm_calls')} + 1, {added} "
        f"WHERE {quote('id')} = %s AND {held}"
    )


def _agent_model() -> Any:
    # the runtime names no brain-side module: the run's own foreign key knows the table
    return MotorRun._meta.get_field("agent").related_model


def _energy_level_sql(postgresql: bool) -> str:
    """An agent's energy now as an SQL expression over its row: the stored level plus
    regeneration since `last_energy_at`, at most 1.0 (cognition.energy.energy_level's rule).
    Parameter: the regeneration per hour."""
    energy, since = quote("energy"), quote("last_energy_at")
    if postgresql:
        hours = f"CAST(EXTRACT(EPOCH FROM ({sql_now()} - {since})) AS double precision) / 3600.0"
        least = "LEAST"
    else:
        hours = f"(julianday('now') - julianday({since})) * 24.0"
        least = "MIN"
    return f"{least}(1.0, {energy} + CASE WHEN {since} IS NULL THEN 0.0 ELSE %s * {hours} END)"


@cache
def _charge_sql(postgresql: bool) -> str:
    """Take an iteration's charge from the agent: its level now minus the charge (never below
    0), stamped now. Parameters: regeneration per hour, charge, agent id, then `held_params`'s."""
    greatest = "GREATEST" if postgresql else "MAX"
    level = _energy_level_sql(postgresql)
    return (
        f"UPDATE {quote(_agent_model()._meta.db_table)} SET "  # noqa: S608 - quoted model names; values are parameters
        f"{quote('energy')} = {greatest}(0.0, {level} - %s), "
        f"{quote('last_energy_at')} = {sql_now()} "
        f"WHERE {quote('id')} = %s AND {held_sql(postgresql)}"
    )


#: the attribute of a run object holding the energy its last result write read (once)
_READ_AHEAD = "_energy_read_with_result"


def _energy_read_sql() -> str:
    """An agent's energy now; parameters: the regeneration per hour, the agent's id."""
    return (
        f"SELECT {_energy_level_sql(on_postgresql())} "  # noqa: S608 - quoted model names
        f"FROM {quote(_agent_model()._meta.db_table)} WHERE {quote('id')} = %s"
    )


def _level(row: Any) -> float:
    return round(float(row[0]), 6) if row else 0.0


def ledger_energy_level(agent_id: int, *, run: MotorRun | None = None) -> float:
    """The energy agent `agent_id` has now (0.0 when it no longer exists). One read, unless
    `run` (the agent's run) holds the level its last result write read (`ledger_record_result`
    with `energy_of`), the statement before this question: that level is taken, once."""
    if run is not None and _READ_AHEAD in run.__dict__:
        return float(run.__dict__.pop(_READ_AHEAD))
    with db_connection().cursor() as cursor:
        cursor.execute(_energy_read_sql(), [_regen_per_hour(), agent_id])
        row = cursor.fetchone()
    return _level(row)


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
    held = held_params(lease)
    charged = charge if run is not None else 0.0
    reply_params = [json.dumps(message), iteration, *tokens, charged, attempt.pk, *held]
    statements: list[Statement] = [(_reply_sql(on_postgresql()), reply_params, False)]
    if intent is not None:
        statements.append(_insert_step(lease, intent))
    if run is not None and charged > 0:
        agent_params = [_regen_per_hour(), charged, run.agent_id, *held]
        statements.append((_charge_sql(on_postgresql()), agent_params, False))
    results = fenced(
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
    columns = ", ".join(quote(field.column) for field in fields)
    values = ", ".join(sql_typed(field) for field in fields)
    return (
        f"INSERT INTO {quote(Step._meta.db_table)} ({columns}) SELECT {values} "  # noqa: S608 - quoted model names; values are parameters
        f"WHERE {held_sql(postgresql)} RETURNING {quote('id')}"
    )


def _insert_step(lease: Lease, step: Step) -> Statement:
    """The guarded insert of `step` (unsaved), returning its id."""
    connection = db_connection()
    values = [
        field.get_db_prep_save(field.pre_save(step, True), connection) for field in _step_columns()
    ]
    held = held_params(lease)
    return _insert_step_sql(on_postgresql()), [*values, *held], True


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
    results = fenced(lease, [_insert_step(lease, step)], durable=True)
    _saved(step, results[0])


@cache
def _result_sql(postgresql: bool) -> tuple[str, str]:
    held = held_sql(postgresql)
    step = (
        f"UPDATE {quote(Step._meta.db_table)} SET {quote('state')} = %s, "  # noqa: S608 - quoted model names; values are parameters
        f"{quote('result')} = %s, {quote('duration_ms')} = %s, {quote('completed_at')} = %s "
        f"WHERE {quote('id')} = %s AND {held}"
    )
    attempt = (
        f"UPDATE {quote(Attempt._meta.db_table)} SET {quote('messages')} = "  # noqa: S608 - quoted model names; values are parameters
        f"{sql_append(quote('messages'))} WHERE {quote('id')} = %s AND {held}"
    )
    return step, attempt


@cache
def _audit_columns(model: type[Any]) -> tuple[Field[Any, Any], ...]:
    return tuple(field for field in model._meta.concrete_fields if not field.primary_key)


@cache
def _insert_audit_sql(model: type[Any], postgresql: bool) -> str:
    fields = _audit_columns(model)
    columns = ", ".join(quote(field.column) for field in fields)
    values = ", ".join(sql_typed(field) for field in fields)
    return (
        f"INSERT INTO {quote(model._meta.db_table)} ({columns}) SELECT {values} "  # noqa: S608 - quoted model names; values are parameters
        f"WHERE {held_sql(postgresql)}"
    )


def _insert_audit(lease: Lease, audit: Any) -> Statement:
    """The guarded insert of the audit row `audit` (an unsaved ToolCallAudit)."""
    connection = db_connection()
    model = type(audit)
    values = [
        field.get_db_prep_save(field.pre_save(audit, True), connection)
        for field in _audit_columns(model)
    ]
    return _insert_audit_sql(model, on_postgresql()), [*values, *held_params(lease)], False


def ledger_record_result(
    lease: Lease,
    attempt: Attempt,
    step: Step,
    result: dict[str, Any],
    tool_message: dict[str, Any],
    *,
    release: bool,
    audit: Any = None,
    energy_of: MotorRun | None = None,
) -> None:
    """Mark `step` done with `result`, append `tool_message` to the attempt, and reset the
    unfinished-slice count; with `release`, also free the lease (the slice ends here). With
    `audit` (an unsaved `ToolCallAudit`), its row is inserted by the same write. With
    `energy_of` (the run, going on in this slice), the write also reads its agent's energy for
    the next iteration's check (`ledger_energy_level` with `run`).

    The in-memory `step` and `attempt` are updated once the write succeeded. Queuing the next
    slice after a release is the caller's.
    """
    completed_at = timezone.now()
    duration_ms = int(result.get("duration_ms") or 0)
    step_sql, attempt_sql = _result_sql(on_postgresql())
    held = held_params(lease)
    step_params = [
        StepState.DONE.value,
        prep(Step, "result", result),
        duration_ms,
        prep(Step, "completed_at", completed_at),
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
    if energy_of is not None:
        # the next iteration's energy check, read by this write rather than by a round trip
        # of its own right after it
        statements.append((_energy_read_sql(), [_regen_per_hour(), energy_of.agent_id], True))
    results = fenced(
        lease,
        statements,
        release=release,
        durable=False,
    )
    if energy_of is not None:
        setattr(energy_of, _READ_AHEAD, _level(results[-1][1]))
    step.state = StepState.DONE
    step.result = result
    step.duration_ms = duration_ms
    step.completed_at = completed_at
    attempt.messages = [*attempt.messages, tool_message]
