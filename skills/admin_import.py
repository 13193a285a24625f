"""The skills console's import page: paste a SKILL.md or upload an archive of skills.

Nothing is executed: `skills.imports` parses, validates and installs, and the page reports each
installed or refused skill as a message.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from skills import imports
from skills.admin_base import _actor
from skills.errors import SkillError
from skills.models import Policy, PolicyStatus


class SkillImportForm(forms.Form):
    """Paste a SKILL.md or upload an archive of one or more skills; nothing is executed."""

    agent = forms.ModelChoiceField(
        # The agent model is reached through the policy's foreign key: skills never imports
        # the cognition app (dependency direction).
        queryset=Policy._meta.get_field("agent").related_model._default_manager.order_by("name"),
        required=False,
        help_text="Gets a policy in pending review. Leave empty to install without a policy.",
    )
    skill_md = forms.CharField(
        required=False,
        label="Paste a SKILL.md",
        strip=False,
        widget=forms.Textarea(attrs={"rows": 14, "spellcheck": "false"}),
    )
    archive = forms.FileField(
        required=False,
        label="or upload an archive",
        help_text=".zip, .tar.gz, .tgz or .tar holding one skill directory or several.",
    )
    source = forms.CharField(
        required=False,
        max_length=2000,
        label="Source",
        help_text=(
            "Where the archive's skills come from (a registry URL, a publisher); by default its "
            "file name. An installed skill gets a new version only from its own source."
        ),
    )
    all_or_nothing = forms.BooleanField(
        required=False,
        label="All or nothing",
        help_text="Import nothing from the archive when any of its skills is refused.",
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        pasted = bool((data.get("skill_md") or "").strip())
        upload = data.get("archive")
        if pasted == bool(upload):
            raise forms.ValidationError(
                "Give either a pasted SKILL.md or an archive (one of them)."
            )
        limit = settings.MOTOR_SKILL_MAX_TOTAL_BYTES
        if upload is not None and upload.size > limit:
            raise forms.ValidationError(
                f"{upload.name}: {upload.size} bytes is more than the {limit}-byte limit of one "
                "import (MOTOR_SKILL_MAX_TOTAL_BYTES)."
            )
        return data


class SkillImportAdminMixin:
    """Adds the import page (and its link on the list) to the Skill admin."""

    def get_urls(self) -> list[URLPattern]:
        custom = [
            path(
                "import/",
                self.admin_site.admin_view(self.import_view),
                name="skills_skill_import",
            )
        ]
        return custom + super().get_urls()

    def _may_import(self, request: HttpRequest) -> bool:
        # The standard add form is hidden (content never comes from a model form); importing
        # is what the add permission grants.
        return request.user.has_perm("skills.add_skill")

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {"may_import": self._may_import(request), **(extra_context or {})}
        return super().changelist_view(request, extra_context=context)

    def import_view(self, request: HttpRequest) -> HttpResponse:
        if not self._may_import(request):
            raise PermissionDenied
        form = SkillImportForm(request.POST or None, request.FILES or None)
        if request.method == "POST" and form.is_valid():
            agent = form.cleaned_data["agent"]
            upload = form.cleaned_data["archive"]
            try:
                if upload is not None:
                    report = imports.skill_import_archive(
                        data=upload.read(),
                        filename=upload.name,
                        actor=_actor(request),
                        agent=agent,
                        all_or_nothing=form.cleaned_data["all_or_nothing"],
                        source=form.cleaned_data["source"] or None,
                    )
                    results, refused = report.installed, report.refused
                else:
                    results = [
                        imports.skill_import_pasted(
                            text=form.cleaned_data["skill_md"],
                            actor=_actor(request),
                            agent=agent,
                            source="pasted in the admin",
                        )
                    ]
                    refused = []
            except SkillError as exc:
                messages.error(request, f"Nothing was imported: {exc.describe()}")
            else:
                for refusal in refused:
                    messages.warning(request, f"Refused {refusal.where}: {refusal.describe()}")
                for result in results:
                    state = (
                        f"{PolicyStatus(result.policy.status).label.lower()} for {agent.name}"
                        if result.policy is not None
                        else "no agent policy"
                    )
                    verb = "new version" if result.version_created else "unchanged"
                    messages.success(
                        request,
                        f"Installed {result.skill.name} v{result.version.number} ({verb}; {state}).",
                    )
                policies = [r.policy for r in results if r.policy is not None]
                if len(policies) == 1 and not refused:
                    return HttpResponseRedirect(
                        reverse("admin:skills_policy_review", args=[policies[0].pk])
                    )
                return HttpResponseRedirect(reverse("admin:skills_skill_changelist"))
        context = {
            **self.admin_site.each_context(request),
            "title": "Import skills",
            "opts": self.model._meta,
            "form": form,
        }
        return TemplateResponse(request, "admin/skills/skill/import.html", context)
