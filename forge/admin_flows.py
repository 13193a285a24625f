"""The console of SkillForge flows: read-only, with their audit trail; cancel through the service.

Approving a flow's version is the skill's approval: it happens in the skills review page (or
through the API and the brain, which call the same approval).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from forge.errors import ForgeError
from forge.flow_services import flow_cancel
from forge.models import FlowEvent, ForgeFlow


class FlowEventInline(admin.TabularInline):
    model = FlowEvent
    extra = 0
    can_delete = False
    fields = ("created_at", "from_state", "to_state", "actor", "reason", "detail")
    readonly_fields = fields
    ordering = ("id",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ForgeFlow)
class ForgeFlowAdmin(admin.ModelAdmin):
    list_display = ("id", "agent", "mode", "skill_name", "state", "attempt", "created_at")
    list_filter = ("state", "mode")
    search_fields = ("id", "skill_name", "request")
    ordering = ("-created_at",)
    inlines = [FlowEventInline]
    actions = ["cancel_flows"]
    fields = (
        "id",
        "agent",
        "mode",
        "state",
        "skill_name",
        "request",
        "allowed_domains",
        "credentials",
        "pending_question",
        "attempt",
        "message",
        "error",
        "approval",
        "skill_version",
        "test_report",
        "started_by",
        "created_at",
        "finished_at",
    )
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(description="Cancel the selected flows", permissions=["change"])
    def cancel_flows(self, request: HttpRequest, queryset: QuerySet[ForgeFlow]) -> None:
        actor = f"admin:{request.user.get_username()}"
        for flow in queryset:
            try:
                flow_cancel(flow_id=flow.id, actor=actor, reason="cancelled in the admin")
            except ForgeError as exc:
                self.message_user(request, f"{flow.id}: {exc.describe()}", messages.WARNING)
            else:
                self.message_user(request, f"{flow.id}: cancelled.", messages.SUCCESS)
