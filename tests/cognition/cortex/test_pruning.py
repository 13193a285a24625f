"""Pruning (seed 003 §4.6) after every update: 5 candidates per region, 80 regions, effective
weight < 0.1 removed, 10 signals per pattern, 30 lessons, confidence < 0.3 removed."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from cognition.cortex import perceive, record_acquired
from cognition.models import Cortex, CortexCandidate, CortexLesson, CortexRegion
from tests.skills.admin_support import APPROVER_PERMS, make_agent, make_user

from .support import acquired_skill

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(tmp_path):
    olivia = make_user("olivia", perms=APPROVER_PERMS)
    agent = make_agent("scout", owner=olivia)
    policy = acquired_skill(tmp_path / "src", agent=agent, approver=olivia)
    record_acquired(
        agent=agent,
        task="Look up the sales report",
        skill_version=policy.skill.current_version,
        source="local",
    )
    return agent, olivia, policy, Cortex.objects.get()


def _touch(agent, policy, task="Look up the sales report"):
    """Any update of the cortex (here: the same acquisition again) prunes it."""
    record_acquired(
        agent=agent, task=task, skill_version=policy.skill.current_version, source="local"
    )


def test_a_region_keeps_its_five_best_candidates(world, tmp_path):
    agent, olivia, policy, cortex = world
    region = CortexRegion.objects.get()
    weights = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.35]
    names = []
    for i, weight in enumerate(weights[1:], start=1):
        other = acquired_skill(tmp_path / f"s{i}", agent=agent, approver=olivia, name=f"report-{i}")
        CortexCandidate.objects.create(region=region, skill=other.skill, version=1, weight=weight)
        names.append(f"report-{i}")
    CortexCandidate.objects.filter(skill=policy.skill).update(weight=weights[0])

    _touch(agent, policy)

    kept = list(CortexCandidate.objects.order_by("-weight").values_list("skill__name", "weight"))
    assert kept == [("sales-report", 0.9)] + list(zip(names[:4], weights[1:5], strict=True))


def test_a_candidate_under_0_1_effective_weight_is_removed_with_its_empty_region(world):
    agent, _, policy, cortex = world
    # 0.2 · max(0.3, 1 − 170/180) = 0.06
    CortexCandidate.objects.update(weight=0.2, last_used=timezone.now() - timedelta(days=170))
    old = CortexRegion.objects.get()
    CortexLesson.objects.create(cortex=cortex, kind="env_ready", region=old, key="SALES_TOKEN")

    _touch(agent, policy, task="Convert the invoice spreadsheet")

    # the faded one went with its region and that region's lesson; the new one stays
    assert list(CortexRegion.objects.values_list("name", flat=True)) == ["invoice-spreadsheet"]
    assert list(CortexCandidate.objects.values_list("region__name", "weight")) == [
        ("invoice-spreadsheet", 0.5)
    ]
    assert not CortexLesson.objects.exists()


def test_at_most_80_regions_stay_the_strongest(world):
    agent, _, policy, cortex = world
    for i in range(85):
        region = CortexRegion.objects.create(cortex=cortex, name=f"area-{i:02d}", signals=["x"])
        CortexCandidate.objects.create(
            region=region, skill=policy.skill, version=1, weight=0.2 + i * 0.005
        )

    _touch(agent, policy)

    names = set(CortexRegion.objects.values_list("name", flat=True))
    assert len(names) == 80
    # sales-report (0.5) and the 79 strongest areas stay; areas 00..05 go
    assert "sales-report" in names
    assert {f"area-{i:02d}" for i in range(6)}.isdisjoint(names)
    assert {f"area-{i:02d}" for i in range(6, 85)} <= names


def test_a_pattern_keeps_its_ten_newest_signals(world):
    agent, _, policy, _ = world
    CortexRegion.objects.update(signals=[f"word{i}" for i in range(12)])

    _touch(agent, policy)

    assert CortexRegion.objects.get().signals == [f"word{i}" for i in range(5, 12)] + [
        "query",
        "sales",
        "report",
    ]


def test_lessons_under_0_3_go_and_at_most_30_stay(world):
    agent, _, policy, cortex = world
    CortexLesson.objects.create(cortex=cortex, kind="env_ready", key="WEAK", confidence=0.29)
    for i in range(32):
        CortexLesson.objects.create(
            cortex=cortex,
            kind="skill_quality_warning",
            skill_name=f"s{i}",
            confidence=0.3 + i * 0.02,
        )

    _touch(agent, policy)

    kept = list(CortexLesson.objects.values_list("skill_name", flat=True))
    assert len(kept) == 30
    assert not CortexLesson.objects.filter(key="WEAK").exists()
    assert set(kept) == {f"s{i}" for i in range(2, 32)}


def test_a_100000_character_task_is_perceived_and_acquired_without_trouble(world):
    agent, _, policy, _ = world
    task = "Look up the sales report " + "lorem ipsum " * 9_000
    assert len(task) > 100_000
    seen = perceive(agent=agent, task=task)
    assert (seen.hit, seen.region) == (True, "sales-report")
    _touch(agent, policy, task=task)
    # at most four signal words, read from the task's head
    assert CortexRegion.objects.get(name="sales-report-lorem").signals == [
        "query",
        "sales",
        "report",
        "lorem",
    ]
