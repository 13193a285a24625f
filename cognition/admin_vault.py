"""The vault and personal tokens in the admin console.

Credential values are entered here (never through a chat transcript) and never shown: every page
renders "[set]". Saving and deleting go through the vault services, so the value is encrypted
before it reaches the database and logs carry the name only.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from cognition import vault
from cognition.errors import CognitionError
from cognition.models import Credential, PersonalToken
from cognition.services import (
    credential_delete,
    credential_set,
    personal_token_create,
    personal_token_revoke,
)
from cognition.vault import REDACTED


class CredentialForm(forms.ModelForm):
    secret = forms.CharField(
        label="Value",
        widget=forms.PasswordInput(render_value=False),
        required=False,
        help_text="Stored encrypted and never shown again. Leave empty to keep the stored value.",
    )

    class Meta:
        model = Credential
        fields = ("agent", "name")

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.instance.pk is None and not data.get("secret"):
            self.add_error("secret", "A new credential needs a value.")
        agent, name = data.get("agent"), data.get("name")
        if self.instance.pk is None and agent is not None and isinstance(name, str):
            try:
                plain = vault.normalize_name(name)
            except CognitionError as exc:
                self.add_error("name", str(exc))
                return data
            existing = Credential.objects.filter(agent=agent, name__iexact=plain).first()
            if existing is not None:
                # Names match in any case (and without the VAULT_ prefix): one name, one row.
                self.add_error(
                    "name",
                    f"Agent {agent.name!r} already has the credential {existing.name!r} (names "
                    "match in any case); open it to replace its value.",
                )
        return data


@admin.register(Credential)
class CredentialAdmin(admin.ModelAdmin):
    form = CredentialForm
    list_display = ("name", "agent", "masked_value", "updated_at")
    list_filter = ("agent",)
    search_fields = ("name", "agent__name")
    list_select_related = ("agent",)
    readonly_fields = ("masked_value", "created_at", "updated_at")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Credential]:
        # The ciphertext is never needed to render a page.
        credentials = super().get_queryset(request).defer("value")
        if request.user.is_superuser:
            return credentials
        return credentials.filter(agent__owner=request.user)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is None:
            return ["agent", "name", "secret"]
        return ["agent", "name", "masked_value", "secret", "created_at", "updated_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        if obj is None:
            return ()
        return ("agent", "name", *self.readonly_fields)

    @admin.display(description="Value")
    def masked_value(self, obj: Credential) -> str:
        return REDACTED

    def save_model(self, request: HttpRequest, obj: Credential, form: Any, change: bool) -> None:
        secret = form.cleaned_data.get("secret")
        if change and not secret:
            return
        saved = credential_set(agent=obj.agent, name=obj.name, value=secret, actor=request.user)
        obj.pk = saved.pk
        obj.name = saved.name

    def delete_model(self, request: HttpRequest, obj: Credential) -> None:
        credential_delete(agent=obj.agent, name=obj.name, actor=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Credential]) -> None:
        for credential in queryset.select_related("agent"):
            credential_delete(agent=credential.agent, name=credential.name, actor=request.user)


class PersonalTokenIssueForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        label="Name",
        help_text="What the token is for (e.g. laptop, ci), to recognise it in this list.",
    )


@admin.register(PersonalToken)
class PersonalTokenAdmin(admin.ModelAdmin):
    """Read-only list; a staff user issues a token for themselves with the "Issue a token for
    yourself" button (shown once there), or through POST /api/v1/tokens/."""

    list_display = ("name", "user", "token_prefix", "created_at", "revoked_at")
    list_filter = ("revoked_at",)
    fields = ("name", "user", "token_prefix", "created_at", "revoked_at")
    readonly_fields = fields
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[PersonalToken]) -> None:
        for token in queryset:
            personal_token_revoke(token=token, actor=request.user)

    def get_urls(self) -> list[URLPattern]:
        issue = path(
            "issue/",
            self.admin_site.admin_view(self.issue_view),
            name="cognition_personaltoken_issue",
        )
        return [issue, *super().get_urls()]

    def issue_view(self, request: HttpRequest) -> HttpResponse:
        """Issue a personal token for the logged-in staff user; its value is on this one page."""
        form = PersonalTokenIssueForm(request.POST if request.method == "POST" else None)
        issued = None
        if request.method == "POST" and form.is_valid():
            issued = personal_token_create(
                user=request.user, name=form.cleaned_data["name"], actor=request.user
            )
        response = TemplateResponse(
            request,
            "admin/cognition/personaltoken/issue.html",
            {
                **self.admin_site.each_context(request),
                "title": "Issue a personal API token",
                "form": form,
                "issued": issued,
                "agents_url": request.build_absolute_uri(reverse("api:agent-list")),
                "opts": self.model._meta,
            },
        )
        # The token is in this one response: no cache may keep it.
        response["Cache-Control"] = "no-store"
        return response
