"""The decide stage: a pure function from a call's facts to a verdict, tested without a run."""

from __future__ import annotations

from dataclasses import replace

import pytest

from runs.pipeline.decide import (
    APPROVAL_SUMMARY,
    IN_FLIGHT_SUMMARY,
    CallFacts,
    Verdict,
    decide,
)

GRANTED = CallFacts(tool="bash", arguments={"command": "ls"}, granted=("bash", "read"))


def test_a_granted_call_with_object_arguments_runs():
    assert decide(GRANTED).verdict is Verdict.RUN


def test_a_call_of_a_tool_not_granted_is_recorded_as_denied_naming_the_grant():
    decision = decide(replace(GRANTED, tool="write"))
    assert decision.verdict is Verdict.RECORD
    assert decision.result is not None
    assert (decision.result["ok"], decision.result["error_code"]) == (False, "denied")
    assert decision.result["output"] == (
        "tool 'write' is not granted to this run (granted: bash, read)"
    )


def test_arguments_that_are_not_an_object_are_recorded_as_invalid():
    decision = decide(replace(GRANTED, arguments=None))
    assert decision.verdict is Verdict.RECORD
    assert decision.result is not None
    assert decision.result["error_code"] == "invalid_args"


@pytest.mark.parametrize("tool", ["ask_user", "request_approval", "save_credential"])
def test_host_side_tools_run_ungranted_but_not_in_a_review_run(tool):
    assert decide(replace(GRANTED, tool=tool, granted=())).verdict is Verdict.RUN
    decision = decide(replace(GRANTED, tool=tool, granted=(), review=True))
    assert decision.verdict is Verdict.RECORD
    assert decision.result is not None
    assert decision.result["output"] == f"{tool} is not available in a review run"


def test_the_approval_rule_stops_only_calls_that_could_do_harm_twice():
    assert decide(replace(GRANTED, approval_required=True)).verdict is Verdict.RUN
    decision = decide(replace(GRANTED, approval_required=True, risky=True))
    assert (decision.verdict, decision.summary) == (Verdict.APPROVAL, APPROVAL_SUMMARY)
    assert decide(replace(GRANTED, risky=True)).verdict is Verdict.RUN


def test_a_call_caught_in_flight_is_never_rerun_without_the_owner():
    in_flight = replace(GRANTED, in_flight=True)
    # harmless to repeat, or asked about already: recorded as interrupted
    for facts in (in_flight, replace(in_flight, risky=True, asked_before=True)):
        decision = decide(facts)
        assert decision.verdict is Verdict.RECORD
        assert decision.result is not None
        assert (decision.result["error_code"], decision.result["retryable"]) == (
            "interrupted",
            True,
        )
    # could do harm twice: the owner is asked
    decision = decide(replace(in_flight, risky=True))
    assert (decision.verdict, decision.summary) == (Verdict.ASK_OWNER, IN_FLIGHT_SUMMARY)
    # approved by the owner: it runs
    assert decide(replace(in_flight, risky=True, approved=True)).verdict is Verdict.RUN
