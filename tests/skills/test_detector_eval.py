"""The suspicious-pattern check against the evaluation set: detection and false-positive rates."""

from __future__ import annotations

from tests.skills.detector_eval import evaluate, rate


def test_the_evaluation_set_is_large_enough():
    assert len(evaluate("malicious")) >= 40
    assert len(evaluate("benign")) >= 60


def test_at_least_90_percent_of_malicious_skills_are_flagged():
    outcomes = evaluate("malicious")
    missed = [o.name for o in outcomes if not o.flagged]
    assert rate(outcomes) >= 0.90, missed


def test_at_most_5_percent_of_benign_skills_are_flagged():
    outcomes = evaluate("benign")
    flagged = {o.name: o.rules for o in outcomes if o.flagged}
    assert rate(outcomes) <= 0.05, flagged
