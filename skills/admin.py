"""The approval and audit console for skills: the Skill and Policy lists and their actions.

Every change made here goes through a skills service (never by setting state fields): the review
page's buttons and the list actions call a service and report its outcome as a message. Versions,
files and audit rows are read-only. Credential values are write-only: the console shows whether a
value is set, never the value.

The pages live beside this module: the review page in `skills.admin_review` and its buttons in
`skills.admin_review_actions`, the import page in `skills.admin_import`, the version and audit
lists in `skills.admin_history`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from skills import (
    admin_history,  # noqa: F401 - registers the version and audit lists
)
from skills.admin_base import ADMIN_CSS, _actor, credential_names_set
from skills.admin_disabling import disable_for_agent, enable_for_agent, enabled_column
from skills.admin_filters import PolicyStatusFilter, RejectedFilter
from skills.admin_import import SkillImportAdminMixin
from skills.admin_review import PolicyReviewPageMixin
from skills.admin_review_actions import PolicyReviewActionsMixin
from skills.errors import SkillError
from skills.install import skill_delete
from skills.models import Policy, Skill, SkillVersion
from skills.reviewing import policy_review
from skills.templatetags.skill_review import policy_badge, short_hash

# --- Skill -----------------------------------------------------------------------------------


class PolicyInline(admin.TabularInline):
    model = Policy
    extra = 0
    can_delete = False
    show_change_link = False
    fields = ("agent", "badge", "review_link", "approved_by", "approved_at")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="status")
    def badge(self, obj: Policy) -> SafeString:
        return policy_badge(obj)

    @admin.display(description="review")
    def review_link(self, obj: Policy) -> SafeString:
        url = reverse("admin:skills_policy_review", args=[obj.pk])
        return format_html('<a href="{}">Open review</a>', url)


class SkillVersionInline(admin.TabularInline):
    model = SkillVersion
    fk_name = "skill"
    extra = 0
    can_delete = False
    show_change_link = True
    fields = ("number", "hash", "created_by_label", "parent", "created_at")
    readonly_fields = fields
    ordering = ("-number",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="content hash")
    def hash(self, obj: SkillVersion) -> str:
        return short_hash(obj.content_hash)


@admin.register(Skill)
class SkillAdmin(SkillImportAdminMixin, admin.ModelAdmin):
    """Skills are installed by imports and runs, and deleted through `skill_delete`."""

    list_display = ("name", "short_description", "version_label", "policy_badges", "updated_at")
    list_filter = ("policies__status", "policies__agent")
    search_fields = ("name", "description")
    readonly_fields = ("name", "description", "source", "version_label", "created_at", "updated_at")
    fields = readonly_fields
    inlines = (PolicyInline, SkillVersionInline)
    actions = ("delete_skills",)

    class Media:
        css = {"all": ADMIN_CSS}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Skill]:
        return (
            super()
            .get_queryset(request)
            .select_related("current_version")
            .prefetch_related("policies__agent")
            .distinct()
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Content is immutable here; the change page is a read-only view.
        return False

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        # Django's bulk delete bypasses services; ours goes through skill_delete.
        actions.pop("delete_selected", None)
        if not self.has_delete_permission(request):
            actions.pop("delete_skills", None)
        return actions

    @admin.display(description="description")
    def short_description(self, obj: Skill) -> str:
        text = obj.description or ""
        return text if len(text) <= 90 else text[:89] + "…"

    @admin.display(description="current version")
    def version_label(self, obj: Skill) -> str:
        version = obj.current_version
        if version is None:
            return "—"
        return f"v{version.number} ({short_hash(version.content_hash)})"

    @admin.display(description="policies")
    def policy_badges(self, obj: Skill) -> SafeString:
        policies = sorted(obj.policies.all(), key=lambda p: p.agent.name)
        if not policies:
            return format_html('<span class="mc-meta">{}</span>', "no agent")
        return format_html_join(
            " ",
            '<a href="{}" title="review for {}">{}: {}</a>',
            (
                (
                    reverse("admin:skills_policy_review", args=[p.pk]),
                    p.agent.name,
                    p.agent.name,
                    policy_badge(p),
                )
                for p in policies
            ),
        )

    def get_deleted_objects(
        self, objs: Sequence[Skill] | QuerySet[Skill], request: HttpRequest
    ) -> tuple[list[Any], dict[str, int], set[str], list[Any]]:
        deleted, counts, _perms_needed, protected = super().get_deleted_objects(objs, request)
        # Versions, files and policies have no delete permission of their own in this console
        # (they are read-only); deleting them with their skill is what delete_skill grants.
        return deleted, counts, set(), protected

    def delete_model(self, request: HttpRequest, obj: Skill) -> None:
        skill_delete(skill=obj, actor=_actor(request), reason="deleted in the admin")

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Skill]) -> None:
        for skill in queryset:
            self.delete_model(request, skill)

    @admin.action(description="Delete selected skills (versions, files and policies)")
    def delete_skills(self, request: HttpRequest, queryset: QuerySet[Skill]) -> None:
        deleted: list[str] = []
        for skill in queryset:
            try:
                skill_delete(skill=skill, actor=_actor(request), reason="deleted in the admin")
            except SkillError as exc:
                self.message_user(request, f"{skill.name}: {exc.message}", messages.ERROR)
            else:
                deleted.append(skill.name)
        if deleted:
            self.message_user(request, f"Deleted: {', '.join(deleted)}.", messages.SUCCESS)


# --- Policy ----------------------------------------------------------------------------------


@admin.register(Policy)
class PolicyAdmin(PolicyReviewPageMixin, PolicyReviewActionsMixin, admin.ModelAdmin):
    """One agent's policy for one skill; its page is the review page."""

    list_display = (
        "skill_name",
        "agent",
        "status_badge",
        enabled_column,
        "domains",
        "credentials",
        "approval",
        "updated_at",
    )
    list_display_links = ("skill_name",)
    list_filter = (PolicyStatusFilter, RejectedFilter, "agent", "skill")
    search_fields = ("skill__name", "agent__name")
    list_select_related = ("skill", "skill__current_version", "agent", "approved_by")
    actions = ("run_review", disable_for_agent, enable_for_agent)
    # The change page is replaced by the review page; these guard any other form path.
    readonly_fields = (
        "skill",
        "agent",
        "status",
        "approved_by",
        "approved_at",
        "approved_content_hash",
        "approved_version",
        "reviewed_at",
        "reviewed_hash",
        "rejection_note",
    )
    exclude = ("credential_values", "review_facts")

    class Media:
        css = {"all": ADMIN_CSS}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A policy disappears with its skill (skill_delete) or its agent; never on its own.
        return False

    @admin.display(description="skill", ordering="skill__name")
    def skill_name(self, obj: Policy) -> str:
        return obj.skill.name

    @admin.display(description="status", ordering="status")
    def status_badge(self, obj: Policy) -> SafeString:
        return policy_badge(obj)

    @admin.display(description="approved", ordering="approved_at")
    def approval(self, obj: Policy) -> str:
        if obj.approved_at is None:
            return "—"
        who = obj.approved_by.get_username() if obj.approved_by else "(deleted user)"
        return f"{who}, {obj.approved_at:%Y-%m-%d %H:%M}"

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {"title": "Skill policies: choose one to review", **(extra_context or {})}
        return super().changelist_view(request, extra_context=context)

    @admin.display(description="allowed domains")
    def domains(self, obj: Policy) -> str:
        return ", ".join(obj.allowed_domains) or "—"

    @admin.display(description="credentials")
    def credentials(self, obj: Policy) -> str:
        names_set = credential_names_set(obj)
        if not obj.required_credentials:
            return "—"
        return ", ".join(
            f"{name} ({'unreadable' if names_set is None else '[set]' if name in names_set else 'not set'})"
            for name in obj.required_credentials
        )

    @admin.action(description="Run the deterministic review")
    def run_review(self, request: HttpRequest, queryset: QuerySet[Policy]) -> None:
        reviewed: list[str] = []
        for policy in queryset.select_related("skill", "agent"):
            label = f"{policy.skill.name} for {policy.agent.name}"
            try:
                policy_review(policy=policy.pk, actor=_actor(request))
            except SkillError as exc:
                self.message_user(request, f"{label}: {exc.message}", messages.ERROR)
            else:
                reviewed.append(label)
        if reviewed:
            self.message_user(request, f"Reviewed: {'; '.join(reviewed)}.", messages.SUCCESS)
