"""The approval and audit console for skills.

Every change made here goes through `skills.services` (never by setting state fields): the review
page's buttons and the list actions call a service and report its outcome as a message. Versions,
files and audit rows are read-only. Credential values are write-only: the console shows whether a
value is set, never the value.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import content_disposition_header
from django.utils.safestring import SafeString

from sandbox import egress
from sandbox.types import NetworkPolicy
from skills import approval, imports, selectors, services
from skills.admin_disabling import disable_for_agent, enable_for_agent, enabled_column
from skills.admin_filters import PolicyStatusFilter
from skills.admin_json import PrettyJSONMixin
from skills.errors import CredentialsUnreadable, SkillError
from skills.models import (
    Policy,
    PolicyAuditEvent,
    PolicyStatus,
    Skill,
    SkillFile,
    SkillVersion,
)
from skills.templatetags.skill_review import (
    policy_badge,
    render_markdown,
    short_hash,
    status_badge,
)

APPROVE_PERMISSION = services.APPROVE_PERMISSION
AUDIT_ROWS_SHOWN = 200  # newest rows on the review page; the full trail is in its own list
RAW_DISPLAY_LIMIT_BYTES = 256 * 1024  # bytes of one file shown inline; the rest is downloadable
ADMIN_CSS = ("skills/review.css",)


def _actor(request: HttpRequest) -> services.Actor:
    return services.Actor.from_user(request.user)


def _can_approve(request: HttpRequest) -> bool:
    """Whether to offer approval buttons; the service makes the binding check itself."""
    user = request.user
    return bool(user.is_active and user.is_staff and user.has_perm(APPROVE_PERMISSION))


def _split_list(text: str) -> list[str]:
    """Lines and/or commas → stripped, de-duplicated entries in their original order."""
    seen: dict[str, None] = {}
    for chunk in text.replace(",", "\n").splitlines():
        item = chunk.strip()
        if item:
            seen.setdefault(item, None)
    return list(seen)


def credential_names_set(policy: Policy) -> set[str] | None:
    """Names that have a stored value, or None when the values cannot be decrypted."""
    try:
        return set(selectors.policy_credential_names(policy=policy))
    except CredentialsUnreadable:
        return None


# --- forms -----------------------------------------------------------------------------------


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
        choices=[(t, t) for t in sorted(services.KNOWN_TOOLS)],
        widget=forms.CheckboxSelectMultiple,
    )
    dependencies = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false"}),
        help_text="Packages installed before a run; one per line.",
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
        """Keyword arguments for `services.policy_update` from the cleaned data."""
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


# --- review page data ------------------------------------------------------------------------


def _file_view(file: SkillFile, *, review_url: str) -> dict[str, Any]:
    data = bytes(file.data)
    binary = b"\x00" in data
    view: dict[str, Any] = {
        "path": file.path,
        "size": file.size,
        "sha256": file.sha256,
        "binary": binary,
        "raw_url": f"{review_url}file/{file.pk}/",
        "truncated": False,
        "text": "",
        "markdown": None,
    }
    if binary:
        return view
    shown = data[:RAW_DISPLAY_LIMIT_BYTES]
    view["truncated"] = len(data) > RAW_DISPLAY_LIMIT_BYTES
    view["text"] = shown.decode("utf-8", "replace")
    if file.path == "SKILL.md":
        view["markdown"] = render_markdown(_skill_md_body(view["text"]))
    return view


def _skill_md_body(text: str) -> str:
    """SKILL.md without its YAML frontmatter (which is shown raw, next to the rendering)."""
    stripped = text.lstrip("\ufeff")
    lines = stripped.splitlines(keepends=True)
    if lines and lines[0].strip() == "---":
        for index in range(1, len(lines)):
            if lines[index].strip() == "---":
                return "".join(lines[index + 1 :])
    return stripped


def _needs_first_review(policy: Policy) -> bool:
    """Pending content that has no stored review facts yet."""
    version = policy.skill.current_version
    return (
        policy.status == PolicyStatus.PENDING_REVIEW
        and version is not None
        and not (policy.review_facts and policy.reviewed_hash == version.content_hash)
    )


def _allowlist(allowed: Iterable[str]) -> list[egress.AllowlistEntry]:
    """The policy's entries as the egress proxy reads them; one it would refuse (saved before
    entries were checked) is left out, since it allows nothing."""
    parsed = []
    for entry in allowed:
        try:
            parsed.append(egress.parse_allowlist_entry(entry))
        except egress.PolicyError:
            continue
    return parsed


def _domain_allowed(host: str, allowed: Iterable[str]) -> bool:
    """Whether a policy entry covers `host` on some port: the same host, or `*.parent` with the
    host below parent — the egress proxy's own matching, applied to the policy as it is now, so
    that edits made after the review show up at once."""
    try:
        canonical, _ = egress.canonicalize_host(host, 443)
    except egress.HostRejected:
        return False
    return any(entry.covers(canonical) for entry in _allowlist(allowed))


def _entry_ports(entry: str) -> str:
    """The ports a policy entry opens, in words ("port 8443 only", "ports 443 and 80")."""
    try:
        parsed = egress.parse_allowlist_entry(entry)
    except egress.PolicyError as exc:
        return f"refused by the egress policy: {exc.rule}"
    if parsed.port is not None:
        return f"port {parsed.port} only"
    ports = [str(p) for p in NetworkPolicy().allowed_ports]
    return "ports " + " and ".join(ports)


def _credential_key(name: str) -> str:
    return name.strip().lower().removeprefix("vault_")


def _facts_context(policy: Policy, names_set: set[str] | None) -> dict[str, Any]:
    """Stored review facts, compared with the policy as it is now."""
    facts: dict[str, Any] = dict(policy.review_facts or {})
    version = policy.skill.current_version
    current_hash = version.content_hash if version else ""
    domain_sources: dict[str, list[str]] = facts.get("domain_sources") or {}
    credential_sources: dict[str, list[str]] = facts.get("credential_sources") or {}
    referenced_domains: list[str] = list(facts.get("referenced_domains") or [])
    referenced_credentials: list[str] = list(facts.get("referenced_credentials") or [])
    allowed = list(policy.allowed_domains)
    declared_keys = {_credential_key(n): n for n in policy.required_credentials}
    domain_rows = [
        {"domain": d, "files": domain_sources.get(d, []), "allowed": _domain_allowed(d, allowed)}
        for d in referenced_domains
    ]
    credential_rows = []
    for name in referenced_credentials:
        declared_as = declared_keys.get(_credential_key(name))
        credential_rows.append(
            {
                "name": name,
                "files": credential_sources.get(name, []),
                "declared": declared_as is not None,
                "declared_as": declared_as,
                "value_set": bool(names_set and declared_as in names_set),
            }
        )
    referenced_keys = {_credential_key(n) for n in referenced_credentials}
    diff = facts.get("diff")
    return {
        "facts": facts,
        "facts_present": bool(facts),
        "facts_stale": bool(facts) and policy.reviewed_hash not in ("", current_hash),
        "suspicious": list(facts.get("suspicious") or []),
        "spec_findings": list(facts.get("spec_findings") or []),
        "domain_rows": domain_rows,
        "allowed_entries": [{"entry": a, "ports": _entry_ports(a)} for a in allowed],
        "credential_fact_rows": credential_rows,
        "domains_not_allowed": [r["domain"] for r in domain_rows if not r["allowed"]],
        "credentials_not_declared": [r["name"] for r in credential_rows if not r["declared"]],
        "allowed_unreferenced": [
            a for a in allowed if not any(_domain_allowed(d, [a]) for d in referenced_domains)
        ],
        "declared_unreferenced": [
            n for n in policy.required_credentials if _credential_key(n) not in referenced_keys
        ],
        "inventory": list(facts.get("inventory") or []),
        "provenance": facts.get("provenance") or (version.provenance if version else {}) or {},
        "diff": diff,
        "diff_changed_files": list((diff or {}).get("changed") or []),
        "diff_base_version": facts.get("diff_base_version"),
    }


class RejectedFilter(admin.SimpleListFilter):
    """Rejected policies stay pending review (seed 000); this tells them apart."""

    title = "rejected"
    parameter_name = "rejected"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", approval.REJECTED_LABEL), ("no", "Not rejected")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Policy]) -> QuerySet[Policy]:
        if self.value() == "yes":
            return queryset.filter(selectors.rejected_q())
        if self.value() == "no":
            return queryset.exclude(selectors.rejected_q())
        return queryset


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
class SkillAdmin(admin.ModelAdmin):
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

    def get_deleted_objects(
        self, objs: Sequence[Skill] | QuerySet[Skill], request: HttpRequest
    ) -> tuple[list[Any], dict[str, int], set[str], list[Any]]:
        deleted, counts, _perms_needed, protected = super().get_deleted_objects(objs, request)
        # Versions, files and policies have no delete permission of their own in this console
        # (they are read-only); deleting them with their skill is what delete_skill grants.
        return deleted, counts, set(), protected

    def delete_model(self, request: HttpRequest, obj: Skill) -> None:
        services.skill_delete(skill=obj, actor=_actor(request), reason="deleted in the admin")

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Skill]) -> None:
        for skill in queryset:
            self.delete_model(request, skill)

    @admin.action(description="Delete selected skills (versions, files and policies)")
    def delete_skills(self, request: HttpRequest, queryset: QuerySet[Skill]) -> None:
        deleted: list[str] = []
        for skill in queryset:
            try:
                services.skill_delete(
                    skill=skill, actor=_actor(request), reason="deleted in the admin"
                )
            except SkillError as exc:
                self.message_user(request, f"{skill.name}: {exc.message}", messages.ERROR)
            else:
                deleted.append(skill.name)
        if deleted:
            self.message_user(request, f"Deleted: {', '.join(deleted)}.", messages.SUCCESS)


# --- Policy ----------------------------------------------------------------------------------


@admin.register(Policy)
class PolicyAdmin(admin.ModelAdmin):
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
                services.policy_review(policy=policy.pk, actor=_actor(request))
            except SkillError as exc:
                self.message_user(request, f"{label}: {exc.message}", messages.ERROR)
            else:
                reviewed.append(label)
        if reviewed:
            self.message_user(request, f"Reviewed: {'; '.join(reviewed)}.", messages.SUCCESS)

    # --- URLs ----------------------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        custom = [
            path(
                "<int:object_id>/review/",
                wrap(self.review_view),
                name="skills_policy_review",
            ),
            path(
                "<int:object_id>/review/file/<int:file_id>/",
                wrap(self.raw_file_view),
                name="skills_policy_raw_file",
            ),
        ]
        return custom + super().get_urls()

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # The review page is this model's change page: facts first, then the decision.
        try:
            pk = int(object_id)
        except ValueError as exc:
            raise Http404("No policy with that id.") from exc
        return HttpResponseRedirect(reverse("admin:skills_policy_review", args=[pk]))

    # --- review page ---------------------------------------------------------------------------

    def _get_policy(self, request: HttpRequest, object_id: int) -> Policy:
        policy = get_object_or_404(
            Policy.objects.select_related(
                "skill", "skill__current_version", "agent", "approved_by", "approved_version"
            ),
            pk=object_id,
        )
        if not self.has_view_or_change_permission(request, policy):
            raise PermissionDenied
        return policy

    def review_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        policy = self._get_policy(request, object_id)
        can_change = self.has_change_permission(request, policy)
        edit_form: PolicyEditForm | None = None
        reject_form: RejectForm | None = None
        rollback_form: RollbackForm | None = None

        if request.method == "POST":
            if not can_change:
                raise PermissionDenied
            action = request.POST.get("action", "")
            handler = {
                "save": self._post_save,
                "approve": self._post_approve,
                "reapprove": self._post_approve,
                "reject": self._post_reject,
                "rollback": self._post_rollback,
                "review": self._post_review,
            }.get(action)
            if handler is None:
                messages.error(request, f"Unknown action {action!r}.")
                return HttpResponseRedirect(request.path)
            outcome = handler(request, policy)
            if isinstance(outcome, HttpResponse):
                return outcome
            # A refused action re-renders the page with the submitted form and its errors.
            policy = self._get_policy(request, object_id)
            if isinstance(outcome, PolicyEditForm):
                edit_form = outcome
            elif isinstance(outcome, RejectForm):
                reject_form = outcome
            elif isinstance(outcome, RollbackForm):
                rollback_form = outcome
        elif can_change and _needs_first_review(policy):
            # Opening the page is the review of new content: compute and store the facts
            # (pending_review → reviewed) so that what the approver sees is what the approval
            # refers to. A rejected policy keeps its facts and stays pending until asked again.
            try:
                services.policy_review(policy=policy.pk, actor=_actor(request))
            except SkillError as exc:
                messages.error(request, f"The review could not run: {exc.message}")
            else:
                messages.info(
                    request, "Review facts computed for the current version; status: reviewed."
                )
            policy = self._get_policy(request, object_id)

        return self._render_review(
            request,
            policy,
            can_change=can_change,
            edit_form=edit_form or PolicyEditForm(policy=policy),
            reject_form=reject_form or RejectForm(),
            rollback_form=rollback_form or RollbackForm(policy=policy),
        )

    def _render_review(
        self,
        request: HttpRequest,
        policy: Policy,
        *,
        can_change: bool,
        edit_form: PolicyEditForm,
        reject_form: RejectForm,
        rollback_form: RollbackForm,
    ) -> HttpResponse:
        skill = policy.skill
        version = skill.current_version
        review_url = reverse("admin:skills_policy_review", args=[policy.pk])
        files = (
            [_file_view(f, review_url=review_url) for f in selectors.version_files(version=version)]
            if version
            else []
        )
        # SKILL.md first: it is what the motor reads first.
        files.sort(key=lambda f: (f["path"] != "SKILL.md", f["path"]))
        versions = list(
            selectors.skill_version_history(skill=skill).annotate(file_count=Count("files"))
        )
        names_set = credential_names_set(policy)
        stray_credentials = sorted((names_set or set()) - set(policy.required_credentials))
        can_approve = _can_approve(request)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Review: {skill.name} for {policy.agent.name}",
            "subtitle": None,
            "opts": self.model._meta,
            "original": policy,
            "policy": policy,
            "skill": skill,
            "version": version,
            "files": files,
            "versions": versions,
            "audit_events": list(selectors.policy_audit_trail(policy=policy)[:AUDIT_ROWS_SHOWN]),
            "credential_rows": edit_form.credential_rows(names_set),
            "credentials_unreadable": names_set is None,
            "stray_credentials": stray_credentials,
            "edit_form": edit_form,
            "reject_form": reject_form,
            "rollback_form": rollback_form,
            "can_change": can_change,
            "can_approve": can_approve,
            # A rejected policy keeps its decision open: approving reviews it again first.
            "show_approve": can_change
            and can_approve
            and (policy.status == PolicyStatus.REVIEWED or approval.policy_is_rejected(policy)),
            "show_reapprove": can_change
            and can_approve
            and policy.status == PolicyStatus.NEEDS_REAPPROVAL,
            "show_reject": can_change and policy.status != PolicyStatus.APPROVED,
            "show_run_review": can_change
            and policy.status in (PolicyStatus.PENDING_REVIEW, PolicyStatus.NEEDS_REAPPROVAL),
            "show_rollback": can_change and len(versions) > 1,
            "can_delete_skill": self.admin_site.get_model_admin(Skill).has_delete_permission(
                request, skill
            ),
            "skill_delete_url": reverse("admin:skills_skill_delete", args=[skill.pk]),
            "skill_url": reverse("admin:skills_skill_change", args=[skill.pk]),
            "approved_hash_matches": bool(version)
            and policy.approved_content_hash == (version.content_hash if version else ""),
            "proposal": approval.approval_proposal(policy=policy).to_dict(),
            **_facts_context(policy, names_set),
        }
        return TemplateResponse(request, "admin/skills/policy/review.html", context)

    # --- POST handlers: each calls one service (or two in one transaction) -------------------

    def _redirect(self, request: HttpRequest) -> HttpResponseRedirect:
        return HttpResponseRedirect(request.path)

    def _post_save(self, request: HttpRequest, policy: Policy) -> HttpResponse | PolicyEditForm:
        form = PolicyEditForm(request.POST, policy=policy)
        if not form.is_valid():
            messages.error(request, "The policy was not saved: correct the fields marked below.")
            return form
        try:
            services.policy_update(
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
            services.policy_reject(
                policy=policy.pk, note=form.cleaned_data["note"], actor=_actor(request)
            )
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
            result = services.policy_rollback(
                policy=policy.pk, version=target.number, actor=_actor(request)
            )
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
            services.policy_review(policy=policy.pk, actor=_actor(request))
        except SkillError as exc:
            messages.error(request, f"The review could not run: {exc.message}")
        else:
            messages.success(request, "Review facts computed for the current version.")
        return self._redirect(request)

    # --- raw file download ---------------------------------------------------------------------

    def raw_file_view(self, request: HttpRequest, object_id: int, file_id: int) -> HttpResponse:
        policy = self._get_policy(request, object_id)
        file = get_object_or_404(SkillFile, pk=file_id, version__skill_id=policy.skill_id)
        response = HttpResponse(bytes(file.data), content_type="application/octet-stream")
        # Always a download: skill bytes must never be interpreted by the browser as a page.
        response["Content-Disposition"] = content_disposition_header(
            as_attachment=True, filename=file.path.replace("/", "_")
        )
        response["X-Content-Type-Options"] = "nosniff"
        response["Content-Security-Policy"] = "default-src 'none'; sandbox"
        return response


# --- read-only history -----------------------------------------------------------------------


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
