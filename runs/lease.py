"""Execution leases with fencing tokens, checked in the database on every state write.

A slice of work on a run first claims the lease: one UPDATE bumps `lease_token` (it only ever
grows) and stamps owner and expiry in database time, but only when the lease is free, expired or
already ours, and returns the claimed row. Every later write transaction of that slice starts with
`lease_fence`: one UPDATE that matches only while the token is still ours, renews the expiry and
holds the row lock to commit; a slice whose token is no longer the newest gets `LeaseLost` and
writes nothing. A Redis lock alone cannot give this guarantee: a paused holder wakes up after
its TTL and keeps writing. The loop's frequent writes, its claim included, are the same fenced
statements written out in `runs.ledger` and `runs.ledger_start`; the functions here serve the rarer writes.
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connections
from django.db.models import Case, F, PositiveIntegerField, QuerySet, When
from django.db.models.functions import Now
from django.db.models.sql import UpdateQuery

from runs.errors import LeaseLost
from runs.models import MotorRun, RunStatus


def lease_ttl(timeout_s: int | None = None) -> timedelta:
    """How long a claim lives without a write: MOTOR_LEASE_TTL_SECONDS (longer than one LLM call
    or one tool call), but never longer than the run's own timeout `timeout_s`, so a slice that
    dies holding the lease blocks its run no longer than the run may last."""
    ttl = timedelta(seconds=int(getattr(settings, "MOTOR_LEASE_TTL_SECONDS", 900)))
    return ttl if timeout_s is None else min(ttl, timedelta(seconds=timeout_s))


@dataclass(frozen=True, slots=True)
class Lease:
    """Proof of a claim: writes carrying an older `token` than the run's are refused. `ttl`:
    how long each renewal keeps it (the run's `lease_ttl`; None: the setting's)."""

    run_id: str
    token: int
    owner: str
    ttl: timedelta | None = None

    @property
    def lifetime(self) -> timedelta:
        return self.ttl if self.ttl is not None else lease_ttl()


def default_owner() -> str:
    """host:pid:thread — unique among live slices, stable within one thread."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def _update_returning(queryset: QuerySet[MotorRun], values: dict[str, Any]) -> MotorRun | None:
    """Apply `values` to the one row of `queryset` and return that row as it now is, in one
    statement (UPDATE … RETURNING); None when no row matched. Commits unless a transaction is
    open: the UPDATE holds the row lock until then."""
    query = queryset.query.chain(UpdateQuery)
    query.add_update_values(values)
    sql, params = query.get_compiler(queryset.db).as_sql()
    columns = ", ".join(
        connections[queryset.db].ops.quote_name(field.column)
        for field in MotorRun._meta.concrete_fields
    )
    # raw() maps the returned columns onto the model with each field's converters.
    rows = list(MotorRun.objects.using(queryset.db).raw(f"{sql} RETURNING {columns}", params))
    return rows[0] if rows else None


def _claim_values(*, owner: str, ttl: timedelta, count_slice: bool) -> dict[str, Any]:
    """The column updates of a claim: the next token, the owner, the expiry and, with
    `count_slice`, one more redelivery of a created or running run."""
    values: dict[str, Any] = {
        "lease_token": F("lease_token") + 1,
        "lease_owner": owner,
        "lease_expires_at": Now() + ttl,
    }
    if count_slice:
        values["redelivery_count"] = Case(
            When(
                status__in=(RunStatus.CREATED, RunStatus.RUNNING),
                then=F("redelivery_count") + 1,
            ),
            default=F("redelivery_count"),
            output_field=PositiveIntegerField(),
        )
    return values


def owner_is_dead(owner: str) -> bool:
    """True when `owner` names a process on this host that no longer exists.

    Lets a redelivered slice take over at once from a worker process that was killed, instead of
    waiting out the lease. Owners on other hosts are never judged; their leases simply expire.
    """
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def lease_take_over_from_dead(
    *,
    run_id: str,
    owner: str,
    expected_token: int | None = None,
    ttl: timedelta | None = None,
    count_slice: bool = False,
) -> tuple[Lease, MotorRun] | None:
    """Claim a run whose live lease belongs to a dead local process; None otherwise.

    With `expected_token`, only the lease taken for that message (token + 1) is taken over.
    Returns the lease and the run as claimed (`count_slice`: also add one to `redelivery_count` of a created or running run, as
    `runs.ledger_start.ledger_claim` does).
    """
    held = (
        MotorRun.objects.filter(pk=run_id, lease_expires_at__isnull=False)
        .values_list("lease_owner", "lease_token", "timeout_s")
        .first()
    )
    if held is None or not held[0] or not owner_is_dead(held[0]):
        return None
    if expected_token is not None and held[1] not in (expected_token, expected_token + 1):
        return None
    ttl = ttl if ttl is not None else lease_ttl(held[2])
    values = _claim_values(owner=owner, ttl=ttl, count_slice=count_slice)
    # Conditional on the observed token: if anyone claimed meanwhile, nothing happens.
    run = _update_returning(MotorRun.objects.filter(pk=run_id, lease_token=held[1]), values)
    if run is None:
        return None
    return Lease(run_id=run_id, token=run.lease_token, owner=owner, ttl=ttl), run


def stale_lease(lease: Lease) -> LeaseLost:
    """The LeaseLost error for a write refused to `lease`, naming the current token."""
    current = MotorRun.objects.filter(pk=lease.run_id).values_list("lease_token", flat=True).first()
    return LeaseLost(
        f"run {lease.run_id}: fencing token {lease.token} is stale "
        f"(current {current}); the write was refused",
        run_id=lease.run_id,
        token=lease.token,
        current=current,
    )


def lease_fence(lease: Lease, **values: Any) -> None:
    """Prove `lease` is still the newest claim and renew it, in one statement that also locks
    the run row until the surrounding transaction ends; `values` are written with it.

    Must be called inside `transaction.atomic()`, before the writes it guards. Raises LeaseLost
    (and changes nothing) when a newer claim exists: a claim or a cancel that bumps the token
    either committed before (the token no longer matches) or waits for this transaction.
    """
    updated = MotorRun.objects.filter(pk=lease.run_id, lease_token=lease.token).update(
        lease_expires_at=Now() + lease.lifetime, **values
    )
    if updated != 1:
        raise stale_lease(lease)


def lease_lock(lease: Lease) -> MotorRun:
    """Lock the run row and prove `lease` is still the newest claim; renew it; return the row.

    Must be called inside `transaction.atomic()`. Raises LeaseLost (and changes nothing) when a
    newer claim exists.
    """
    run = _update_returning(
        MotorRun.objects.filter(pk=lease.run_id, lease_token=lease.token),
        {"lease_expires_at": Now() + lease.lifetime},
    )
    if run is None:
        raise stale_lease(lease)
    return run


def lease_release(lease: Lease, *, slice_done: bool = False) -> bool:
    """Free the lease so the next slice can claim at once; a no-op when it was lost.

    `idle_since` records when the run last had no holder, so the reaper can tell a lost wake-up
    message from one that is merely queued. `slice_done` also resets the redelivery counter (the
    slice reached its end). One statement.
    """
    values: dict[str, Any] = {"lease_expires_at": None, "lease_owner": "", "idle_since": Now()}
    if slice_done:
        values["redelivery_count"] = 0
    updated = MotorRun.objects.filter(pk=lease.run_id, lease_token=lease.token).update(**values)
    return updated == 1
