"""Running a tool call: the sandbox call with its fenced record, and the host-side
save_credential.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.db import transaction

from runs.crashpoints import crash_point
from runs.credentials import (
    _resolve_credentials,
    placeholder,
    redact,
    saved_values,
)
from runs.db import release_db_connection
from runs.failures import execute_retrying_transient
from runs.finishing import _end_slice
from runs.lease import (
    Lease,
    lease_fence,
)
from runs.ledger import ledger_record_result
from runs.metrics import tool_call_record
from runs.models import (
    Attempt,
    MotorRun,
    Step,
)
from runs.pipeline.after import _after_result
from runs.pipeline.decide import _save_denial, _save_offered, _skill_policy
from runs.pipeline.record import _complete_step, _tool_message
from runs.records import SliceOutcome, _enqueue_step
from runs.sessions import CallWatch
from runs.tools import (
    SandboxSlot,
    envelope,
)


def _save_credential(run: MotorRun, arguments: dict[str, Any]) -> dict[str, Any]:
    """Apply a save_credential call whose value was moved to the run's store. Caller holds locks.

    For a skill run the value goes into that skill policy's credential values (in this
    transaction); for any other run it stays in the run's encrypted store until extraction.
    """
    if not _save_offered(run):
        return envelope(
            ok=False,
            output="save_credential is only available to skill runs and runs that create a skill",
            error_code="denied",
        )
    name = arguments.get("name")
    if not isinstance(name, str) or arguments.get("value") != placeholder(name):
        return envelope(
            ok=False,
            output="save_credential needs 'name' (string) and a non-empty 'value' (string)",
            error_code="invalid_args",
        )
    denial = _save_denial(run, name)
    if denial is not None:
        return envelope(ok=False, output=f"save_credential denied: {denial}", error_code="denied")
    values = saved_values(run)
    if name not in values:  # pragma: no cover - the value is stored when the reply is recorded
        return envelope(ok=False, output="the value was not received", error_code="invalid_args")
    if run.skill_id is not None:
        from skills.errors import SkillError
        from skills.services import Actor, policy_update

        try:
            policy_update(
                policy=_skill_policy(run).pk,
                actor=Actor.system(f"run {run.id}"),
                set_credentials={name: values[name]},
                reason=f"saved by motor run {run.id}",
            )
        except SkillError as exc:
            return envelope(ok=False, output=f"save_credential failed: {exc}", error_code="denied")
        where = "in the skill's policy"
    else:
        where = "for the skill this run creates (stored when it is extracted)"
    return envelope(
        ok=True,
        output=(
            f"Saved {placeholder(name)} {where}. Use the placeholder {placeholder(name)}; "
            f"code, bash and fetch also get it as the environment variable {name}."
        ),
    )


def _execute_and_record(
    lease: Lease,
    run: MotorRun,
    attempt: Attempt,
    step: Step,
    name: str,
    arguments: dict[str, Any],
    slot: SandboxSlot,
    credentials: Callable[[MotorRun], dict[str, str]] | None,
    actor: str,
    *,
    last: bool = False,
    slice_ends_at: float = 0.0,
) -> SliceOutcome | None:
    """The side effect itself (outside any transaction), then its fenced record.

    When the call is the iteration's `last`, the run goes on and the slice's time is up
    (`slice_ends_at`), the same commit also ends the slice: the lease is released and the next
    slice is queued once it is durable.
    """
    crash_point("after_intent")
    started = time.monotonic()
    values = {**(credentials or _resolve_credentials)(run), **saved_values(run)}
    release_db_connection()
    # A cancel (or any newer claim) moves the token; the watch then kills the running call.
    with CallWatch(run_id=lease.run_id, token=lease.token):
        # a transient failure of an idempotent call is retried once before the model sees it
        result = execute_retrying_transient(
            lambda: slot.execute(name=name, arguments=arguments, credentials=values),
            name=name,
            arguments=arguments,
            network_enabled=bool(run.allowed_domains),
        )
    # The sandbox already redacts what it was given; this also covers the file tools.
    result = redact(result, values)
    result["duration_ms"] = result.get("duration_ms") or int((time.monotonic() - started) * 1000)
    tool_call_record(
        tool=name,
        duration_s=result["duration_ms"] / 1000,
        ok=bool(result.get("ok")),
        error_code=str(result.get("error_code") or ""),
    )
    crash_point("after_execution")

    ends_slice = last and time.monotonic() >= slice_ends_at
    outcome: SliceOutcome | None = None
    if result.get("ok"):
        # No bailout to weigh: the result (and, at the slice's end, the release) is one write.
        ledger_record_result(
            lease, attempt, step, result, _tool_message(step, result), release=ends_slice
        )
        if ends_slice:
            outcome = SliceOutcome.CONTINUED
            run_id, token = lease.run_id, lease.token
            transaction.on_commit(lambda: _enqueue_step(run_id, token))
    else:
        with transaction.atomic():
            # A recorded result is progress: the slices counted as unfinished start again at 0.
            lease_fence(lease, redelivery_count=0)
            _complete_step(run, attempt, step, result)
            outcome = _after_result(run, attempt, name, result, actor=actor)
            if outcome is None and ends_slice:
                _end_slice(lease)
                outcome = SliceOutcome.CONTINUED
    crash_point("after_commit")
    return outcome
