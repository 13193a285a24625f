"""Signal delivery in the admin console: the webhook of each agent, every delivery and attempt.

- Agents get a "Webhook" page (URL; the signing secret is generated with the first URL) and a
  "Rotate webhook signing secret" action. A new secret is rendered once, on the response to the
  action, with caching disabled; afterwards pages say only whether one is set.
- Signal deliveries and delivery attempts are read-only lists with filters.
- The runs app's Signal page is extended (here, since runs must not import cognition) with the
  delivery state and the per-signal history of attempts.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

import runs.admin as runs_admin
from runs.models import Signal
from skills.admin_json import PrettyJSONMixin

from .models import Agent, DeliveryAttempt, DeliveryState, SignalDelivery
from .webhooks import (
    IssuedWebhookSecret,
    WebhookInvalid,
    agent_rotate_webhook_secret,
    agent_set_webhook,
)

SECRET_PAGE = "admin/cognition/agent/webhook_secret.html"  # noqa: S105 - a template path
WEBHOOK_PAGE = "admin/cognition/agent/webhook.html"


def may_manage_webhook(user: Any, agent: Agent) -> bool:
    """The agent's owner or a superuser (besides the admin's view permission on agents)."""
    return bool(user.is_superuser or agent.owner_id == user.pk)


def _secret_page(request: HttpRequest, issued: list[IssuedWebhookSecret]) -> HttpResponse:
    response = TemplateResponse(
        request, SECRET_PAGE, {"issued": issued, "title": "Webhook signing secret"}
    )
    # The secret is in this one response: no cache may keep it.
    response["Cache-Control"] = "no-store"
    return response


class WebhookForm(forms.Form):
    webhook_url = forms.CharField(
        label="Webhook URL",
        required=False,
        max_length=500,
        widget=forms.URLInput(attrs={"size": 80}),
        help_text="http:// or https://; no user name or password in the URL. Empty: no webhook.",
    )


class AgentWebhookAdminMixin:
    """Adds the webhook fields, page and action to the Agent admin."""

    webhook_fields = ("webhook_url", "webhook_secret_state")

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_fields(request, obj))  # type: ignore[misc]
        if obj is None:
            return fields
        return [*fields, *(f for f in self.webhook_fields if f not in fields)]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = tuple(super().get_readonly_fields(request, obj))  # type: ignore[misc]
        return (*fields, *(f for f in self.webhook_fields if f not in fields))

    @admin.display(description="Webhook signing secret")
    def webhook_secret_state(self, obj: Agent) -> str:
        link = reverse("admin:cognition_agent_webhook", args=[obj.pk])
        state = (
            f"set on {obj.webhook_secret_created_at:%Y-%m-%d %H:%M} UTC"
            if obj.webhook_secret
            else "none"
        )
        return format_html('{} — <a href="{}">configure the webhook</a>', state, link)

    def get_urls(self) -> list[Any]:
        urls = super().get_urls()  # type: ignore[misc]
        own = [
            path(
                "<path:object_id>/webhook/",
                self.admin_site.admin_view(self.webhook_view),  # type: ignore[attr-defined]
                name="cognition_agent_webhook",
            )
        ]
        return own + urls

    def webhook_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        agent = Agent.objects.filter(pk=object_id).first() if object_id.isdigit() else None
        if agent is None:
            raise Http404("No such agent.")
        allowed = self.has_view_permission(request, agent)  # type: ignore[attr-defined]
        if not (allowed and may_manage_webhook(request.user, agent)):
            raise PermissionDenied
        form = WebhookForm(request.POST or None, initial={"webhook_url": agent.webhook_url})
        if request.method == "POST" and form.is_valid():
            try:
                issued = agent_set_webhook(
                    agent=agent, url=form.cleaned_data["webhook_url"], actor=request.user
                )
            except WebhookInvalid as exc:
                form.add_error("webhook_url", exc.message)
            else:
                if issued is not None:
                    return _secret_page(request, [issued])
                messages.success(request, f"Webhook of {agent.name} saved.")
                return HttpResponseRedirect(
                    reverse("admin:cognition_agent_change", args=[agent.pk])
                )
        context = {
            **self.admin_site.each_context(request),  # type: ignore[attr-defined]
            "agent": agent,
            "form": form,
            "title": f"Webhook of {agent.name}",
        }
        return TemplateResponse(request, WEBHOOK_PAGE, context)

    def get_actions(self, request: HttpRequest) -> Any:
        actions = super().get_actions(request)  # type: ignore[misc]
        actions["rotate_webhook_secret"] = (
            AgentWebhookAdminMixin.rotate_webhook_secret,
            "rotate_webhook_secret",
            "Rotate the webhook signing secret (shown once)",
        )
        return actions

    def rotate_webhook_secret(self, request: HttpRequest, queryset: QuerySet[Agent]) -> Any:
        issued = [
            agent_rotate_webhook_secret(agent=agent, actor=request.user)
            for agent in queryset.select_related("owner")
            if may_manage_webhook(request.user, agent)
        ]
        if not issued:
            messages.error(request, "You may rotate the secrets of your own agents only.")
            return None
        return _secret_page(request, issued)


# --- deliveries ----------------------------------------------------------------------------------


class _ReadOnly(PrettyJSONMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(SignalDelivery)
class SignalDeliveryAdmin(_ReadOnly):
    list_display = (
        "id",
        "signal",
        "agent",
        "target",
        "name",
        "state",
        "attempts",
        "next_attempt_at",
        "last_error",
        "finished_at",
    )
    list_filter = ("state", "target", "agent")
    search_fields = ("signal__id", "name", "agent__name")
    list_select_related = ("signal", "agent")
    show_full_result_count = False


@admin.register(DeliveryAttempt)
class DeliveryAttemptAdmin(_ReadOnly):
    list_display = (
        "id",
        "signal",
        "number",
        "target",
        "url",
        "outcome",
        "status_code",
        "duration_ms",
        "error",
        "started_at",
        "next_retry_at",
    )
    list_filter = ("outcome", "target", "delivery__agent")
    search_fields = ("signal__id", "url")
    list_select_related = ("signal",)
    show_full_result_count = False


class _DeliveryInline(admin.TabularInline):  # type: ignore[type-arg]
    model = SignalDelivery
    fields = ("target", "name", "state", "attempts", "next_attempt_at", "last_error")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class _AttemptInline(admin.TabularInline):  # type: ignore[type-arg]
    model = DeliveryAttempt
    verbose_name_plural = "delivery attempts (history)"
    fields = (
        "number",
        "target",
        "url",
        "outcome",
        "status_code",
        "duration_ms",
        "error",
        "started_at",
        "next_retry_at",
    )
    readonly_fields = fields
    ordering = ("id",)
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


_STATE_ORDER = [
    DeliveryState.FAILED,
    DeliveryState.DELIVERING,
    DeliveryState.RETRYING,
    DeliveryState.PENDING,
    DeliveryState.DELIVERED,
    DeliveryState.SKIPPED,
]


if admin.site.is_registered(Signal):
    admin.site.unregister(Signal)


@admin.register(Signal)
class SignalWithDeliveryAdmin(runs_admin.SignalAdmin):
    """The runs app's Signal page plus where each signal was delivered."""

    list_display = (*runs_admin.SignalAdmin.list_display, "delivery_state")
    list_filter = (*runs_admin.SignalAdmin.list_filter, "deliveries__state")
    inlines = [_DeliveryInline, _AttemptInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Signal]:
        return super().get_queryset(request).prefetch_related("deliveries")

    @admin.display(description="delivery")
    def delivery_state(self, signal: Signal) -> str:
        deliveries = list(signal.deliveries.all())  # type: ignore[attr-defined]
        if not deliveries:
            return "not dispatched"
        # The worst state speaks for the signal; the inline lists each receiver.
        states = {d.state for d in deliveries}
        worst = next(s for s in _STATE_ORDER if s in states)
        return str(DeliveryState(worst).label)
