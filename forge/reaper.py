"""Waking flows nobody is advancing: a lost wake-up, a holder that died, credentials set."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from .flow_services import flow_wake
from .models import WORKER_STATES, FlowState, ForgeFlow

#: how long a flow in a worker state may sit without a lease before it is woken, seconds
STALL_S = 30


def forge_reap() -> list[str]:
    """Queue a slice for every flow in a worker state that no live lease holds and that has
    not moved for STALL_S (a designing flow waiting for an answer is left alone); returns
    their ids. Flows acquiring credentials are always looked at: their slice checks the vault."""
    now = timezone.now()
    unheld = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)
    stalled = Q(updated_at__lt=now - timedelta(seconds=STALL_S)) | Q(
        state=FlowState.ACQUIRING_CREDENTIALS
    )
    ids = list(
        ForgeFlow.objects.filter(
            unheld, stalled, state__in=WORKER_STATES, pending_question=""
        ).values_list("id", flat=True)[:500]
    )
    for flow_id in ids:
        flow_wake(flow_id)
    return ids


def flows_credentials_set(agent_id: int) -> list[str]:
    """Wake the agent's flows waiting for credentials (the vault calls this after a save)."""
    ids = list(
        ForgeFlow.objects.filter(
            agent_id=agent_id, state=FlowState.ACQUIRING_CREDENTIALS
        ).values_list("id", flat=True)
    )
    for flow_id in ids:
        flow_wake(flow_id)
    return ids
