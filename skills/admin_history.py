"""Read-only history in the skills console: versions with their file inventory, and the policy
audit trail. Rows are written by services; nothing here edits or deletes them."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from skills.admin_base import ADMIN_CSS
from skills.admin_json import PrettyJSONMixin
from skills.models import PolicyAuditEvent, SkillFile, SkillVersion
from skills.templatetags.skill_review import short_hash, status_badge


class ReadOnlyAdmin(PrettyJSONMixin, admin.ModelAdmin):
    """View-only: rows are created by services and never edited or deleted here."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        return {}


class SkillFileInline(admin.TabularInline):
    model = SkillFile
    extra = 0
    can_delete = False
    fields = ("path", "size", "digest")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Files are part of the version: whoever may see a version sees its inventory.
        return request.user.has_perm("skills.view_skillversion")

    def get_queryset(self, request: HttpRequest) -> QuerySet[SkillFile]:
        # The bytes are not needed for the inventory; a version can hold 10 MB.
        return super().get_queryset(request).defer("data")

    @admin.display(description="sha256")
    def digest(self, obj: SkillFile) -> str:
        return short_hash(obj.sha256)


@admin.register(SkillVersion)
class SkillVersionAdmin(ReadOnlyAdmin):
    list_display = ("skill", "number", "hash", "created_by_label", "parent", "created_at")
    list_filter = ("skill",)
    search_fields = ("skill__name", "content_hash")
    list_select_related = ("skill", "parent", "parent__skill")
    fields = (
        "skill",
        "number",
        "content_hash",
        "description",
        "created_by",
        "created_by_label",
        "parent",
        "provenance",
        "extracted_from",
        "frontmatter",
        "created_at",
    )
    readonly_fields = fields
    inlines = (SkillFileInline,)

    @admin.display(description="content hash")
    def hash(self, obj: SkillVersion) -> str:
        return short_hash(obj.content_hash)


@admin.register(PolicyAuditEvent)
class PolicyAuditEventAdmin(ReadOnlyAdmin):
    list_display = (
        "created_at",
        "skill_name",
        "agent_name",
        "action",
        "transition",
        "actor_label",
        "hash",
        "version_number",
        "reason",
    )
    list_filter = ("action", "to_status", "agent_name", "skill_name")
    search_fields = ("skill_name", "agent_name", "actor_label", "reason", "content_hash")
    date_hierarchy = "created_at"
    fields = (
        "created_at",
        "action",
        "skill_name",
        "skill",
        "agent_name",
        "agent_ref_id",
        "policy",
        "actor",
        "actor_label",
        "from_status",
        "to_status",
        "reason",
        "content_hash",
        "version_number",
        "changes",
    )
    readonly_fields = fields

    @admin.display(description="from → to")
    def transition(self, obj: PolicyAuditEvent) -> SafeString:
        if not obj.from_status and not obj.to_status:
            return format_html("{}", "—")
        return format_html(
            "{} → {}",
            status_badge(obj.from_status) if obj.from_status else "—",
            status_badge(obj.to_status) if obj.to_status else "—",
        )

    @admin.display(description="content hash")
    def hash(self, obj: PolicyAuditEvent) -> str:
        return short_hash(obj.content_hash)

    class Media:
        css = {"all": ADMIN_CSS}
