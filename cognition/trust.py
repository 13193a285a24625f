"""Changing an agent's trust level: only a staff user holding the permission, always audited."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from skills.toolpolicy.trust import TRUST_PERMISSION, TrustLevel

from .errors import CognitionError
from .models import Agent, TrustLevelChange

logger = logging.getLogger(__name__)


class TrustChangeRefused(CognitionError):
    """The user may not change trust levels (`details`: rule)."""

    code = "trust_change_refused"
    http_status = 403


class TrustLevelInvalid(CognitionError):
    """The requested level is not one of the four (`details`: field, allowed)."""

    code = "trust_level_invalid"


def may_change_trust(user: Any) -> bool:
    """Staff users holding `cognition.change_trust_level` (superusers hold every permission)."""
    return bool(
        getattr(user, "is_authenticated", False)
        and getattr(user, "is_active", False)
        and getattr(user, "is_staff", False)
        and user.has_perm(TRUST_PERMISSION)
    )


def agent_set_trust_level(*, agent: Agent, level: str, actor: Any, reason: str = "") -> Agent:
    """Set `agent`'s trust level to `level` as `actor`, writing a `TrustLevelChange` row.

    Refuses (nothing written) a user who is not staff or lacks the permission, and a level that
    is not one of observe, suggest, supervised_auto, bounded_auto. Setting the current level
    again changes nothing and writes no row.
    """
    if not may_change_trust(actor):
        raise TrustChangeRefused(
            "Only a staff user with the permission 'Can change an agent's trust level' may "
            "change a trust level.",
            details={"rule": "staff_with_permission", "permission": TRUST_PERMISSION},
        )
    allowed = [t.value for t in TrustLevel]
    if level not in allowed:
        raise TrustLevelInvalid(
            f"trust_level: {level!r} is not one of {', '.join(allowed)}.",
            details={"field": "trust_level", "allowed": allowed},
        )
    with transaction.atomic():
        locked = Agent.objects.select_for_update().get(pk=agent.pk)
        previous = locked.trust_level
        if previous == level:
            return locked
        locked.trust_level = level
        locked.save(update_fields=["trust_level"])
        TrustLevelChange.objects.create(
            agent=locked,
            agent_name=locked.name,
            from_level=previous,
            to_level=level,
            actor=actor,
            actor_label=f"admin:{actor.get_username()}",
            reason=reason,
        )
    logger.info("trust level: agent=%s %s -> %s by %s", locked.name, previous, level, actor)
    return locked
