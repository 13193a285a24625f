"""The decision before every tool call: every (risk x trust level x requires_approval) cell,
then each rule that precedes the table, on synthetic and on the real manifests."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from skills.toolpolicy.decide import CallContext, Verdict, decide
from skills.toolpolicy.manifests import MANIFESTS, Category, Cost, Risk, ToolManifest
from skills.toolpolicy.trust import TrustLevel

OBS, S, SA, BA = (
    TrustLevel.OBSERVE,
    TrustLevel.SUGGEST,
    TrustLevel.SUPERVISED_AUTO,
    TrustLevel.BOUNDED_AUTO,
)
RUN, ASK, NO = Verdict.RUNS, Verdict.NEEDS_APPROVAL, Verdict.UNAVAILABLE


def _manifest(risk: Risk, *, requires_approval: bool, min_trust: TrustLevel) -> ToolManifest:
    return ToolManifest(
        id="probe",
        name="Probe",
        description="A tool for the table.",
        category=Category.NETWORK,
        inputs={"type": "object", "properties": {}},
        outputs={"type": "object"},
        risk=risk,
        cost=Cost.FREE,
        min_trust_level=min_trust,
        requires_approval=requires_approval,
    )


GRANTED = CallContext(granted=frozenset({"probe"}))

# A read-only tool (available at every level): what each level does with it, per risk.
READ_ONLY_TABLE = {
    # (risk, trust): verdict without requires_approval
    (Risk.LOW, OBS): RUN,
    (Risk.MEDIUM, OBS): ASK,
    (Risk.HIGH, OBS): ASK,
    (Risk.LOW, S): ASK,
    (Risk.MEDIUM, S): ASK,
    (Risk.HIGH, S): ASK,
    (Risk.LOW, SA): RUN,
    (Risk.MEDIUM, SA): RUN,
    (Risk.HIGH, SA): ASK,
    (Risk.LOW, BA): RUN,
    (Risk.MEDIUM, BA): RUN,
    (Risk.HIGH, BA): RUN,
}


@pytest.mark.parametrize(
    ("risk", "trust", "requires_approval"),
    list(itertools.product(Risk, TrustLevel, [False, True])),
)
def test_every_cell_of_risk_trust_and_requires_approval(risk, trust, requires_approval):
    manifest = _manifest(risk, requires_approval=requires_approval, min_trust=OBS)

    decision = decide(manifest, trust, GRANTED, {})

    expected = ASK if requires_approval else READ_ONLY_TABLE[(risk, trust)]
    assert decision.verdict is expected
    if requires_approval:
        assert decision.rule == "requires_approval"


@pytest.mark.parametrize(
    ("risk", "requires_approval"), list(itertools.product(Risk, [False, True]))
)
def test_an_observing_agent_is_refused_every_side_effect(risk, requires_approval):
    manifest = _manifest(risk, requires_approval=requires_approval, min_trust=S)

    decision = decide(manifest, OBS, GRANTED, {})

    assert decision.verdict is NO
    assert decision.rule == "trust_level"
    assert decision.reason == (
        "probe needs trust level suggest or higher; this agent is at observe (it may only read)"
    )
    for trust in (S, SA, BA):
        assert decide(manifest, trust, GRANTED, {}).verdict is not NO


@pytest.mark.parametrize("trust", list(TrustLevel))
def test_a_tool_granted_by_an_approved_skill_runs_without_asking_again(trust):
    high = _manifest(Risk.HIGH, requires_approval=False, min_trust=OBS)
    context = CallContext(granted=frozenset({"probe"}), skill_grants=frozenset({"probe"}))

    decision = decide(high, trust, context, {})

    # suggest asks for every call even within an approved skill; the others run it
    assert decision.verdict is (ASK if trust is S else RUN)
    assert decision.rule == ("suggest" if trust is S else "approved_skill")


@pytest.mark.parametrize("trust", list(TrustLevel))
def test_no_level_and_no_approved_skill_skips_requires_approval(trust):
    manifest = _manifest(Risk.LOW, requires_approval=True, min_trust=OBS)
    context = CallContext(granted=frozenset({"probe"}), skill_grants=frozenset({"probe"}))

    assert decide(manifest, trust, context, {}).verdict is ASK


def test_unknown_ungranted_and_malformed_calls_are_refused_with_the_reason():
    read = MANIFESTS["read"]
    context = CallContext(granted=frozenset({"list"}))

    unknown = decide(None, BA, context, {}, name="telnet")
    ungranted = decide(read, BA, context, {"path": "a"})
    malformed = decide(MANIFESTS["list"], BA, context, None)

    assert (unknown.verdict, unknown.rule, unknown.reason) == (
        NO,
        "unknown_tool",
        "there is no tool 'telnet'",
    )
    assert (ungranted.verdict, ungranted.rule, ungranted.reason) == (
        NO,
        "not_granted",
        "tool 'read' is not granted to this run (granted: list)",
    )
    assert (malformed.verdict, malformed.rule) == (NO, "invalid_args")


def test_host_side_tools_are_unavailable_in_a_review_run():
    context = CallContext(granted=frozenset({"ask_user", "read"}), review=True)

    assert decide(MANIFESTS["ask_user"], BA, context, {"question": "?"}).rule == "review_run"
    assert decide(MANIFESTS["read"], BA, context, {"path": "a"}).verdict is RUN


def test_approval_required_pauses_only_calls_whose_repetition_could_harm():
    context = CallContext(
        granted=frozenset({"fetch", "read", "write"}), approval_required=True, network_enabled=True
    )

    post = decide(MANIFESTS["fetch"], BA, context, {"url": "https://x.test", "method": "POST"})
    get = decide(MANIFESTS["fetch"], BA, context, {"url": "https://x.test"})
    read = decide(MANIFESTS["read"], BA, context, {"path": "a"})

    assert (post.verdict, post.rule) == (ASK, "approval_required")
    assert get.verdict is RUN
    assert read.verdict is RUN


def test_a_suggesting_agent_asks_for_every_sandbox_call_but_not_to_ask_a_human():
    granted = CallContext(granted=frozenset({"read", "ask_user", "request_approval"}))

    assert decide(MANIFESTS["read"], S, granted, {"path": "a"}).rule == "suggest"
    assert decide(MANIFESTS["ask_user"], S, granted, {"question": "?"}).verdict is RUN
    assert decide(MANIFESTS["request_approval"], S, granted, {}).verdict is RUN


def test_an_observing_agent_reads_with_the_real_manifests_and_is_refused_every_write():
    everything = CallContext(granted=frozenset(MANIFESTS))
    verdicts = {tool: decide(m, OBS, everything, {}).verdict for tool, m in MANIFESTS.items()}

    assert verdicts == {
        "code": NO,
        "bash": NO,
        "read": RUN,
        "write": NO,
        "edit": NO,
        "list": RUN,
        "glob": RUN,
        "grep": RUN,
        "fetch": NO,
        "browser": NO,
        "ask_user": RUN,
        "request_approval": RUN,
        "save_credential": NO,
    }


def test_a_new_agents_level_runs_every_built_in_tool_it_is_granted():
    everything = CallContext(granted=frozenset(MANIFESTS))

    assert {t: decide(m, SA, everything, {}).verdict for t, m in MANIFESTS.items()} == {
        t: RUN for t in MANIFESTS
    }


def test_the_browsers_risk_is_that_of_each_action():
    browser = MANIFESTS["browser"]
    granted = CallContext(granted=frozenset({"browser"}))
    gated = CallContext(granted=frozenset({"browser"}), approval_required=True)
    navigate = {"action": "navigate", "url": "https://portal.test/"}
    evaluate = {"action": "evaluate", "expression": "document.title"}
    submit = {"action": "click", "ref": "e20", "submit": True}

    # read-only JavaScript and a submitting click are high risk; everything else medium
    assert [decide(browser, SA, granted, a).verdict for a in (navigate, evaluate, submit)] == [
        RUN,
        ASK,
        ASK,
    ]
    assert decide(browser, SA, granted, evaluate).reason == (
        "browser is high risk; at trust level supervised_auto it needs approval"
    )
    assert [decide(browser, BA, granted, a).verdict for a in (navigate, evaluate, submit)] == [
        RUN,
        RUN,
        RUN,
    ]
    # under the run's approval rule only the submit could do harm twice
    assert [decide(browser, BA, gated, a).rule for a in (navigate, evaluate, submit)] == [
        "trust_level",
        "trust_level",
        "approval_required",
    ]


def test_the_decision_is_pure_the_same_inputs_give_the_same_answer():
    manifest = dataclasses.replace(MANIFESTS["write"])
    context = CallContext(granted=frozenset({"write"}))

    first = decide(manifest, SA, context, {"path": "a", "content": "b"})
    second = decide(manifest, SA, context, {"path": "a", "content": "b"})

    assert first == second
