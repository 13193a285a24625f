"""What approving a skill grants, and the approval itself — the one place every face calls.

The admin's review page, the chat's review card, `core.skill approve` (a brain or the chat in
words) and `POST /api/v1/skills/{name}/approve/` all show `approval_proposal()` and approve with
`skill_approve()`, so the same skill version yields the same facts, the same warnings and the
same policy whichever face a person uses.

The proposed policy is the policy as it stands plus what the reviewed content needs and the
policy does not grant yet: the hosts it references (except a host a dangerous pattern names,
which a person adds by hand if they trust it), the credentials it references (under their vault
names, without a VAULT_ prefix) and the tools its files call for. A field a person edited
for this content (tools, hosts or credentials) is their decision: nothing is added to it, and what
the content uses beyond it is a warning instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from skills import services
from skills.models import AuditAction, Policy, PolicyAuditEvent, PolicyStatus
from skills.policy_edits import policy_update
from skills.reviewing import policy_approve, policy_review
from skills.signals import policy_approved

# Tools every skill run needs to read its references and write its output.
BASE_TOOLS = ("read", "write", "list")
# Aliases a policy may hold, as the runtime expands them (ARCHITECTURE.md "Core contracts").
TOOL_ALIASES = {
    "shell": ("bash",),
    "filesystem": ("read", "write", "edit", "list", "glob", "grep"),
}
GRANT_FIELDS = ("tools", "allowed_domains", "required_credentials")
# Script suffixes that run as Python (the `code` tool); any other script runs through the shell.
PYTHON_SUFFIXES = (".py",)


@dataclass(frozen=True)
class ApprovalWarning:
    """One thing a person should know before approving: a stable code, a sentence, the values."""

    code: str
    message: str
    values: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "values": list(self.values)}


@dataclass(frozen=True)
class ApprovalProposal:
    """The policy an approval of the current content would leave, and what to know first."""

    skill: str
    agent: str
    status: str
    version: int | None
    content_hash: str
    reviewed: bool  # the stored review facts are of the current content
    rejected: bool  # this content was rejected and nothing new arrived since
    edited: list[str]  # fields a person edited for this content: nothing is added to them
    tools: list[str]
    allowed_domains: list[str]
    required_credentials: list[str]
    dependencies: list[str]
    added: dict[str, list[str]]
    warnings: list[ApprovalWarning]

    def grants(self) -> dict[str, list[str]]:
        """The policy fields an approval sets."""
        return {
            "tools": list(self.tools),
            "allowed_domains": list(self.allowed_domains),
            "required_credentials": list(self.required_credentials),
            "dependencies": list(self.dependencies),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "skill": self.skill,
            "agent": self.agent,
            "status": self.status,
            "version": self.version,
            "content_hash": self.content_hash,
            "reviewed": self.reviewed,
            "rejected": self.rejected,
            "edited": list(self.edited),
            **self.grants(),
            "added": {k: list(v) for k, v in self.added.items()},
            "warnings": [w.to_dict() for w in self.warnings],
        }


# --- reading the facts ----------------------------------------------------------------------


def expand_tools(tools: Iterable[str]) -> set[str]:
    """Tool names with the aliases `shell` and `filesystem` resolved."""
    out: set[str] = set()
    for tool in tools:
        out.update(TOOL_ALIASES.get(tool, (tool,)))
    return out


def tools_needed(facts: Mapping[str, Any]) -> list[str]:
    """The tools the reviewed content calls for, in a stable order.

    read/write/list always (references and output files); `code` for Python scripts; `bash` for
    shell code blocks and other scripts; `fetch` when the content references a host.
    """
    needed = list(BASE_TOOLS)
    scripts = [
        str(entry.get("path", ""))
        for entry in facts.get("inventory") or []
        if str(entry.get("path", "")).startswith("scripts/") and not entry.get("binary")
    ]
    if any(p.endswith(PYTHON_SUFFIXES) for p in scripts):
        needed.append("code")
    if facts.get("has_shell_blocks") or any(not p.endswith(PYTHON_SUFFIXES) for p in scripts):
        needed.append("bash")
    if facts.get("referenced_domains"):
        needed.append("fetch")
    return needed


def ordered_tools(existing: Iterable[str], wanted: Iterable[str]) -> list[str]:
    """`wanted` in one order whatever face asks: the policy's own order first, then new tools
    sorted (the admin's checkboxes submit in their own order, the API in the policy's)."""
    want = list(dict.fromkeys(wanted))
    kept = [t for t in dict.fromkeys(existing) if t in want]
    return kept + sorted(t for t in want if t not in kept)


def _credential_key(name: str) -> str:
    return name.strip().lower().removeprefix("vault_")


def _vault_name(name: str) -> str:
    """The name a credential has in the vault and the policy: the seeds' VAULT_ prefix dropped."""
    return name[len("VAULT_") :] if name.upper().startswith("VAULT_") and len(name) > 6 else name


def domain_covered(host: str, allowed: Iterable[str]) -> bool:
    """Whether a policy entry covers `host`: equal, or `*.parent` with the host below parent."""
    for entry in allowed:
        entry = entry.strip().lower().rstrip(".")
        if entry == host or (entry.startswith("*.") and host.endswith(entry[1:])):
            return True
    return False


REJECTED_LABEL = "Rejected — awaiting a new version"


def _rejected(policy: Policy) -> bool:
    version = policy.skill.current_version
    return bool(
        policy.status == PolicyStatus.PENDING_REVIEW
        and policy.rejection_note
        and version is not None
        and policy.reviewed_hash == version.content_hash
    )


def policy_is_rejected(policy: Policy) -> bool:
    """Rejected, awaiting a new version: pending review with a note, its facts still current.

    Seed 000 keeps a rejected skill in pending_review; new content clears the stored facts
    (`Policy.content_changed`), which ends "rejected" without another write.
    """
    return _rejected(policy)


def _edited_for(policy: Policy, content_hash: str) -> list[str]:
    """The grant fields a person's policy update changed while `content_hash` was the current
    content (a run's saved credentials or an import are not a person's decision)."""
    fields: set[str] = set()
    for changes in PolicyAuditEvent.objects.filter(
        policy=policy,
        action=AuditAction.POLICY_UPDATED,
        content_hash=content_hash,
        actor__isnull=False,
    ).values_list("changes", flat=True):
        fields.update(k for k in changes or {} if k in GRANT_FIELDS)
    return sorted(fields)


def approval_proposal(*, policy: Policy) -> ApprovalProposal:
    """What approving `policy` now would grant, with the warnings a person must see (no writes).

    Built from the stored review facts of the current content; without them (`reviewed` false)
    nothing is added and the first warning says the content was not reviewed.
    """
    version = policy.skill.current_version
    content_hash = version.content_hash if version else ""
    reviewed = (
        bool(policy.review_facts) and bool(content_hash) and (policy.reviewed_hash == content_hash)
    )
    facts: Mapping[str, Any] = policy.review_facts if reviewed else {}
    edited = _edited_for(policy, content_hash) if content_hash else []

    tools = list(policy.tools)
    domains = list(policy.allowed_domains)
    credentials = list(policy.required_credentials)
    referenced_domains = [str(d) for d in facts.get("referenced_domains") or []]
    referenced_credentials = [str(c) for c in facts.get("referenced_credentials") or []]
    needed_tools = tools_needed(facts) if reviewed else []

    granted_tools = expand_tools(tools)
    declared_keys = {_credential_key(c) for c in credentials}
    missing_credentials: list[str] = []
    for name in referenced_credentials:
        vault_name = _vault_name(name)
        if _credential_key(name) not in declared_keys and vault_name not in missing_credentials:
            missing_credentials.append(vault_name)
    missing = {
        "tools": [t for t in needed_tools if t not in granted_tools],
        "allowed_domains": [d for d in referenced_domains if not domain_covered(d, domains)],
        "required_credentials": missing_credentials,
    }
    # A host named in a dangerous pattern (a download piped into a shell, …) is never granted
    # by default: a person who trusts it types it in.
    danger = [f for f in facts.get("suspicious") or [] if f.get("severity") == "danger"]
    withheld = [
        d for d in missing["allowed_domains"] if any(d in str(f.get("message")) for f in danger)
    ]
    missing["allowed_domains"] = [d for d in missing["allowed_domains"] if d not in withheld]
    added = {key: ([] if key in edited else list(missing[key])) for key in GRANT_FIELDS}
    beyond = {key: (list(missing[key]) if key in edited else []) for key in GRANT_FIELDS}
    tools = ordered_tools(tools, [*tools, *added["tools"]])
    domains = [*domains, *added["allowed_domains"]]
    credentials = [*credentials, *added["required_credentials"]]

    warnings: list[ApprovalWarning] = []
    if version is None:
        warnings.append(ApprovalWarning("no_content", "The skill has no installed version."))
    elif not reviewed:
        warnings.append(
            ApprovalWarning(
                "not_reviewed",
                f"v{version.number} has not been reviewed; run the review before approving.",
            )
        )
    if _rejected(policy):
        warnings.append(
            ApprovalWarning(
                "rejected",
                f"This version was rejected: {policy.rejection_note}",
                [policy.rejection_note],
            )
        )
    if danger:
        warnings.append(
            ApprovalWarning(
                "danger_findings",
                f"The review found {len(danger)} dangerous pattern(s): "
                + "; ".join(f"{f.get('path')}: {f.get('message')}" for f in danger[:5]),
                [str(f.get("rule", "")) for f in danger],
            )
        )
    for key, what in (
        ("tools", "tools"),
        ("allowed_domains", "hosts"),
        ("required_credentials", "credentials"),
    ):
        if added[key]:
            warnings.append(
                ApprovalWarning(
                    f"grants_{key}",
                    f"The content uses more than the policy grants; approving adds {what}: "
                    + ", ".join(added[key])
                    + ".",
                    list(added[key]),
                )
            )
        if beyond[key]:
            warnings.append(
                ApprovalWarning(
                    f"exceeds_{key}",
                    f"The content uses more than the policy grants: {what} "
                    + ", ".join(beyond[key])
                    + " are not granted (a person edited them), so those calls will be denied.",
                    list(beyond[key]),
                )
            )
    if withheld:
        warnings.append(
            ApprovalWarning(
                "withheld_allowed_domains",
                "Not granted because a dangerous pattern names them: "
                + ", ".join(withheld)
                + "; calls to them will be denied unless a person adds them.",
                withheld,
            )
        )
    unused = [a for a in domains if not any(domain_covered(d, [a]) for d in referenced_domains)]
    if reviewed and unused:
        warnings.append(
            ApprovalWarning(
                "unreferenced_domains",
                "Allowed but never referenced by the content: " + ", ".join(unused) + ".",
                unused,
            )
        )
    return ApprovalProposal(
        skill=policy.skill.name,
        agent=getattr(policy.agent, "name", str(policy.agent_id)),
        status=policy.status,
        version=version.number if version else None,
        content_hash=content_hash,
        reviewed=reviewed,
        rejected=_rejected(policy),
        edited=edited,
        tools=tools,
        allowed_domains=domains,
        required_credentials=credentials,
        dependencies=list(policy.dependencies),
        added=added,
        warnings=warnings,
    )


# --- approving ------------------------------------------------------------------------------


def skill_approve(
    *,
    policy: Policy | int,
    actor: services.Actor,
    note: str = "",
    grants: Mapping[str, Any] | None = None,
) -> Policy:
    """Approve the current content for the policy's agent with the proposed policy — or with
    `grants` (policy_update keyword arguments) when the person edited them at approval.

    One transaction: the policy fields are set (audited as a policy update), then approved; a
    refusal (not an approver, stale review, tampered content) leaves everything as it was. A
    rejected policy whose facts are still current is reviewed again first (the decision stays
    possible after a reject); a policy never reviewed is refused by the approval's own
    transition rule: nobody approves content nobody was shown.
    """
    with transaction.atomic():
        # Skill, then policy: the lock order of every skills service.
        _, locked = services._lock_skill_and_policy(policy)
        if _rejected(locked):
            policy_review(policy=locked.pk, actor=actor)
            _, locked = services._lock_skill_and_policy(locked.pk)
        fields = dict(grants) if grants is not None else approval_proposal(policy=locked).grants()
        if fields.get("tools") is not None:
            fields["tools"] = ordered_tools(locked.tools, fields["tools"])
        reason = "edited at approval" if grants is not None else "granted at approval"
        policy_update(policy=locked.pk, actor=actor, reason=reason, **fields)
        approved = policy_approve(policy=locked.pk, actor=actor, note=note)
        # what the apps above do with an approval (forge: a flow awaiting it goes on)
        policy_approved.send(sender=Policy, policy_id=approved.pk, actor=actor)
        return approved
