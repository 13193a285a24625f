"""The admin's skill search: a search box over the skill index showing the ranked hits with
their scores (fused, BM25, embedding), for every skill or as one agent sees them.

Registered on the `SkillIndexEntry` model (read-only: the index is written by installs, never by
hand) from `SkillsConfig.ready`; its change list is the search page.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.contrib import admin
from django.http import HttpRequest
from django.template.response import TemplateResponse

from skills.index import embeddings
from skills.index.models import SkillIndexEntry
from skills.index.search import SkillSearchQueryInvalid, skill_search
from skills.models import Policy


class SkillIndexAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Skill search (the change list of the index)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # whoever may see skills may search them
        return bool(request.user.is_active and request.user.is_staff) and request.user.has_perm(
            "skills.view_skill"
        )

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> TemplateResponse:
        if not self.has_view_permission(request):
            from django.core.exceptions import PermissionDenied

            raise PermissionDenied
        agent_model = apps.get_model("cognition", "Agent")
        query = request.GET.get("q", "")
        agent_ref = request.GET.get("agent", "")
        agent = None
        error = ""
        result = None
        if agent_ref:
            agent = (
                agent_model.objects.filter(pk=agent_ref).first() if agent_ref.isdigit() else None
            )
            if agent is None:
                error = f"No agent {agent_ref!r}."
        if "q" in request.GET and not error:
            try:
                result = skill_search(query=query, agent=agent, over_limit="refuse")
            except SkillSearchQueryInvalid as exc:
                error = exc.describe()
        agent_ids = Policy.objects.values_list("agent_id", flat=True).distinct()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Skill search",
            "query": query,
            "agent": agent,
            "agents": agent_model.objects.filter(pk__in=agent_ids).order_by("name"),
            "result": result,
            "error": error,
            "dense_configured": embeddings.configured(),
            "entries": SkillIndexEntry.objects.count(),
            **(extra_context or {}),
        }
        return TemplateResponse(
            request, "admin/skills/skillindexentry/search.html", context, status=200
        )


def register() -> None:
    """Register the search page (idempotent)."""
    if not admin.site.is_registered(SkillIndexEntry):
        admin.site.register(SkillIndexEntry, SkillIndexAdmin)
