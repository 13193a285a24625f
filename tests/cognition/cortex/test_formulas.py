"""The seed's formulas and word rules, exactly (no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cognition.cortex.failures import RECOVERY, classify_text
from cognition.cortex.learning import DECAY, failure_weight, success_weight
from cognition.cortex.perception import effective_weight
from cognition.cortex.sensory import pattern_merge, region_name_for, signal_words
from cognition.models import FailureClass

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def test_the_seeds_example_keeps_the_kind_of_work_and_drops_the_entities():
    assert signal_words("Look up Alice's Q3 sales report") == ["query", "sales", "report"]


def test_an_entity_only_task_leaves_no_signal_word():
    assert signal_words("Alice Q3 2025") == []
    assert region_name_for([], fallback="sales-report") == "sales-report"


@pytest.mark.parametrize(
    ("task", "words"),
    [
        # names inside a sentence, a company, a day, a file name
        ("Convert report.pdf to text for Acme Corp by Friday", ["convert", "text"]),
        # an e-mail address and a URL
        ("Send the invoice to bob@example.org from https://example.org/x", ["send", "invoice"]),
        # a place and a relative day; currencies in capitals; numbers
        ("Find the weather in Paris tomorrow", ["query", "weather"]),
        ("What is the exchange rate of USD to EUR for 1200", ["query", "exchange", "rate"]),
        # at most four words, the verb first
        (
            "please summarize the quarterly revenue spreadsheet comments quickly",
            ["summarize", "quarterly", "revenue", "spreadsheet"],
        ),
    ],
)
def test_signal_words_of_tasks(task, words):
    assert signal_words(task) == words


def test_a_pattern_merges_without_duplicates_and_keeps_the_newest_ten():
    assert pattern_merge(["query", "sales"], ["query", "report"], limit=10) == [
        "query",
        "sales",
        "report",
    ]
    merged = pattern_merge([f"w{i}" for i in range(9)], ["a", "b", "w1"], limit=10)
    assert merged == [f"w{i}" for i in range(1, 9)] + ["a", "b"]


def test_success_follows_the_seeds_formula():
    # w + (1 − w) · 0.15 · 1 / (1 + successes_in_last_7d)
    assert success_weight(0.5, 0) == pytest.approx(0.575)
    assert success_weight(0.5, 1) == pytest.approx(0.5375)
    assert success_weight(0.8, 3) == pytest.approx(0.8 + 0.2 * 0.15 / 4)


def test_failure_decays_by_class():
    assert DECAY == {
        "task_mismatch": 0.4,
        "runtime_error": 0.6,
        "auth_error": 0.8,
        "dependency_missing": 0.85,
        "api_error": 0.9,
    }
    assert failure_weight(0.5, FailureClass.TASK_MISMATCH) == pytest.approx(0.2)
    assert failure_weight(0.5, FailureClass.API_ERROR) == pytest.approx(0.45)


def test_effective_weight_fades_over_180_days_to_a_floor_of_0_3():
    assert effective_weight(0.8, None, now=NOW) == 0.8
    assert effective_weight(0.8, NOW, now=NOW) == pytest.approx(0.8)
    assert effective_weight(0.8, NOW - timedelta(days=90), now=NOW) == pytest.approx(0.4)
    assert effective_weight(0.8, NOW - timedelta(days=170), now=NOW) == pytest.approx(0.24)
    assert effective_weight(0.8, NOW - timedelta(days=400), now=NOW) == pytest.approx(0.24)


@pytest.mark.parametrize(
    ("category", "text", "expected", "dependency"),
    [
        ("tool_failure", "HTTP 401 Unauthorized from api.example.org", "auth_error", ""),
        ("tool_failure", "error: invalid api key", "auth_error", ""),
        ("tool_failure", "bash: convert: command not found", "dependency_missing", "convert"),
        (
            "tool_failure",
            "ModuleNotFoundError: No module named 'pandas'",
            "dependency_missing",
            "pandas",
        ),
        ("tool_failure", "upstream answered 503 Service Unavailable", "api_error", ""),
        ("model_failure", "the model endpoint is unreachable", "api_error", ""),
        ("invalid_task", "tool 'fetch' was refused 3 times in a row (denied)", "task_mismatch", ""),
        ("tool_failure", "batch operations are not supported", "task_mismatch", ""),
        ("budget_exhausted", "the run used all its iterations", "runtime_error", ""),
    ],
)
def test_failures_are_classified_from_the_summary(category, text, expected, dependency):
    classified = classify_text(category=category, text=text)
    assert (classified.failure_class, classified.dependency) == (expected, dependency)


def test_the_recovery_rules_are_the_seeds_table():
    rules = {
        cls: (r.action, r.retry, r.wait_s, r.max_retries, r.release, r.suggest_next)
        for cls, r in RECOVERY.items()
    }
    assert rules == {
        "dependency_missing": ("confirm_dependency", False, 0, 0, False, False),
        "api_error": ("retry", True, 3.0, 1, False, False),
        "auth_error": ("check_credentials", False, 0, 0, False, False),
        "task_mismatch": ("release_and_suggest_next", False, 0, 0, True, True),
        "runtime_error": ("release_and_suggest_next", False, 0, 0, True, True),
    }
