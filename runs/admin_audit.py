"""The per-call audit trail in the admin: a read-only list filtered by agent, skill, tool,
outcome and date. Nothing can be added, changed or deleted here (nor in the database)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from runs.audit import RECORD_FIELDS
from runs.audit_models import ToolCallAudit


@admin.register(ToolCallAudit)
class ToolCallAuditAdmin(admin.ModelAdmin):
    list_display = (
        "created_at",
        "agent_name",
        "skill_name",
        "run_ref",
        "step",
        "tool",
        "success",
        "error_code",
        "duration_ms",
        "decision",
        "approved_by",
        "trust_level",
    )
    list_filter = ("agent_name", "skill_name", "tool", "success", "trust_level", "created_at")
    search_fields = ("run_ref", "agent_name", "skill_name", "tool")
    date_hierarchy = "created_at"
    show_full_result_count = False  # a count(*) over millions of rows on every page is slow
    fields = RECORD_FIELDS
    readonly_fields = fields

    @admin.display(description="Step")
    def step(self, obj: ToolCallAudit) -> str:
        return f"{obj.attempt}/{obj.iteration}.{obj.call_index}"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
