"""The cortex's follow-ups in one process: written with the learning, carried out once, not
before they are due, and never against a use that came after."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cognition.cortex import learn, record_acquired
from cognition.cortex.cleanup import cleanup_after
from cognition.cortex.follow_ups import follow_up_carry_out, follow_ups_sweep
from cognition.cortex.hook import outcome_key
from cognition.models import CortexFollowUp
from runs.models import MotorRun, RunEvent, RunStatus
from skills.disabling import RELEASE_REASON
from tests.skills.admin_support import APPROVER_PERMS, make_agent, make_user

from .support import acquired_skill, failed_run, succeeded_run

pytestmark = pytest.mark.django_db

API_DOWN = "upstream answered 503, try later"


@pytest.fixture
def agent():
    return make_agent("scout", owner=make_user("olivia", perms=APPROVER_PERMS))


@pytest.fixture
def policy(tmp_path, agent):
    policy = acquired_skill(tmp_path / "src", agent=agent, approver=agent.owner)
    record_acquired(
        agent=agent,
        task="Look up the sales report",
        skill_version=policy.skill.current_version,
        source="local",
    )
    return policy


def _learn(agent, run, signal):
    return learn(agent=agent, run=run, key=outcome_key(signal.pk))


def test_an_api_error_retry_waits_until_it_is_due_and_happens_once(agent, policy, settings):
    settings.MOTOR_CORTEX_RETRY_WAIT_SECONDS = 60.0
    run, signal = failed_run(agent, policy, message=API_DOWN)
    result = _learn(agent, run, signal)
    assert (result.failure_class, result.follow_ups) == ("api_error", ["retry"])
    row = CortexFollowUp.objects.get()
    assert (row.due_at - row.created_at) == timedelta(seconds=60)

    # before the wait is over nothing happens, whoever asks
    assert follow_up_carry_out(row.pk) is None
    assert follow_ups_sweep() == {}
    assert MotorRun.objects.get(pk=run.pk).status == RunStatus.FAILED
    # once it is due the run gets its second attempt, recorded as the cortex's
    assert follow_up_carry_out(row.pk, now=row.due_at) == "retried"
    run.refresh_from_db()
    assert (run.status, run.current_attempt_index) == (RunStatus.RUNNING, 1)
    event = RunEvent.objects.filter(run=run).latest("id")
    assert (event.actor, event.detail["cortex_retry"]["waited_s"]) == ("skill cortex", 60.0)
    # and never a second time
    assert follow_up_carry_out(row.pk, now=row.due_at) is None
    assert follow_ups_sweep(now=row.due_at + timedelta(hours=1)) == {}
    assert RunEvent.objects.filter(run=run, actor="skill cortex").count() == 1


def test_a_run_with_no_attempt_left_is_not_retried(agent, policy):
    run, signal = failed_run(agent, policy, message=API_DOWN)
    MotorRun.objects.filter(pk=run.pk).update(max_attempts=1)
    run.refresh_from_db()
    result = _learn(agent, run, signal)
    assert (result.failure_class, result.follow_ups) == ("api_error", [])
    assert not CortexFollowUp.objects.exists()


def test_a_failure_that_releases_writes_its_release_with_the_learning(agent, policy):
    run, signal = failed_run(agent, policy, message="KeyError: 'rows'")
    result = _learn(agent, run, signal)
    assert (result.failure_class, result.follow_ups) == ("runtime_error", ["release"])
    assert cleanup_after(agent=agent, result=result).action == "released"
    policy.refresh_from_db()
    assert policy.disabled_reason == RELEASE_REASON


def test_a_late_release_does_not_disable_a_skill_that_ran_again_since(agent, policy):
    # given a use whose release was never carried out (its worker died)
    run, signal = succeeded_run(agent, policy)
    first = _learn(agent, run, signal)
    assert first.follow_ups == ["release"]
    # when the skill runs again before the sweep comes
    later_run, later_signal = succeeded_run(agent, policy, task="Look up the sales report again")
    # then the late release stands down, and the later use's own release is the one done
    pending = CortexFollowUp.objects.get(outcome__key=first.key)
    assert follow_up_carry_out(pending.pk) == "superseded: the skill ran again since"
    policy.refresh_from_db()
    assert policy.disabled_at is None
    second = _learn(agent, later_run, later_signal)
    assert cleanup_after(agent=agent, result=second).action == "released"
    policy.refresh_from_db()
    assert policy.disabled_reason == RELEASE_REASON
    assert [r.result for r in CortexFollowUp.objects.order_by("id")] == [
        "superseded: the skill ran again since",
        "released",
    ]
