"""Agents in the admin console: a read-friendly list; creation goes through `agent_create`.

API tokens are issued and revoked with actions that call the token services: a new token is shown
once, on the page the action returns (never cached, never stored in the clear); revoking one also
cancels the agent's in-flight runs. The stored hash is never shown.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from cognition import (
    admin_schedules,  # noqa: F401 - registers the schedule pages
    admin_vault,  # noqa: F401 - registers the vault and token pages
)
from cognition.admin_delivery import AgentWebhookAdminMixin, may_manage_webhook
from cognition.admin_trust import TRUST_ACTIONS, AgentTrustAdminMixin
from cognition.brain import admin as brain_admin  # noqa: F401 - registers the conversation pages
from cognition.cortex import admin as cortex_admin  # noqa: F401 - registers the cortex pages
from cognition.energy import band_for, energy_level, energy_restore, may_restore_energy
from cognition.models import Agent
from cognition.services import (
    IssuedToken,
    agent_create,
    agent_issue_token,
    agent_revoke_token,
    agent_set_relayed_consent,
)
from cognition.sources import admin as sources_admin  # noqa: F401 - registers the skill sources

TOKEN_PAGE = "admin/cognition/agent/token_issued.html"  # noqa: S105 - a template path


@admin.register(Agent)
class AgentAdmin(AgentTrustAdminMixin, AgentWebhookAdminMixin, admin.ModelAdmin):
    list_display = (
        "name",
        "owner",
        "energy",
        "current_energy",
        "trust_level",
        "trusted_for_relayed_consent",
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

    actions = [
        "issue_api_token",
        "revoke_api_token",
        "trust_relayed_consent",
        "withdraw_relayed_consent",
        "restore_energy",
        *TRUST_ACTIONS,
    ]

    def _token_agents(self, request: HttpRequest, queryset: QuerySet[Agent]) -> list[Agent]:
        """The selected agents the user may manage tokens of (owner or superuser); the rest
        are named in a warning and left unchanged."""
        allowed = [a for a in queryset.order_by("name") if may_manage_webhook(request.user, a)]
        refused = sorted(set(queryset.values_list("name", flat=True)) - {a.name for a in allowed})
        if refused:
            messages.warning(
                request,
                f"Not changed (only the owner or a superuser manages tokens): {', '.join(refused)}",
            )
        return allowed

    @admin.action(description="Issue a new API token (shown once; replaces the old one)")
    def issue_api_token(self, request: HttpRequest, queryset: QuerySet[Agent]) -> Any:
        issued = [
            agent_issue_token(agent=agent, actor=request.user)
            for agent in self._token_agents(request, queryset)
        ]
        if not issued:
            return None
        return _token_page(request, issued)

    @admin.action(description="Revoke the API token (also cancels the agent's active runs)")
    def revoke_api_token(self, request: HttpRequest, queryset: QuerySet[Agent]) -> None:
        agents = self._token_agents(request, queryset)
        for agent in agents:
            agent_revoke_token(agent=agent, actor=request.user)
        if agents:
            messages.success(
                request, f"Token revoked for: {', '.join(agent.name for agent in agents)}"
            )

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

    def has_restore_energy_permission(self, request: HttpRequest) -> bool:
        return may_restore_energy(request.user)

    @admin.action(
        description="Restore energy to full (recorded in each agent's history)",
        permissions=["restore_energy"],
    )
    def restore_energy(self, request: HttpRequest, queryset: QuerySet[Agent]) -> None:
        restored = [
            energy_restore(agent=agent, actor=request.user) for agent in queryset.order_by("name")
        ]
        messages.success(
            request, f"Energy restored to 1.00 for: {', '.join(a.name for a in restored)}"
        )

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


def _token_page(request: HttpRequest, issued: list[IssuedToken]) -> HttpResponse:
    response = TemplateResponse(
        request,
        TOKEN_PAGE,
        {"issued": issued, "title": "New API token", **admin.site.each_context(request)},
    )
    # The token is in this one response: no cache may keep it.
    response["Cache-Control"] = "no-store"
    return response
