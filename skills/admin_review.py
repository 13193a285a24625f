"""The policy review page: the skill's files, the stored review facts compared with the policy as
it is now, the version history and the audit trail, and the raw-file download.

Opening the page of new content runs the review; its buttons are handled by
`skills.admin_review_actions`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.http import content_disposition_header

from sandbox import egress
from sandbox.types import NetworkPolicy
from skills import approval, selectors
from skills import bundle as bundle_lib
from skills.admin_base import _actor, _can_approve, credential_names_set
from skills.admin_review_actions import PolicyEditForm, RejectForm, RollbackForm
from skills.errors import SkillError
from skills.models import Policy, PolicyStatus, Skill, SkillFile, SkillVersion, VersionProbe
from skills.reviewing import policy_review
from skills.templatetags.skill_review import render_markdown

AUDIT_ROWS_SHOWN = 200  # newest rows on the review page; the full trail is in its own list
RAW_DISPLAY_LIMIT_BYTES = 256 * 1024  # bytes of one file shown inline; the rest is downloadable


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


def _probe_context(version: SkillVersion | None) -> dict[str, Any]:
    """The version's test-sandbox probe (tools with their schemas and semantics, tests)."""
    if version is None:
        return {"probe": None, "probe_tools": [], "is_mcp_skill": False}
    probe = VersionProbe.objects.filter(version=version).first()
    tools = [
        {
            "name": str(tool.get("name", "")),
            "description": str(tool.get("description") or ""),
            "semantics": "read" if tool.get("semantics") == "read" else "write",
            "schema_json": json.dumps(tool.get("input_schema") or {}, indent=2, sort_keys=True),
        }
        for tool in (probe.tools if probe else [])
    ]
    is_mcp = version.files.filter(path=bundle_lib.SKILL_TOML).exists()
    return {"probe": probe, "probe_tools": tools, "is_mcp_skill": is_mcp}


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


class PolicyReviewPageMixin:
    """Makes the Policy admin's change page the review page."""

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
                policy_review(policy=policy.pk, actor=_actor(request))
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
            **_probe_context(version),
            **_facts_context(policy, names_set),
        }
        return TemplateResponse(request, "admin/skills/policy/review.html", context)

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
