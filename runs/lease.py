"""Execution leases with fencing tokens, checked in PostgreSQL on every state write.

A slice of work on a run first claims the lease: one UPDATE bumps `lease_token` (it only ever
grows) and stamps owner and expiry in database time, but only when the lease is free, expired or
already ours. Every later write of that slice locks the run row and compares tokens; a slice whose
token is no longer the newest gets `LeaseLost` and writes nothing. A Redis lock alone cannot give
this guarantee: a paused holder wakes up after its TTL and keeps writing.
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Now

from runs.errors import LeaseLost
from runs.models import MotorRun


@dataclass(frozen=True, slots=True)
class Lease:
    """Proof of a claim: writes carrying an older `token` than the run's are refused."""

    run_id: str
    token: int
    owner: str


def lease_ttl() -> timedelta:
    """How long a claim lives without a write; longer than one LLM call or one tool call."""
    return timedelta(seconds=int(getattr(settings, "MOTOR_LEASE_TTL_SECONDS", 900)))


def default_owner() -> str:
    """host:pid:thread — unique among live slices, stable within one thread."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def lease_claim(
    *,
    run_id: str,
    owner: str,
    expected_token: int | None = None,
    ttl: timedelta | None = None,
) -> Lease | None:
    """Claim the run for one slice; None when it is not this caller's turn.

    Without `expected_token` the lease must be free, expired or already `owner`'s. With it (the
    token a wake-up message was sent for), the claim also succeeds when the run's token moved one
    past it and that newer lease expired unreleased: the slice that took this very message
    stalled or died. A released lease at a newer token means the message was already served.
    """
    ttl = ttl if ttl is not None else lease_ttl()
    expired = Q(lease_expires_at__lt=Now())
    claimable = Q(lease_expires_at__isnull=True) | expired | Q(lease_owner=owner)
    if expected_token is not None:
        claimable = (Q(lease_token=expected_token) & claimable) | (
            Q(lease_token=expected_token + 1) & expired
        )
    with transaction.atomic():
        updated = MotorRun.objects.filter(Q(pk=run_id) & claimable).update(
            lease_token=F("lease_token") + 1,
            lease_owner=owner,
            lease_expires_at=Now() + ttl,
        )
        if updated != 1:
            return None
        # Our UPDATE holds the row lock until commit, so this read sees our own token.
        token = MotorRun.objects.filter(pk=run_id).values_list("lease_token", flat=True).get()
    return Lease(run_id=run_id, token=token, owner=owner)


def _owner_is_dead(owner: str) -> bool:
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
) -> Lease | None:
    """Claim a run whose live lease belongs to a dead local process; None otherwise.

    With `expected_token`, only the lease taken for that message (token + 1) is taken over.
    """
    held = (
        MotorRun.objects.filter(pk=run_id, lease_expires_at__isnull=False)
        .values_list("lease_owner", "lease_token")
        .first()
    )
    if held is None or not held[0] or not _owner_is_dead(held[0]):
        return None
    if expected_token is not None and held[1] not in (expected_token, expected_token + 1):
        return None
    ttl = ttl if ttl is not None else lease_ttl()
    with transaction.atomic():
        # Conditional on the observed token: if anyone claimed meanwhile, nothing happens.
        updated = MotorRun.objects.filter(pk=run_id, lease_token=held[1]).update(
            lease_token=F("lease_token") + 1, lease_owner=owner, lease_expires_at=Now() + ttl
        )
        if updated != 1:
            return None
        token = MotorRun.objects.filter(pk=run_id).values_list("lease_token", flat=True).get()
    return Lease(run_id=run_id, token=token, owner=owner)


def lease_lock(lease: Lease) -> MotorRun:
    """Lock the run row and prove `lease` is still the newest claim; renew it.

    Must be called inside `transaction.atomic()`. Raises LeaseLost (and changes nothing) when a
    newer claim exists.
    """
    run = MotorRun.objects.select_for_update().get(pk=lease.run_id)
    if run.lease_token != lease.token:
        raise LeaseLost(
            f"run {lease.run_id}: fencing token {lease.token} is stale "
            f"(current {run.lease_token}); the write was refused",
            run_id=lease.run_id,
            token=lease.token,
            current=run.lease_token,
        )
    MotorRun.objects.filter(pk=run.pk).update(lease_expires_at=Now() + lease_ttl())
    return run


def lease_release(lease: Lease) -> bool:
    """Free the lease so the next slice can claim at once; a no-op when it was lost.

    `idle_since` records when the run last had no holder, so the reaper can tell a lost wake-up
    message from one that is merely queued.
    """
    updated = MotorRun.objects.filter(pk=lease.run_id, lease_token=lease.token).update(
        lease_expires_at=None, lease_owner="", idle_since=Now()
    )
    return updated == 1
