"""Resetting an agent's cortex (the admin's reset action)."""

from __future__ import annotations

import logging
from typing import Any

from django.utils import timezone

from .locking import cortex_locked
from .models import Cortex, CortexLesson, CortexRegion

logger = logging.getLogger(__name__)


def cortex_reset(*, agent: Any, actor_label: str) -> dict[str, int]:
    """Forget everything the agent's cortex learned: regions (with their patterns and
    candidates) and lessons go, in one locked transaction. The outcome ledger stays, so an
    outcome learned before the reset and delivered again afterwards still teaches nothing; the
    skills and their policies are not touched. Returns the counts removed."""
    if not Cortex.objects.filter(agent_id=agent.pk).exists():
        return {"regions": 0, "lessons": 0}
    now = timezone.now()
    with cortex_locked(agent.pk) as cortex:
        lessons = CortexLesson.objects.filter(cortex=cortex).delete()[0]
        regions = CortexRegion.objects.filter(cortex=cortex).count()
        CortexRegion.objects.filter(cortex=cortex).delete()
        cortex.rebuilt_at = now
        cortex.rebuilt_reason = f"reset by {actor_label}"[:300]
        cortex.save(update_fields=["rebuilt_at", "rebuilt_reason"])
    logger.info("cortex of agent %s reset by %s", agent.pk, actor_label)
    return {"regions": regions, "lessons": lessons}
