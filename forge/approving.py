"""From passing tests to an approved version: import, review, the risk decision, approval.

The tested files are imported as a new skill version (pending_review) through the normal
import, reviewed deterministically, and the tools discovered by `tools/list` are kept with the
version for the review page (`skills.probes`). `forge.risk.approval_decision` says who must
approve; an automatic approval is recorded with the rule that allowed it, in the skills audit
trail and in the flow's.

A person's approval goes through `skills.approval.skill_approve`, whichever face they use (the
flow's REST endpoint or the brain through `flow_approve`, which checks the risk tier first; the
skills admin's review page; the skills API): its `policy_approved` signal makes
`flow_advance_on_approval` move the flow awaiting that content on, in the same transaction. One
approval service, one way a flow leaves awaiting_approval.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction

from skills.approval import skill_approve
from skills.bundle import McpManifest
from skills.models import Policy
from skills.probes import version_probe_record
from skills.reviewing import policy_auto_approve, policy_review
from skills.services import Actor

from .bundles import FORGE_SOURCE, BundleRefused, bundle_import, manifest_of
from .errors import ApprovalRefused, FlowWrongState
from .flow_services import flow_lock, save_and_record
from .models import FlowState, ForgeFlow
from .risk import ApprovalDecision, Needs, approval_decision
from .testing import TestReport


def _manifest(flow: ForgeFlow) -> McpManifest:
    return manifest_of(flow.files)


def _semantics(manifest: McpManifest, tools: list[dict[str, Any]]) -> list[str]:
    """The declared semantics of each discovered tool (undeclared: write)."""
    return [manifest.semantics_of(str(tool.get("name"))) for tool in tools]


def approval_summary(flow: ForgeFlow, decision: ApprovalDecision) -> str:
    """The approval message of seed 002 §7: tools, network, credentials, writes, the question."""
    manifest = _manifest(flow)
    tools = (flow.test_report or {}).get("tools", [])
    lines = [f"I've built the skill {flow.skill_name!r} with {len(tools)} tool(s):"]
    for tool in tools:
        description = str(tool.get("description") or "").strip().splitlines()
        lines.append(f"  • {tool.get('name')} — {description[0] if description else ''}")
    domains = list(manifest.allowed_domains)
    credentials = list(manifest.credential_names)
    writes = [
        str(t.get("name")) for t in tools if manifest.semantics_of(str(t.get("name"))) != "read"
    ]
    lines += [
        "Permissions requested:",
        f"  Network: {', '.join(domains) if domains else 'none'}",
        f"  Credentials: {', '.join(credentials) if credentials else 'none'}",
        f"  Write operations: {', '.join(writes) if writes else 'none'}",
    ]
    if decision.needs == Needs.CONFIRM_DOMAINS:
        lines.append(f"Confirm these domains to deploy it ({decision.reason}).")
    elif decision.needs == Needs.EXPLICIT:
        lines.append(f"This needs your explicit approval: {decision.reason}. Deploy it?")
    else:
        lines.append("Deploy it?")
    return "\n".join(lines)


def _policy(flow: ForgeFlow) -> Policy:
    return Policy.objects.get(agent_id=flow.agent_id, skill__name=flow.skill_name)


def _next_after_approval(flow: ForgeFlow, *, actor: str, reason: str, **detail: Any) -> None:
    previous = flow.state
    missing = list(_manifest(flow).credential_names)
    if missing:
        flow.acquire_credentials(
            message=(
                f"Approved. {flow.skill_name!r} needs the credential(s) {', '.join(missing)}: set "
                "them in the admin (Credentials) or with PUT /api/v1/credentials/<name>/ — never "
                "in a chat. It deploys by itself once they are set."
            )
        )
    else:
        flow.deploy()
    save_and_record(flow, from_state=previous, actor=actor, reason=reason, **detail)


def after_tests_passed(flow: ForgeFlow, *, report: TestReport, actor: str) -> None:
    """Import, review and decide; the caller holds the flow's fenced lock. A refused import
    counts as a failed attempt."""
    from .steps import _retry_or_fail

    manifest = _manifest(flow)
    source = FORGE_SOURCE
    if flow.base_version_id:
        source = flow.base_version.skill.source or FORGE_SOURCE
    try:
        with transaction.atomic():
            installed = bundle_import(
                files=flow.files,
                agent=flow.agent,
                actor=Actor.system(f"skillforge {flow.id}"),
                source=source,
            )
    except BundleRefused as exc:
        _retry_or_fail(flow, feedback=f"the import refused the files: {exc}", stage="import")
        return
    if flow.base_version_id and installed.version.pk == flow.base_version_id:
        _retry_or_fail(
            flow, feedback="the change left every file exactly as it was", stage="generation"
        )
        return
    flow.skill_name = installed.skill.name
    flow.skill_version = installed.version
    version_probe_record(
        version=installed.version,
        tools=[{**t, "semantics": manifest.semantics_of(str(t.get("name")))} for t in report.tools],
        tests_passed=True,
        test_output=report.output,
        checked_by=f"skillforge {flow.id}",
    )
    system = Actor.system(f"skillforge {flow.id}")
    policy = policy_review(policy=_policy(flow).pk, actor=system)
    decision = approval_decision(
        domains=list(manifest.allowed_domains),
        credentials=list(manifest.credential_names),
        semantics=_semantics(manifest, report.tools),
        trust_level=str(flow.agent.trust_level),
        public_domains=list(settings.FORGE_PUBLIC_API_DOMAINS),
    )
    flow.approval = decision.to_dict()
    if decision.auto:
        policy_auto_approve(
            policy=policy.pk, actor=system, rule=decision.rule, reason=decision.reason
        )
        flow.approval["approved_by"] = f"auto (rule {decision.rule})"
        _next_after_approval(
            flow,
            actor=actor,
            reason=f"auto-approved by rule {decision.rule}: {decision.reason}",
            rule=decision.rule,
            trust_level=str(flow.agent.trust_level),
        )
        return
    previous = flow.state
    flow.await_approval(summary=approval_summary(flow, decision))
    save_and_record(
        flow,
        from_state=previous,
        actor=actor,
        reason=f"needs {decision.needs}: {decision.reason}",
        rule=decision.rule,
        version=installed.version.number,
    )


def flow_approve(
    *, flow_id: str, actor: Actor, confirm_domains: list[str] | None = None, note: str = ""
) -> ForgeFlow:
    """A person approves the flow's version. Needs the skills approval permission (the skill's
    policy is approved in the same transaction); a domain-confirmation tier also needs
    `confirm_domains` equal to the manifest's domains. Raises ApprovalRefused or
    FlowWrongState with nothing changed."""
    with transaction.atomic():
        flow = flow_lock(flow_id)
        if flow.state != FlowState.AWAITING_APPROVAL:
            raise FlowWrongState(
                f"flow {flow_id} is {flow.state}; only a flow awaiting approval can be approved.",
                details={"state": flow.state, "rule": "not_awaiting_approval"},
            )
        needs = (flow.approval or {}).get("needs")
        domains = sorted(_manifest(flow).allowed_domains)
        if needs == Needs.CONFIRM_DOMAINS and sorted(confirm_domains or []) != domains:
            raise ApprovalRefused(
                f"This skill reaches {', '.join(domains)}; confirm exactly these domains "
                "(confirm_domains) to approve it.",
                details={"rule": "confirm_domains", "domains": domains},
            )
        # the approval service every face uses; its policy_approved signal moves the flow on
        # (flow_advance_on_approval), in this transaction
        skill_approve(policy=_policy(flow).pk, actor=actor, note=note or f"SkillForge {flow.id}")
        flow.refresh_from_db()
        if flow.state == FlowState.AWAITING_APPROVAL:
            raise FlowWrongState(
                f"flow {flow_id}: the approval did not reach the version under review.",
                details={"state": flow.state, "rule": "approval_not_bound"},
            )
    return flow


def flow_advance_on_approval(*, policy_id: int, actor: Actor, **_: Any) -> ForgeFlow | None:
    """A policy was approved (skills.signals.policy_approved, inside the approval's
    transaction): the flow awaiting approval of exactly the approved content — whichever face
    approved it: the flow's API, the brain, the skills admin's review page, the skills API —
    goes on to its credentials or its deployment. Returns the flow moved, if any."""
    policy = Policy.objects.select_related("skill").get(pk=policy_id)
    waiting = (
        ForgeFlow.objects.select_for_update()
        .filter(
            agent_id=policy.agent_id,
            skill_name=policy.skill.name,
            state=FlowState.AWAITING_APPROVAL,
            skill_version__content_hash=policy.approved_content_hash,
        )
        .order_by("created_at")
        .first()
    )
    if waiting is None:
        return None
    needs = (waiting.approval or {}).get("needs")
    waiting.approval = {**(waiting.approval or {}), "approved_by": actor.label}
    _next_after_approval(
        waiting,
        actor=actor.label,
        reason=f"approved ({needs})",
        # a domain confirmation is what the approved policy allows
        confirmed_domains=(
            sorted(policy.allowed_domains) if needs == Needs.CONFIRM_DOMAINS else []
        ),
    )
    return waiting


def flow_reject(*, flow_id: str, actor: Actor, note: str = "") -> ForgeFlow:
    """A person declines the version: the flow fails; the version stays pending review."""
    with transaction.atomic():
        flow = flow_lock(flow_id)
        if flow.state != FlowState.AWAITING_APPROVAL:
            raise FlowWrongState(
                f"flow {flow_id} is {flow.state}; only a flow awaiting approval can be declined.",
                details={"state": flow.state, "rule": "not_awaiting_approval"},
            )
        previous = flow.state
        flow.fail(
            error="declined at approval",
            message="Not deployed. Tell me what to change and I can build another version.",
        )
        save_and_record(flow, from_state=previous, actor=actor.label, reason=note or "declined")
    return flow


__all__ = [
    "after_tests_passed",
    "approval_summary",
    "flow_advance_on_approval",
    "flow_approve",
    "flow_reject",
    "BundleRefused",
]
