"""Stage 1, decide: what happens to a requested tool call before anything runs.

`decide` is a pure function of `CallFacts`, a small frozen record of everything the rules read
(the grant, whether the run is a review, the run's approval rule, whether the call can safely
run twice, whether it was caught in flight). It reads no database and has no side effect, so
every rule can be tested by building facts; `call_facts` gathers them from a run. New rules
(tool manifests, trust levels) come in as new fields of `CallFacts` and new branches here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from runs.models import MotorRun
from runs.policy_gate import decide_call, standing_of
from runs.tools import INTERRUPTED, SYNTHETIC_TOOLS, envelope, needs_approval
from skills.toolpolicy import manifests
from skills.toolpolicy.decide import Decision as PolicyDecision
from skills.toolpolicy.decide import Verdict as PolicyVerdict

#: what the owner is told when a call that could do harm twice was caught in flight
IN_FLIGHT_SUMMARY = "outcome unknown — run again?"
#: what the owner is told when the run's approval rule stops a call
APPROVAL_SUMMARY = "approval required before this action"


class Verdict(enum.StrEnum):
    """What the pipeline does with a call."""

    RUN = "run"  # hand it to its executor
    RECORD = "record"  # record `Decision.result` as its result; it never runs
    APPROVAL = "approval"  # it runs only with the owner's approval of exactly this call
    ASK_OWNER = "ask_owner"  # pause: the owner decides whether it runs (again)


@dataclass(frozen=True)
class CallFacts:
    """Everything the rules of `decide` read about one requested call.

    `arguments` is None when the model's arguments are not a JSON object. `risky`: running the
    call twice could do harm (the tool's idempotency facts); it is weighed only where a rule
    reads it (the run requires approvals, or the call was caught in flight) and False otherwise.
    `in_flight`: the call's intent was found without a result (its worker died while it ran);
    `approved`: the owner approved exactly that call while the run was paused; `asked_before`:
    the owner was already asked about it.
    """

    tool: str
    arguments: dict[str, Any] | None
    granted: tuple[str, ...]
    review: bool = False
    approval_required: bool = False
    risky: bool = False
    in_flight: bool = False
    approved: bool = False
    asked_before: bool = False
    #: the policy engine's answer for the agent's trust level and the tool's manifest
    #: (skills.toolpolicy.decide), None for a tool it does not know (a registered kind)
    policy: PolicyDecision | None = None


#: policy rules whose approval comes from the trust level or the manifest (the run's own
#: approval_required flag is weighed by `decide` itself)
TRUST_APPROVAL_RULES = frozenset({"requires_approval", "suggest", "risk"})


@dataclass(frozen=True)
class Decision:
    """The verdict on a call; `result` (an envelope) for RECORD, `summary` for the owner when
    the verdict asks for approval."""

    verdict: Verdict
    result: dict[str, Any] | None = None
    summary: str = ""


def decide(facts: CallFacts) -> Decision:
    """The verdict on one call, by today's rules, in this order:

    - a call caught in flight runs again only if the owner approved it; one that could do harm
      twice is put to the owner (once); any other is recorded as interrupted, never rerun;
    - host-side tools (ask_user, request_approval, save_credential) are always available,
      except in a review run;
    - any other tool runs only when granted to the run, with arguments that are an object;
    - a call the agent's trust level does not allow (the policy engine's `trust_level` rule)
      is refused as data, before any host-side effect;
    - a run that requires approvals asks for one before each call that could do harm twice;
    - a call the trust level or the tool's manifest puts to the owner asks for approval.
    """
    granted_call = facts.tool in facts.granted and facts.arguments is not None
    if facts.in_flight:
        if facts.approved:
            return Decision(Verdict.RUN)
        if granted_call and facts.risky and not facts.asked_before:
            return Decision(Verdict.ASK_OWNER, summary=IN_FLIGHT_SUMMARY)
        # The outcome is unknown, so it is not run again; the model sees that and decides.
        return Decision(
            Verdict.RECORD,
            result=envelope(
                ok=False,
                output=(
                    "This call was interrupted before its result was recorded; its outcome is "
                    "unknown. Check the current state before repeating it."
                ),
                error_code=INTERRUPTED,
                retryable=True,
            ),
        )
    policy = facts.policy
    if (
        policy is not None
        and policy.verdict is PolicyVerdict.UNAVAILABLE
        and policy.rule == "trust_level"
        and not (facts.review and facts.tool in SYNTHETIC_TOOLS)
    ):
        return Decision(
            Verdict.RECORD, result=envelope(ok=False, output=policy.reason, error_code="denied")
        )
    if facts.tool in SYNTHETIC_TOOLS:
        if facts.review:
            return Decision(
                Verdict.RECORD,
                result=envelope(
                    ok=False,
                    output=f"{facts.tool} is not available in a review run",
                    error_code="denied",
                ),
            )
        return Decision(Verdict.RUN)
    if facts.tool not in facts.granted:
        granted = ", ".join(facts.granted) or "none"
        return Decision(
            Verdict.RECORD,
            result=envelope(
                ok=False,
                output=f"tool {facts.tool!r} is not granted to this run (granted: {granted})",
                error_code="denied",
            ),
        )
    if facts.arguments is None:
        return Decision(
            Verdict.RECORD,
            result=envelope(
                ok=False, output="the arguments are not a JSON object", error_code="invalid_args"
            ),
        )
    if facts.approval_required and facts.risky:
        return Decision(Verdict.APPROVAL, summary=APPROVAL_SUMMARY)
    if (
        policy is not None
        and policy.verdict is PolicyVerdict.NEEDS_APPROVAL
        and policy.rule in TRUST_APPROVAL_RULES
    ):
        return Decision(Verdict.APPROVAL, summary=policy.reason)
    return Decision(Verdict.RUN)


def call_facts(
    run: MotorRun,
    tool: str,
    arguments: dict[str, Any] | None,
    *,
    in_flight: bool = False,
    approved: bool = False,
    asked_before: bool = False,
) -> CallFacts:
    """The facts of a call of `tool` with `arguments` in `run` (see `CallFacts`)."""
    known = manifests.manifest(tool) is not None
    weighed = tool in run.tools and arguments is not None and (in_flight or run.approval_required)
    return CallFacts(
        tool=tool,
        arguments=arguments,
        granted=tuple(run.tools),
        review=run.review,
        approval_required=run.approval_required,
        risky=weighed
        and needs_approval(tool, arguments or {}, network_enabled=bool(run.allowed_domains)),
        in_flight=in_flight,
        approved=approved,
        asked_before=asked_before,
        policy=decide_call(standing_of(run), tool, arguments) if known else None,
    )
