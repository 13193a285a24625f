"""Agents in the admin console: a read-friendly list; creation goes through `agent_create`.

API tokens are issued and revoked through the API's services, not here: the admin never sees a
raw token, and the stored hash is not shown.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from cognition import (
    admin_schedules,  # noqa: F401 - registers the schedule pages
    admin_vault,  # noqa: F401 - registers the vault and token pages
)
from cognition.admin_delivery import AgentWebhookAdminMixin
from cognition.brain import admin as brain_admin  # noqa: F401 - registers the conversation pages
from cognition.energy import band_for, energy_level
from cognition.models import Agent
from cognition.services import agent_create, agent_set_relayed_consent


@admin.register(Agent)
class AgentAdmin(AgentWebhookAdminMixin, admin.ModelAdmin):
    list_display = (
        "name",
        "owner",
        "energy",
        "current_energy",
        "trust_level",
        "token_state",
        "created_at",
    )
    list_filter = ("trust_level",)
    search_fields = ("name", "owner__username")
    list_select_related = ("owner",)
    readonly_fields = (
        "energy",
        "current_energy",
        "trust_level",
        "trusted_for_relayed_consent",
        "token_prefix",
        "token_created_at",
        "token_revoked_at",
        "created_at",
    )
    fields = ("name", "owner", *readonly_fields)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Name and owner are chosen at creation; afterwards the page shows the agent as it is.
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Deleting an agent cascades to its skill policies and runs; not a console click.
        return False

    actions = ["trust_relayed_consent", "withdraw_relayed_consent"]

    def has_trust_permission(self, request: HttpRequest) -> bool:
        # Relayed consent lets an agent approve skills for its human: a superuser decides.
        return bool(request.user.is_superuser)

    @admin.action(
        description="Trust to relay its user's consent (user_message triggers)",
        permissions=["trust"],
    )
    def trust_relayed_consent(self, request: HttpRequest, queryset: Any) -> None:
        for agent in queryset:
            agent_set_relayed_consent(agent=agent, trusted=True, actor=request.user)

    @admin.action(description="Withdraw trust to relay consent", permissions=["trust"])
    def withdraw_relayed_consent(self, request: HttpRequest, queryset: Any) -> None:
        for agent in queryset:
            agent_set_relayed_consent(agent=agent, trusted=False, actor=request.user)

    @admin.display(description="Energy now")
    def current_energy(self, obj: Agent) -> str:
        # Regeneration is applied on read (cognition.energy); `energy` is the last stored level.
        level = energy_level(agent=obj)
        return f"{level:.2f} ({band_for(level).value})"

    @admin.display(description="API token")
    def token_state(self, obj: Agent) -> str:
        if obj.token_hash:
            return f"active ({obj.token_prefix}…)"
        if obj.token_revoked_at:
            return "revoked"
        return "none"

    def save_model(self, request: HttpRequest, obj: Agent, form: Any, change: bool) -> None:
        created = agent_create(name=obj.name, owner=obj.owner, actor=request.user)
        obj.pk = created.pk
        obj.created_at = created.created_at
