"""Two runs extracting the same skill at the same time: each yields a version, no lost update.

Real threads, each with its own PostgreSQL connection, released together by a barrier.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from django.db import connection

from skills.extraction import skill_prepare_workspace, skills_extract_from_workspace
from skills.install import skill_install_bundle
from skills.models import Policy, PolicyStatus, Skill, SkillVersion
from skills.policy_edits import policy_update
from skills.selectors import policy_credential_values
from skills.services import Actor
from tests.skills.conftest import make_bundle, skill_md

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROUNDS = 3  # more rounds, more chances for the two transactions to overlap


def _extract_together(
    workspaces: list[Path], agent, pending: list[dict[str, str]] | None = None
) -> list[dict]:
    barrier = threading.Barrier(len(workspaces))
    results: list[dict | BaseException] = [None] * len(workspaces)  # type: ignore[list-item]

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[index] = skills_extract_from_workspace(
                workspace=workspaces[index],
                run_id=f"run-{index}",
                agent=agent,
                pending_credentials=pending[index] if pending else {},
            )
        except BaseException as exc:  # reported to the test thread below
            results[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(workspaces))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for outcome in results:
        if isinstance(outcome, BaseException):
            raise outcome
    return results  # type: ignore[return-value]


def test_two_runs_changing_one_skill_each_get_a_version(agent, tmp_path: Path):
    # given an installed skill
    base = skill_install_bundle(bundle=make_bundle("mailer"), actor=Actor.system("t"), agent=agent)
    for round_ in range(ROUNDS):
        current = Skill.objects.get(name="mailer").current_version
        # ... prepared into two workspaces that two runs change differently
        workspaces = []
        for side in ("a", "b"):
            workspace = tmp_path / f"{round_}-{side}"
            skill_prepare_workspace(version=current, workspace=workspace)
            (workspace / "SKILL.md").write_text(
                skill_md("mailer", body=f"# {round_} from {side}\n")
            )
            workspaces.append(workspace)

        # when both extract at once
        results = _extract_together(workspaces, agent)

        # then both were installed: two new versions, numbered consecutively, chained
        assert [r["updated"] for r in results] == [["mailer"], ["mailer"]]
        assert [r["failed"] for r in results] == [[], []]
        numbers = list(
            SkillVersion.objects.filter(skill__name="mailer")
            .order_by("number")
            .values_list("number", flat=True)
        )
        assert numbers == list(range(1, 2 * (round_ + 1) + 2))
        newest, second = SkillVersion.objects.filter(skill__name="mailer").order_by("-number")[:2]
        assert newest.parent_id == second.pk
        assert second.parent_id == current.pk
        assert Skill.objects.get(name="mailer").current_version_id == newest.pk
        assert {newest.extracted_from["run_id"], second.extracted_from["run_id"]} == {
            "run-0",
            "run-1",
        }
    assert Policy.objects.get(pk=base.policy.pk).status == PolicyStatus.PENDING_REVIEW


def test_two_runs_creating_the_same_new_skill(agent, tmp_path: Path):
    # given two fresh workspaces (no baseline) that both create "fresh", differently
    workspaces = []
    for side in ("a", "b"):
        workspace = tmp_path / side
        workspace.mkdir()
        (workspace / "SKILL.md").write_text(skill_md("fresh", body=f"# from {side}\n"))
        workspaces.append(workspace)

    # when
    results = _extract_together(workspaces, agent)

    # then one created it, the other added the second version; one skill, one policy
    assert sorted(len(r["created"]) for r in results) == [0, 1]
    assert sorted(len(r["updated"]) for r in results) == [0, 1]
    assert Skill.objects.filter(name="fresh").count() == 1
    assert SkillVersion.objects.filter(skill__name="fresh").count() == 2
    assert Policy.objects.filter(skill__name="fresh", agent=agent).count() == 1


def test_two_runs_saving_different_credentials_for_one_skill_keep_both(agent, tmp_path: Path):
    # given a skill whose policy needs two credentials, prepared into two workspaces
    base = skill_install_bundle(bundle=make_bundle("mailer"), actor=Actor.system("t"), agent=agent)
    policy_update(
        policy=base.policy, actor=Actor.system("t"), required_credentials=["KEY_A", "KEY_B"]
    )
    workspaces = []
    for side in ("a", "b"):
        workspace = tmp_path / side
        skill_prepare_workspace(version=base.version, workspace=workspace)
        (workspace / "SKILL.md").write_text(skill_md("mailer", body=f"# from {side}\n"))
        workspaces.append(workspace)

    # when both extract at once, each with the credential its run saved
    _extract_together(workspaces, agent, pending=[{"KEY_A": "value-a"}, {"KEY_B": "value-b"}])

    # then both values are stored: neither transaction overwrote the other's
    policy = Policy.objects.get(pk=base.policy.pk)
    assert policy_credential_values(policy=policy) == {"KEY_A": "value-a", "KEY_B": "value-b"}
    assert SkillVersion.objects.filter(skill__name="mailer").count() == 3
