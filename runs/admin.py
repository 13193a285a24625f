"""Read-only views of the runtime's ledger. State changes go through runs.services."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from runs.models import ApprovalRequest, Attempt, MotorRun, RunEvent, Signal, Step


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(MotorRun)
class MotorRunAdmin(ReadOnlyAdmin):
    list_display = ("id", "agent", "status", "trigger", "created_at", "completed_at")
    list_filter = ("status", "trigger")
    search_fields = ("id", "task")
    list_select_related = ("agent",)
    show_full_result_count = False


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = ("run", "index", "status", "iteration", "max_iterations", "started_at")
    list_filter = ("status",)
    search_fields = ("run__id",)


@admin.register(Step)
class StepAdmin(ReadOnlyAdmin):
    list_display = ("attempt", "iteration", "call_index", "tool", "state", "duration_ms")
    list_filter = ("state", "tool")
    show_full_result_count = False


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(ReadOnlyAdmin):
    list_display = ("id", "run", "status", "expires_at", "decided_at")
    list_filter = ("status",)


@admin.register(Signal)
class SignalAdmin(ReadOnlyAdmin):
    list_display = ("id", "kind", "run", "agent", "priority", "created_at")
    list_filter = ("kind",)
    show_full_result_count = False


@admin.register(RunEvent)
class RunEventAdmin(ReadOnlyAdmin):
    list_display = ("run", "from_status", "to_status", "actor", "created_at")
    show_full_result_count = False
