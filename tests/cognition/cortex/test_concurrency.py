"""Concurrent runs of one agent end at once: every outcome is learned, none is lost."""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from cognition.cortex import learn, record_acquired
from cognition.cortex.hook import outcome_key
from cognition.cortex.learning import success_weight
from cognition.models import CortexCandidate, CortexOutcome
from tests.skills.admin_support import APPROVER_PERMS, make_agent, make_user

from .support import acquired_skill, failed_run, succeeded_run

# On SQLite the write lock serialises the updates; the policy audit rows the import wrote leave
# before the flush (tests/conftest.py).
pytestmark = [pytest.mark.django_db(transaction=True)]

THREADS = 8


def test_simultaneous_outcomes_of_one_agent_are_all_learned(tmp_path):
    olivia = make_user("olivia", perms=APPROVER_PERMS)
    agent = make_agent("scout", owner=olivia)
    policy = acquired_skill(tmp_path / "src", agent=agent, approver=olivia)
    record_acquired(
        agent=agent,
        task="Look up the sales report",
        skill_version=policy.skill.current_version,
        source="local",
    )
    # given eight finished runs (six successes, two runtime errors) of the agent's skill
    ends = [succeeded_run(agent, policy) for _ in range(THREADS - 2)]
    ends += [failed_run(agent, policy, message="the script crashed") for _ in range(2)]
    barrier = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def learn_one(run, signal) -> None:
        try:
            barrier.wait()
            learn(agent=agent, run=run, key=outcome_key(signal.pk))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            connections.close_all()

    # when all of them are learned at the same moment, each from its own thread and connection
    threads = [threading.Thread(target=learn_one, args=end) for end in ends]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    # then every outcome counted: nothing was lost to a concurrent read-modify-write
    assert errors == []
    candidate = CortexCandidate.objects.get()
    assert (candidate.successes, candidate.failures) == (THREADS - 2, 2)
    assert candidate.successes_last_7d == THREADS - 2
    assert CortexOutcome.objects.count() == THREADS
    # and the weight is the one a serial order gives: the successes' steps (whatever their order
    # between the failures) and both decays; recompute it in the order the ledger recorded
    weight = 0.5
    recent = 0
    for success in CortexOutcome.objects.order_by("id").values_list("success", flat=True):
        if success:
            weight = success_weight(weight, recent)
            recent += 1
        else:
            weight *= 0.6
    assert candidate.weight == pytest.approx(weight)
    assert list(CortexOutcome.objects.order_by("id").values_list("weight_before", flat=True))[
        1:
    ] == pytest.approx(
        list(CortexOutcome.objects.order_by("id").values_list("weight_after", flat=True))[:-1]
    )
