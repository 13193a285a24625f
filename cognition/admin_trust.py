"""Trust levels in the admin: one action per level on the agent list, and the read-only history.

The actions are offered only to staff users holding `cognition.change_trust_level`; each change
goes through `cognition.trust.agent_set_trust_level`, which records it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from cognition.models import Agent, TrustLevel, TrustLevelChange
from cognition.trust import agent_set_trust_level, may_change_trust


def _set_level_action(level: str, label: str) -> Callable[..., None]:
    def action(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Agent]) -> None:
        changed = [
            agent_set_trust_level(agent=agent, level=level, actor=request.user)
            for agent in queryset.order_by("name")
        ]
        messages.success(request, f"Trust level {level} for: {', '.join(a.name for a in changed)}")

    action.__name__ = f"set_trust_{level}"
    return admin.action(description=f"Set trust level: {label}", permissions=["trust_level"])(
        action
    )


TRUST_ACTIONS = [_set_level_action(value, label) for value, label in TrustLevel.choices]


class AgentTrustAdminMixin:
    """Adds the trust-level actions and their permission check to the agent admin."""

    def has_trust_level_permission(self, request: HttpRequest) -> bool:
        return may_change_trust(request.user)


@admin.register(TrustLevelChange)
class TrustLevelChangeAdmin(admin.ModelAdmin):
    list_display = ("created_at", "agent_name", "from_level", "to_level", "actor_label")
    list_filter = ("to_level",)
    search_fields = ("agent_name", "actor_label")
    readonly_fields = (
        "created_at",
        "agent_name",
        "from_level",
        "to_level",
        "actor_label",
        "reason",
    )
    fields = readonly_fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
