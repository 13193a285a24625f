"""An agent's cortex in the admin: regions with their patterns, candidates with weights and
reflex badges, lessons, the latest outcomes; and the reset (a list action and a button), which
calls cognition.cortex.reset.cortex_reset. Everything else is read-only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils import timezone

from .cleanup import retention_suggested
from .models import Cortex, CortexCandidate, CortexLesson, CortexOutcome, CortexRegion
from .perception import effective_weight, reflex_blocker
from .reset import cortex_reset

#: outcomes listed on a cortex's page
OUTCOMES_SHOWN = 20


def _actor_label(request: HttpRequest) -> str:
    return f"admin:{request.user.get_username()}"


@admin.action(description="Reset the cortex (forget regions, candidates and lessons)")
def reset_cortices(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Cortex]) -> None:
    for cortex in queryset.select_related("agent"):
        removed = cortex_reset(agent=cortex.agent, actor_label=_actor_label(request))
        messages.success(
            request,
            f"Cortex of {cortex.agent.name} reset: {removed['regions']} regions and "
            f"{removed['lessons']} lessons forgotten.",
        )


@admin.register(Cortex)
class CortexAdmin(admin.ModelAdmin):
    change_form_template = "admin/cognition/cortex/change_form.html"
    list_display = ("agent", "regions", "candidates", "lessons", "updated_at", "rebuilt_at")
    search_fields = ("agent__name",)
    list_select_related = ("agent",)
    actions = [reset_cortices]
    readonly_fields = (
        "agent",
        "generation",
        "created_at",
        "updated_at",
        "rebuilt_at",
        "rebuilt_reason",
    )
    fields = readonly_fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Cortex]:
        return (
            super()
            .get_queryset(request)
            .annotate(
                n_regions=Count("regions", distinct=True),
                n_candidates=Count("regions__candidates", distinct=True),
                n_lessons=Count("lessons", distinct=True),
            )
        )

    @admin.display(ordering="n_regions")
    def regions(self, obj: Cortex) -> int:
        return obj.n_regions  # type: ignore[attr-defined]

    @admin.display(ordering="n_candidates")
    def candidates(self, obj: Cortex) -> int:
        return obj.n_candidates  # type: ignore[attr-defined]

    @admin.display(ordering="n_lessons")
    def lessons(self, obj: Cortex) -> int:
        return obj.n_lessons  # type: ignore[attr-defined]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        if not self.has_change_permission(request):
            actions.pop("reset_cortices", None)
        return actions

    def get_urls(self) -> list[Any]:
        return [
            path(
                "<int:pk>/reset/",
                self.admin_site.admin_view(self.reset_view),
                name="cognition_cortex_reset",
            ),
            *super().get_urls(),
        ]

    def reset_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        cortex = get_object_or_404(Cortex.objects.select_related("agent"), pk=pk)
        if request.method != "POST":
            return HttpResponse("Use POST.", status=405)
        if not self.has_change_permission(request, cortex):
            raise PermissionDenied
        reset_cortices(self, request, Cortex.objects.filter(pk=cortex.pk))
        return HttpResponseRedirect(reverse("admin:cognition_cortex_change", args=[cortex.pk]))

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # Read-only page: nothing to save; the reset has its own button.
        context = {"show_save": False, "show_save_and_continue": False, **(extra_context or {})}
        cortex = Cortex.objects.filter(pk=object_id).first()
        if cortex is not None:
            context.update(self._cortex_context(request, cortex))
        return super().change_view(request, object_id, form_url, extra_context=context)

    def _cortex_context(self, request: HttpRequest, cortex: Cortex) -> dict[str, Any]:
        now = timezone.now()
        regions = []
        for region in CortexRegion.objects.filter(cortex=cortex).order_by("name"):
            rows = []
            for c in (
                CortexCandidate.objects.filter(region=region)
                .select_related("skill", "skill__current_version")
                .order_by("-weight", "id")
            ):
                effective = effective_weight(c.weight, c.last_used, now=now)
                current = c.skill.current_version.number if c.skill.current_version else c.version
                rows.append(
                    {
                        "c": c,
                        "effective": effective,
                        "reflex_ready": not reflex_blocker(
                            c, effective=effective, current_version=current
                        ),
                        "retain": retention_suggested(c),
                    }
                )
            signals = region.signals if isinstance(region.signals, list) else []
            regions.append({"region": region, "signals": signals, "candidates": rows})
        return {
            "cortex_regions": regions,
            "cortex_lessons": CortexLesson.objects.filter(cortex=cortex).select_related("region"),
            "cortex_outcomes": CortexOutcome.objects.filter(cortex=cortex).prefetch_related(
                "follow_ups"
            )[:OUTCOMES_SHOWN],
            "cortex_may_reset": self.has_change_permission(request, cortex),
            "cortex_reset_url": reverse("admin:cognition_cortex_reset", args=[cortex.pk]),
        }
