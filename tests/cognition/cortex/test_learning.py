"""Perception, acquisition and learning from real run ends (seed 003 Phases 1, 4)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from cognition.cortex import learn, perceive, record_acquired
from cognition.cortex.cleanup import activate, retain
from cognition.cortex.hook import CORTEX_HOOK_NAME, learn_from_signal, outcome_key
from cognition.models import (
    Cortex,
    CortexCandidate,
    CortexLesson,
    CortexOutcome,
    CortexRegion,
)
from cognition.services import credential_set
from runs.models import FailureCategory
from skills.disabling import RELEASE_REASON, policy_disable
from skills.models import Policy
from skills.services import Actor
from tests.skills.admin_support import APPROVER_PERMS, make_agent, make_user

from .support import REPORT_SKILL, acquired_skill, failed_run, succeeded_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def olivia():
    return make_user("olivia", perms=APPROVER_PERMS)


@pytest.fixture
def agent(olivia):
    return make_agent("scout", owner=olivia)


@pytest.fixture
def policy(tmp_path, agent, olivia):
    return acquired_skill(tmp_path / "src", agent=agent, approver=olivia)


def _acquire(agent, policy, task="Look up Alice's Q3 sales report"):
    return record_acquired(
        agent=agent, task=task, skill_version=policy.skill.current_version, source="local"
    )


def _candidate(policy) -> CortexCandidate:
    return CortexCandidate.objects.get(skill=policy.skill)


def test_an_empty_cortex_is_a_miss_that_carries_the_plain_search(agent, policy):
    seen = perceive(agent=agent, task="Look up the sales report")
    assert (seen.hit, seen.degraded, seen.candidates) == (False, False, [])
    assert [h.name for h in seen.search] == ["sales-report"]
    assert not Cortex.objects.exists()


def test_an_acquired_skill_enters_a_region_named_by_the_tasks_signal_words(agent, policy):
    candidate = _acquire(agent, policy)
    region = CortexRegion.objects.get()
    assert (region.name, region.signals) == ("sales-report", ["query", "sales", "report"])
    assert (candidate.weight, candidate.version, candidate.source) == (0.5, 1, "local")
    assert (candidate.successes, candidate.failures, candidate.reflex) == (0, 0, False)
    assert candidate.side_effects == []  # read only
    assert candidate.skill_md_chars == len(REPORT_SKILL["SKILL.md"])
    # when a task of the same kind comes, the pattern hits
    seen = perceive(agent=agent, task="Find the sales report for Bob")
    assert (seen.hit, seen.region) == (True, "sales-report")
    assert [(c.skill, c.effective_weight, c.reflex_ready) for c in seen.candidates] == [
        ("sales-report", 0.5, False)
    ]


def test_an_entity_only_task_makes_a_region_without_signals_named_after_the_skill(agent, policy):
    _acquire(agent, policy, task="Alice Q3 2025")
    region = CortexRegion.objects.get()
    assert (region.name, region.signals) == ("sales-report", [])
    seen = perceive(agent=agent, task="Alice Q3 2025")
    assert (seen.hit, seen.degraded, seen.candidates) == (False, False, [])


def test_a_success_learns_once_and_releases_the_skill(agent, policy):
    _acquire(agent, policy)
    run, signal = succeeded_run(agent, policy)

    result = learn_from_signal(signal.pk)

    assert result is not None and result.success
    candidate = _candidate(policy)
    assert candidate.weight == pytest.approx(0.575)
    assert (candidate.successes, candidate.successes_last_7d, candidate.consecutive_successes) == (
        1,
        1,
        1,
    )
    assert candidate.last_used is not None
    policy.refresh_from_db()
    assert (policy.disabled_reason, policy.disabled_by_id) == (RELEASE_REASON, None)
    # a redelivered signal teaches nothing twice
    before = (candidate.weight, candidate.successes, CortexOutcome.objects.count())
    assert learn_from_signal(signal.pk) is None
    assert learn(agent=agent, run=run, key=outcome_key(signal.pk)) is None
    candidate.refresh_from_db()
    assert (candidate.weight, candidate.successes, CortexOutcome.objects.count()) == before
    assert list(CortexOutcome.objects.values_list("key", "success", "weight_after")) == [
        (f"signal:{signal.pk}", True, pytest.approx(0.575))
    ]


def test_successes_in_one_week_teach_less_each(agent, policy):
    _acquire(agent, policy)
    weights = []
    for _ in range(3):
        policy.refresh_from_db()
        activate(agent=agent, skill="sales-report", actor=Actor.system("test"))
        _, signal = succeeded_run(agent, policy)
        learn_from_signal(signal.pk)
        weights.append(_candidate(policy).weight)
    w1 = 0.5 + 0.5 * 0.15
    w2 = w1 + (1 - w1) * 0.15 / 2
    w3 = w2 + (1 - w2) * 0.15 / 3
    assert weights == [pytest.approx(w1), pytest.approx(w2), pytest.approx(w3)]


def test_a_runtime_error_decays_releases_and_resets_the_streak(agent, policy):
    _acquire(agent, policy)
    CortexCandidate.objects.update(weight=0.95, consecutive_successes=6, reflex=True)
    _, signal = failed_run(agent, policy, message="the script crashed with a traceback")

    result = learn_from_signal(signal.pk)

    assert (result.failure_class, result.recovery.action) == (
        "runtime_error",
        "release_and_suggest_next",
    )
    candidate = _candidate(policy)
    assert candidate.weight == pytest.approx(0.95 * 0.6)
    assert (candidate.failures, candidate.consecutive_successes, candidate.reflex) == (1, 0, False)
    policy.refresh_from_db()
    assert policy.disabled_reason == RELEASE_REASON


def test_an_auth_error_keeps_the_skill_and_contradicts_what_was_learned_of_the_credential(
    agent, policy, olivia
):
    _acquire(agent, policy)
    credential_set(agent=agent, name="SALES_TOKEN", value="t0ken-value", actor=olivia)
    _, ok = succeeded_run(agent, policy, credentials=["SALES_TOKEN"])
    learn_from_signal(ok.pk)
    lesson = CortexLesson.objects.get()
    assert (lesson.kind, lesson.key, lesson.region.name, lesson.confidence) == (
        "env_ready",
        "SALES_TOKEN",
        "sales-report",
        0.6,
    )
    activate(agent=agent, skill="sales-report", actor=Actor.system("test"))
    weight = _candidate(policy).weight
    _, bad = failed_run(agent, policy, message="HTTP 401 Unauthorized", credentials=["SALES_TOKEN"])

    result = learn_from_signal(bad.pk)

    assert (result.failure_class, result.recovery.action) == ("auth_error", "check_credentials")
    assert _candidate(policy).weight == pytest.approx(weight * 0.8)
    policy.refresh_from_db()
    assert policy.disabled_at is None  # kept for the user to fix the credential
    assert CortexLesson.objects.get().confidence == pytest.approx(0.4)


def test_a_dependency_missing_twice_becomes_a_lesson_that_grows_with_each_repeat(agent, policy):
    _acquire(agent, policy)
    confidences = []
    for _ in range(3):
        _, signal = failed_run(agent, policy, message="bash: convert: command not found")
        result = learn_from_signal(signal.pk)
        assert result.recovery.action == "confirm_dependency"
        confidences.append(
            list(CortexLesson.objects.values_list("kind", "key", "action", "confidence"))
        )
    assert confidences == [
        [],
        [("dependency_warning", "convert", "check_bin_before_install", 0.6)],
        [("dependency_warning", "convert", "check_bin_before_install", pytest.approx(0.7))],
    ]
    assert _candidate(policy).weight == pytest.approx(0.5 * 0.85**3)


def test_a_task_mismatch_writes_a_skill_quality_warning(agent, policy):
    _acquire(agent, policy)
    _, signal = failed_run(
        agent,
        policy,
        message="batch exports are not supported by this skill",
        category=FailureCategory.TOOL_FAILURE,
    )
    learn_from_signal(signal.pk)
    lesson = CortexLesson.objects.get()
    assert (lesson.kind, lesson.skill_name, lesson.confidence) == (
        "skill_quality_warning",
        "sales-report",
        0.6,
    )
    assert "not supported" in lesson.detail
    assert _candidate(policy).weight == pytest.approx(0.2)


def test_reflex_is_promoted_after_the_fifth_straight_success_and_a_new_version_resets_it(
    tmp_path, agent, policy, olivia
):
    _acquire(agent, policy)
    CortexCandidate.objects.update(weight=0.93, consecutive_successes=4, successes=4)
    _, signal = succeeded_run(agent, policy)
    learn_from_signal(signal.pk)
    candidate = _candidate(policy)
    assert (candidate.consecutive_successes, candidate.reflex) == (5, True)
    assert candidate.weight == pytest.approx(0.93 + 0.07 * 0.15)
    seen = perceive(agent=agent, task="look up the sales report")
    assert seen.reflex is not None and seen.reflex.skill == "sales-report"

    # when a new version is installed, perception refuses the reflex path
    acquired_skill(
        tmp_path / "src",
        agent=agent,
        approver=olivia,
        files={"SKILL.md": REPORT_SKILL["SKILL.md"] + "4. Mail it.\n"},
    )
    seen = perceive(agent=agent, task="look up the sales report")
    assert seen.reflex is None
    assert seen.candidates[0].reflex_blocked_by == "version changed (learned v1, now v2)"
    # and learning on the new version resets reflex and the streak
    policy.refresh_from_db()
    activate(agent=agent, skill="sales-report", actor=Actor.system("test"))
    _, signal = succeeded_run(agent, Policy.objects.get(pk=policy.pk))
    learn_from_signal(signal.pk)
    candidate = _candidate(policy)
    assert (candidate.version, candidate.consecutive_successes, candidate.reflex) == (2, 1, False)


def test_write_side_effects_never_become_reflex(tmp_path, agent, olivia):
    policy = acquired_skill(tmp_path / "w", agent=agent, approver=olivia, tools=["read", "write"])
    _acquire(agent, policy)
    assert _candidate(policy).side_effects == ["write:workspace"]
    CortexCandidate.objects.update(weight=0.99, consecutive_successes=9)
    _, signal = succeeded_run(agent, policy)
    learn_from_signal(signal.pk)
    assert _candidate(policy).reflex is False


def test_an_old_candidate_fades_out_of_perception(agent, policy):
    _acquire(agent, policy)
    CortexCandidate.objects.update(weight=0.6, last_used=timezone.now() - timedelta(days=100))
    # 0.6 · (1 − 100/180) = 0.267 < 0.3
    seen = perceive(agent=agent, task="look up the sales report")
    assert (seen.hit, seen.candidates) == (False, [])


def test_a_corrupt_cortex_degrades_to_plain_search_and_is_rebuilt_at_the_next_update(agent, policy):
    _acquire(agent, policy)
    CortexRegion.objects.update(signals={"not": "a list"})

    seen = perceive(agent=agent, task="look up the sales report")

    assert (seen.hit, seen.degraded) == (False, True)
    assert "corrupt" in seen.reason
    assert [h.name for h in seen.search] == ["sales-report"]
    # the next update rebuilds it
    _acquire(agent, policy)
    cortex = Cortex.objects.get()
    assert cortex.rebuilt_at is not None
    assert list(CortexRegion.objects.values_list("name", "signals")) == [
        ("sales-report", ["query", "sales", "report"])
    ]
    assert perceive(agent=agent, task="look up the sales report").hit is True


def test_a_corrupt_candidate_is_rebuilt_when_an_outcome_is_learned(agent, policy):
    _acquire(agent, policy)
    CortexCandidate.objects.update(recent_successes=["yesterday"])
    assert perceive(agent=agent, task="look up the sales report").degraded is True
    _, signal = succeeded_run(agent, policy)

    # the cortex is rebuilt; the run's skill is no longer a candidate, so nothing is learned
    assert learn_from_signal(signal.pk) is None
    assert Cortex.objects.get().rebuilt_at is not None
    assert not CortexCandidate.objects.exists()
    assert perceive(agent=agent, task="look up the sales report").degraded is False


def test_retention_is_suggested_after_three_strong_successes_and_yes_makes_it_long_term(
    agent, policy
):
    _acquire(agent, policy)
    CortexCandidate.objects.update(weight=0.85, successes=2)
    _, signal = succeeded_run(agent, policy)
    from cognition.cortex.cleanup import cleanup_after
    from cognition.cortex.learning import learn as learn_now

    result = learn_now(agent=agent, run=signal.run, key=outcome_key(signal.pk))
    assert cleanup_after(agent=agent, result=result).action == "retention_suggested"
    policy.refresh_from_db()
    assert policy.disabled_at is None

    kept = retain(agent=agent, skill="sales-report", keep=True, actor=Actor.system("test"))

    assert kept.action == "retained"
    assert not CortexCandidate.objects.exists()
    assert not CortexRegion.objects.exists()  # its only candidate left: the region is pruned
    policy.refresh_from_db()
    assert policy.disabled_at is None
    # the long-term skill's runs no longer teach the cortex (boundary rule 1)
    _, later = succeeded_run(agent, policy)
    assert learn_from_signal(later.pk) is None


def test_a_staff_disabled_skill_is_not_taken_up_again_by_the_cortex(agent, policy, olivia):
    _acquire(agent, policy)
    policy_disable(policy=policy, actor=Actor(user=olivia, label="admin:olivia"), reason="audit")
    assert activate(agent=agent, skill="sales-report", actor=Actor.system("test")) is False
    policy.refresh_from_db()
    assert (policy.disabled_reason, policy.disabled_by_id) == ("audit", olivia.pk)


def test_the_hook_is_registered():
    from cognition.brain_hooks import brain_hooks

    assert CORTEX_HOOK_NAME in brain_hooks()
