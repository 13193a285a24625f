"""Admin pages of skill sources (editable by staff) and acquisitions (read-only record)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from .models import SkillAcquisition, SkillSource


@admin.register(SkillSource)
class SkillSourceAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "location", "reviewed", "enabled", "position")
    list_filter = ("kind", "reviewed", "enabled")
    list_editable = ("enabled", "position")
    search_fields = ("name", "location")
    fields = ("name", "kind", "location", "reviewed", "enabled", "position")


@admin.register(SkillAcquisition)
class SkillAcquisitionAdmin(admin.ModelAdmin):
    list_display = ("id", "agent", "query", "status", "installed_name", "created_at")
    list_filter = ("status",)
    search_fields = ("query", "installed_name", "agent__name")
    readonly_fields = (
        "agent",
        "query",
        "status",
        "candidates",
        "attempts",
        "skill",
        "installed_name",
        "version_number",
        "decided_by_label",
        "created_at",
        "decided_at",
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
