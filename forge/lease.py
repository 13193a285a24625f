"""The fenced lease of a flow: the motor runs' pattern (`runs.lease`) applied to `ForgeFlow`.

A worker claims the flow before the slow part of a state (the LLM call, the sandbox test, the
deployment): one conditional UPDATE bumps `lease_token` when the lease is free, expired, or held
by a process of this host that no longer exists (`runs.lease.owner_is_dead`: a SIGKILLed worker's
redelivered message takes over at once). The result is recorded only while the token is still
the newest (`flow_fence`); a slice that lost its lease writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db.models import F, Q
from django.utils import timezone

from runs.lease import default_owner, lease_ttl, owner_is_dead

from .models import WORKER_STATES, ForgeFlow


class FlowLeaseLost(Exception):
    """A newer claim exists: the slice's result is dropped."""


@dataclass(frozen=True, slots=True)
class FlowLease:
    flow_id: str
    token: int
    owner: str
    state: str


def flow_claim(flow_id: str, *, owner: str | None = None) -> FlowLease | None:
    """Claim `flow_id` for one slice of its current state; None when it is in no worker state,
    gone, or leased by a live holder."""
    owner = owner or default_owner()
    now = timezone.now()
    ttl: timedelta = lease_ttl()
    free = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now) | Q(lease_owner=owner)
    base = ForgeFlow.objects.filter(pk=flow_id, state__in=WORKER_STATES)
    claimed = base.filter(free).update(
        lease_token=F("lease_token") + 1, lease_owner=owner, lease_expires_at=now + ttl
    )
    if not claimed:
        held = base.values_list("lease_owner", "lease_token").first()
        if held is None or not owner_is_dead(held[0]):
            return None
        # Conditional on the observed token: a claim in between wins.
        claimed = base.filter(lease_token=held[1]).update(
            lease_token=F("lease_token") + 1, lease_owner=owner, lease_expires_at=now + ttl
        )
        if not claimed:
            return None
    row = ForgeFlow.objects.filter(pk=flow_id).values_list("lease_token", "lease_owner", "state")
    token, holder, state = row.get()
    if holder != owner:
        return None
    return FlowLease(flow_id=flow_id, token=token, owner=owner, state=state)


def flow_fence(lease: FlowLease) -> ForgeFlow:
    """Lock the flow row and prove `lease` is still the newest claim in the state it was taken
    for. Call inside `transaction.atomic()`; raises FlowLeaseLost (nothing written) otherwise."""
    flow = ForgeFlow.objects.select_for_update().get(pk=lease.flow_id)
    if flow.lease_token != lease.token or flow.state != lease.state:
        raise FlowLeaseLost(
            f"flow {lease.flow_id}: token {lease.token} in {lease.state} is stale "
            f"(now {flow.lease_token} in {flow.state}); the result was dropped"
        )
    return flow


def flow_release(lease: FlowLease) -> None:
    """Free the lease so the next slice may claim at once; a no-op when it was lost."""
    ForgeFlow.objects.filter(pk=lease.flow_id, lease_token=lease.token).update(
        lease_owner="", lease_expires_at=None
    )
