"""The decision before every tool call: one pure function, no I/O, no clock.

`decide(manifest, trust, context, arguments)` answers one of three things:

- UNAVAILABLE: the call is refused; `reason` goes back to the model as data (not an exception);
- NEEDS_APPROVAL: the run pauses on an ApprovalRequest bound to the call's action hash;
- RUNS: the call executes.

The rules, first match wins:

 1. no manifest (no such tool)                                  unavailable  unknown_tool
 2. a host-side tool in a review run                            unavailable  review_run
 3. not granted to this run                                     unavailable  not_granted
 4. arguments that are not a JSON object                        unavailable  invalid_args
 5. the agent's trust level is below the manifest's minimum     unavailable  trust_level
    (an observing agent may only read: every side effect lands here)
 6. the manifest says requires_approval (no level skips it)     approval     requires_approval
 7. a suggesting agent's sandbox call                           approval     suggest
    (host-side tools are exempt: ask_user and request_approval already ask a human, and
    approving save_credential would show its value to the approver)
 8. the run asked for approval before actions whose repetition could do harm, and this one
    could (the sandbox library's idempotency facts)             approval     approval_required
 9. granted by the approved policy of the skill this run loads: a human approved it with that
    policy, so the run uses it without asking again             runs         approved_skill
10. by risk and trust level: observe runs low risk only; supervised_auto runs low and medium;
    bounded_auto runs all                                       approval     risk / runs trust_level
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import sandbox.tools as sandbox_tools

from .manifests import Risk, ToolManifest
from .trust import TrustLevel


class Verdict(StrEnum):
    UNAVAILABLE = "unavailable"
    NEEDS_APPROVAL = "needs_approval"
    RUNS = "runs"


@dataclass(frozen=True, slots=True)
class CallContext:
    """What the run may do, as the decision needs it (the policy and the run's flags).

    `granted`: tool ids this run may call (aliases expanded, host-side tools it is offered
    included). `skill_grants`: the tool ids an approved skill policy granted to this run.
    """

    granted: frozenset[str]
    skill_grants: frozenset[str] = frozenset()
    approval_required: bool = False
    network_enabled: bool = False
    review: bool = False


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    rule: str
    reason: str

    @property
    def runs(self) -> bool:
        return self.verdict is Verdict.RUNS


#: How much risk runs without asking, per trust level (suggest asks for everything: rule 7).
_RUNS_UP_TO: dict[TrustLevel, tuple[Risk, ...]] = {
    TrustLevel.OBSERVE: (Risk.LOW,),
    TrustLevel.SUGGEST: (Risk.LOW, Risk.MEDIUM, Risk.HIGH),
    TrustLevel.SUPERVISED_AUTO: (Risk.LOW, Risk.MEDIUM),
    TrustLevel.BOUNDED_AUTO: (Risk.LOW, Risk.MEDIUM, Risk.HIGH),
}


def _repeat_could_harm(manifest: ToolManifest, arguments: Mapping[str, Any], network: bool) -> bool:
    if manifest.host_side:
        return False
    if manifest.submit_risk is not None:
        # a tool of actions (the browser): only a call marked as submitting could harm twice
        return arguments.get("submit") is True
    try:
        return not sandbox_tools.is_idempotent(manifest.id, arguments, network_enabled=network)
    except ValueError:  # a tool the sandbox does not know (an MCP tool): assume it could
        return True


def decide(
    manifest: ToolManifest | None,
    trust: TrustLevel,
    context: CallContext,
    arguments: Mapping[str, Any] | None,
    *,
    name: str = "",
) -> Decision:
    """The verdict for one call of `manifest` (None: `name` is no tool) with `arguments`."""
    if manifest is None:
        return Decision(Verdict.UNAVAILABLE, "unknown_tool", f"there is no tool {name!r}")
    tool = manifest.id
    if context.review and manifest.host_side:
        return Decision(
            Verdict.UNAVAILABLE, "review_run", f"{tool} is not available in a review run"
        )
    if tool not in context.granted:
        granted = ", ".join(sorted(context.granted)) or "none"
        return Decision(
            Verdict.UNAVAILABLE,
            "not_granted",
            f"tool {tool!r} is not granted to this run (granted: {granted})",
        )
    if arguments is None:
        return Decision(Verdict.UNAVAILABLE, "invalid_args", "the arguments are not a JSON object")
    if trust.rank < manifest.min_trust_level.rank:
        return Decision(
            Verdict.UNAVAILABLE,
            "trust_level",
            f"{tool} needs trust level {manifest.min_trust_level.value} or higher; this agent "
            f"is at {trust.value}" + (" (it may only read)" if trust is TrustLevel.OBSERVE else ""),
        )
    if manifest.requires_approval:
        return Decision(
            Verdict.NEEDS_APPROVAL, "requires_approval", f"{tool} always needs the owner's approval"
        )
    if trust is TrustLevel.SUGGEST and not manifest.host_side:
        return Decision(
            Verdict.NEEDS_APPROVAL, "suggest", "this agent suggests: every call needs approval"
        )
    if context.approval_required and _repeat_could_harm(
        manifest, arguments, context.network_enabled
    ):
        return Decision(
            Verdict.NEEDS_APPROVAL, "approval_required", "approval required before this action"
        )
    if tool in context.skill_grants:
        return Decision(Verdict.RUNS, "approved_skill", "granted by the skill's approved policy")
    risk = manifest.call_risk(arguments)
    if risk not in _RUNS_UP_TO[trust]:
        return Decision(
            Verdict.NEEDS_APPROVAL,
            "risk",
            f"{tool} is {risk.value} risk; at trust level {trust.value} it needs approval",
        )
    return Decision(Verdict.RUNS, "trust_level", f"{risk.value} risk runs at {trust.value}")
