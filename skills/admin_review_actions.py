"""The review page's decisions: the forms it posts and one handler per button.

Each handler calls one service (or two in one transaction) and reports its outcome as a message;
a refused action returns its bound form so that the page shows it again with the errors.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from skills import approval
from skills.admin_base import _actor
from skills.errors import SkillError
from skills.models import Policy, PolicyStatus, SkillVersion
from skills.policy_edits import policy_update
from skills.reviewing import policy_reject, policy_review, policy_rollback
from skills.templatetags.skill_review import short_hash
from skills.toolpolicy import manifests


def _split_list(text: str) -> list[str]:
    """Lines and/or commas → stripped, de-duplicated entries in their original order."""
    seen: dict[str, None] = {}
    for chunk in text.replace(",", "\n").splitlines():
        item = chunk.strip()
        if item:
            seen.setdefault(item, None)
    return list(seen)


class PolicyEditForm(forms.Form):
    """Domains, credential names, tools and dependencies, plus write-only credential values.

    One password input and one "clear" checkbox per required credential name; the inputs never
    carry a value back to the browser.
    """

    allowed_domains = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
        help_text=(
            "Hosts the sandbox may reach when running this skill; one per line. A host or "
            "*.domain opens ports 443 and 80; host:port opens that port only."
        ),
    )
    required_credentials = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false"}),
        help_text="Credential names (e.g. GITHUB_TOKEN), one per line. Save to set their values.",
    )
    tools = forms.MultipleChoiceField(
        required=False,
        # exactly the grantable set (skills.toolpolicy), alphabetically as before
        choices=[(t, t) for t in sorted(manifests.GRANTABLE)],
        widget=forms.CheckboxSelectMultiple,
    )
    dependencies = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false"}),
        help_text=(
            "Packages the skill declares, pinned: pip:name==version or npm:name@version; one per "
            "line. Recorded and checked, not yet installed for runs."
        ),
    )
    shell_allowlist = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false"}),
        help_text=(
            "Programs this skill's bash calls may run (plain names present in the sandbox), one "
            "per line; empty: the default list."
        ),
    )

    def __init__(self, *args: Any, policy: Policy, **kwargs: Any) -> None:
        # Shown as the approval would leave it (skills.approval): what the person sees in the
        # form is what Approve grants, the same policy the chat and the API approve with.
        grants = approval.approval_proposal(policy=policy).grants()
        initial = {
            "allowed_domains": "\n".join(grants["allowed_domains"]),
            "required_credentials": "\n".join(grants["required_credentials"]),
            "tools": list(grants["tools"]),
            "dependencies": "\n".join(grants["dependencies"]),
            "shell_allowlist": "\n".join(policy.shell_allowlist),
        }
        super().__init__(*args, initial=initial, **kwargs)
        self.policy = policy
        self.credential_names: list[str] = list(grants["required_credentials"])
        for name in self.credential_names:
            self.fields[self._value_field(name)] = forms.CharField(
                required=False,
                strip=False,
                label=name,
                # render_value=False: a stored or just-typed secret never goes back to the page.
                widget=forms.PasswordInput(
                    render_value=False, attrs={"autocomplete": "new-password"}
                ),
            )
            self.fields[self._clear_field(name)] = forms.BooleanField(
                required=False, label=f"Clear {name}"
            )

    @staticmethod
    def _value_field(name: str) -> str:
        return f"credential_value__{name}"

    @staticmethod
    def _clear_field(name: str) -> str:
        return f"credential_clear__{name}"

    def credential_rows(self, names_set: set[str] | None) -> list[dict[str, Any]]:
        return [
            {
                "name": name,
                "state": (
                    "unreadable"
                    if names_set is None
                    else "[set]"
                    if name in names_set
                    else "not set"
                ),
                "value_field": self[self._value_field(name)],
                "clear_field": self[self._clear_field(name)],
            }
            for name in self.credential_names
        ]

    def update_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `skills.policy_edits.policy_update` from the cleaned data."""
        data = self.cleaned_data
        set_values = {
            name: data[self._value_field(name)]
            for name in self.credential_names
            if data.get(self._value_field(name))
        }
        clear = [name for name in self.credential_names if data.get(self._clear_field(name))]
        return {
            "allowed_domains": _split_list(data["allowed_domains"]),
            "required_credentials": _split_list(data["required_credentials"]),
            "tools": list(data["tools"]),
            "dependencies": _split_list(data["dependencies"]),
            "shell_allowlist": _split_list(data["shell_allowlist"]),
            "set_credentials": set_values,
            "clear_credentials": clear,
        }


class RejectForm(forms.Form):
    note = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "What is wrong with this skill?"}),
        help_text="Required: tell the author what to change.",
    )


class RollbackForm(forms.Form):
    version = forms.ModelChoiceField(queryset=SkillVersion.objects.none(), empty_label=None)

    def __init__(self, *args: Any, policy: Policy, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        versions = SkillVersion.objects.filter(skill_id=policy.skill_id).order_by("-number")
        if policy.skill.current_version_id is not None:
            versions = versions.exclude(pk=policy.skill.current_version_id)
        field = self.fields["version"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = versions
        field.label_from_instance = lambda v: (  # type: ignore[method-assign]
            f"v{v.number} — {short_hash(v.content_hash)} — {v.created_at:%Y-%m-%d %H:%M}"
        )


class PolicyReviewActionsMixin:
    """The POST handlers of the policy review page (`PolicyReviewPageMixin.review_view`)."""

    def _redirect(self, request: HttpRequest) -> HttpResponseRedirect:
        return HttpResponseRedirect(request.path)

    def _post_save(self, request: HttpRequest, policy: Policy) -> HttpResponse | PolicyEditForm:
        form = PolicyEditForm(request.POST, policy=policy)
        if not form.is_valid():
            messages.error(request, "The policy was not saved: correct the fields marked below.")
            return form
        try:
            policy_update(
                policy=policy.pk,
                actor=_actor(request),
                reason="edited in the admin",
                **form.update_kwargs(),
            )
        except SkillError as exc:
            messages.error(request, f"The policy was not saved: {exc.message}")
            return form
        messages.success(request, "Policy saved; the status is unchanged.")
        return self._redirect(request)

    def _post_approve(self, request: HttpRequest, policy: Policy) -> HttpResponse | PolicyEditForm:
        """Save the policy fields shown with the button, then approve — both or neither."""
        form = PolicyEditForm(request.POST, policy=policy)
        if not form.is_valid():
            messages.error(request, "Not approved: correct the fields marked below.")
            return form
        before = policy.status
        try:
            approved = approval.skill_approve(
                policy=policy.pk, actor=_actor(request), grants=form.update_kwargs()
            )
        except SkillError as exc:
            messages.error(request, f"Not approved: {exc.message}")
            return form
        verb = "Re-approved" if before == PolicyStatus.NEEDS_REAPPROVAL else "Approved"
        messages.success(
            request,
            f"{verb} {approved.skill.name} for {approved.agent.name} "
            f"({short_hash(approved.approved_content_hash)}).",
        )
        return self._redirect(request)

    def _post_reject(self, request: HttpRequest, policy: Policy) -> HttpResponse | RejectForm:
        form = RejectForm(request.POST)
        if not form.is_valid():
            messages.error(request, "Not rejected: a rejection needs a note.")
            return form
        try:
            policy_reject(policy=policy.pk, note=form.cleaned_data["note"], actor=_actor(request))
        except SkillError as exc:
            messages.error(request, f"Not rejected: {exc.message}")
            return form
        messages.success(
            request,
            "Rejected with your note; status: pending review (rejected — awaiting a new "
            "version). You can still approve this version from this page.",
        )
        return self._redirect(request)

    def _post_rollback(self, request: HttpRequest, policy: Policy) -> HttpResponse | RollbackForm:
        form = RollbackForm(request.POST, policy=policy)
        if not form.is_valid():
            messages.error(request, "Not rolled back: choose one of the listed versions.")
            return form
        target = form.cleaned_data["version"]
        try:
            result = policy_rollback(policy=policy.pk, version=target.number, actor=_actor(request))
        except SkillError as exc:
            messages.error(request, f"Not rolled back: {exc.message}")
            return form
        messages.success(
            request,
            f"Rolled back to v{target.number}; status: {PolicyStatus(result.status).label}.",
        )
        return self._redirect(request)

    def _post_review(self, request: HttpRequest, policy: Policy) -> HttpResponse:
        try:
            policy_review(policy=policy.pk, actor=_actor(request))
        except SkillError as exc:
            messages.error(request, f"The review could not run: {exc.message}")
        else:
            messages.success(request, "Review facts computed for the current version.")
        return self._redirect(request)
