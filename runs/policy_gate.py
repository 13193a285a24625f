"""What the policy engine needs to know about a run, read once per slice, and how its answers
become the loop's data: a refusal envelope for the model, the facts of an audit row.

`run_policy(run)` reads the agent's trust level and the loaded skill's policy (two indexed
reads); `decide_call` then answers each call with the pure `skills.toolpolicy.decide`, so the
per-call cost is a dictionary lookup and a few comparisons.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runs.audit import CallFacts
from runs.tools import envelope
from skills.toolpolicy import manifests
from skills.toolpolicy.decide import CallContext, Decision, Verdict, decide
from skills.toolpolicy.trust import DEFAULT_TRUST_LEVEL, TrustLevel


@dataclass(frozen=True, slots=True)
class RunPolicy:
    """The run's standing for the decision, as one slice sees it."""

    context: CallContext
    trust: TrustLevel
    agent_id: int
    agent_name: str
    skill_name: str
    skill_version_hash: str
    bash_allowlist: tuple[str, ...] | None


def _host_tools(run: Any) -> set[str]:
    if run.review:
        return set()
    offered = {manifests.ASK_USER, manifests.REQUEST_APPROVAL}
    if run.skill_id is not None or bool(run.workspace):
        offered.add(manifests.SAVE_CREDENTIAL)
    return offered


def run_policy(run: Any) -> RunPolicy:
    """Read the run's trust level, skill grants and shell allowlist (once per slice).

    A tool counts as granted by the skill only while the agent's policy for that skill is
    approved for exactly the version this run loaded: a human approved it with that policy.
    """
    from skills.models import Policy, PolicyStatus

    agent = run.agent
    try:
        trust = TrustLevel(agent.trust_level)
    except ValueError:
        trust = DEFAULT_TRUST_LEVEL
    granted = set(run.tools) | _host_tools(run)
    skill_grants: frozenset[str] = frozenset()
    skill_name = version_hash = ""
    allowlist: tuple[str, ...] | None = None
    if run.skill_id is not None:
        policy = (
            Policy.objects.select_related("skill", "approved_version")
            .filter(skill_id=run.skill_id, agent_id=run.agent_id)
            .first()
        )
        if run.skill_version_id is not None:
            version = run.skill_version
            skill_name, version_hash = version.skill.name, version.content_hash
        if policy is not None:
            skill_name = skill_name or policy.skill.name
            approved = (
                policy.status == PolicyStatus.APPROVED
                and policy.approved_version_id == run.skill_version_id
                and not run.review
            )
            if approved:
                skill_grants = frozenset(manifests.expand(policy.tools)) & frozenset(granted)
            shell = getattr(policy, "shell_allowlist", None)
            if shell:
                allowlist = tuple(shell)
    return RunPolicy(
        context=CallContext(
            granted=frozenset(granted),
            skill_grants=skill_grants,
            approval_required=bool(run.approval_required),
            network_enabled=bool(run.allowed_domains),
            review=bool(run.review),
        ),
        trust=trust,
        agent_id=run.agent_id,
        agent_name=agent.name,
        skill_name=skill_name,
        skill_version_hash=version_hash,
        bash_allowlist=allowlist,
    )


def standing_of(run: Any) -> RunPolicy:
    """`run_policy(run)`, read once per run object (a slice loads its run once)."""
    cached = getattr(run, "_policy_standing", None)
    if cached is None:
        cached = run_policy(run)
        run._policy_standing = cached
    return cached


def cached_bash_allowlist(run: Any) -> tuple[str, ...] | None:
    """The skill's shell allowlist if this run object's standing was read already (no query)."""
    cached = getattr(run, "_policy_standing", None)
    return cached.bash_allowlist if cached is not None else None


def decide_call(policy: RunPolicy, name: str, arguments: Mapping[str, Any] | None) -> Decision:
    """The decision for one call of the run (see skills.toolpolicy.decide)."""
    return decide(manifests.manifest(name), policy.trust, policy.context, arguments, name=name)


def refusal(decision: Decision) -> dict[str, Any]:
    """The result envelope the model reads for an unavailable call (errors as data)."""
    assert decision.verdict is Verdict.UNAVAILABLE
    code = "invalid_args" if decision.rule == "invalid_args" else "denied"
    return envelope(ok=False, output=decision.reason, error_code=code)


def call_facts(
    policy: RunPolicy,
    *,
    run_id: str,
    attempt: int,
    iteration: int,
    call_index: int,
    actor: str,
) -> CallFacts:
    """The facts an audit row of this run's call carries besides the call itself."""
    return CallFacts(
        run_id=run_id,
        attempt=attempt,
        iteration=iteration,
        call_index=call_index,
        agent_id=policy.agent_id,
        agent_name=policy.agent_name,
        skill_name=policy.skill_name,
        skill_version_hash=policy.skill_version_hash,
        trust_level=policy.trust.value,
        actor=actor,
    )
