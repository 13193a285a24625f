"""Reads: skill list with per-agent status, redacted policy detail, history, files, audit trail."""

from __future__ import annotations

import pytest

from skills.errors import PolicyNotFound, SkillNotFound, SkillVersionNotFound
from skills.install import skill_install_bundle
from skills.models import PolicyStatus
from skills.policy_edits import policy_update
from skills.selectors import (
    policy_audit_trail,
    policy_detail,
    policy_get,
    skill_get,
    skill_list,
    skill_version_get,
    skill_version_history,
    version_files,
)
from skills.services import Actor
from tests.skills.conftest import make_bundle

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_skills(agent, other_agent):
    actor = Actor.system("t")
    alpha = skill_install_bundle(bundle=make_bundle("alpha"), actor=actor, agent=agent)
    skill_install_bundle(bundle=make_bundle("alpha", body="# v2\n"), actor=actor, agent=agent)
    skill_install_bundle(bundle=make_bundle("beta"), actor=actor, agent=other_agent)
    return alpha


def test_skill_list_shows_status_for_the_agent(two_skills, agent, other_agent):
    # when
    mine = {row.name: (row.version, row.status) for row in skill_list(agent=agent)}
    theirs = {row.name: row.status for row in skill_list(agent=other_agent)}
    anyone = {row.name: row.status for row in skill_list()}

    # then
    assert mine == {"alpha": (2, PolicyStatus.PENDING_REVIEW), "beta": (1, None)}
    assert theirs == {"alpha": None, "beta": PolicyStatus.PENDING_REVIEW}
    assert anyone == {"alpha": None, "beta": None}


def test_policy_detail_redacts_credential_values(two_skills, agent, approver_actor):
    # given
    policy_update(
        policy=two_skills.policy,
        actor=approver_actor,
        required_credentials=["TOKEN"],
        set_credentials={"TOKEN": "ghp_secretvalue"},
    )

    # when
    detail = policy_detail(policy=policy_get(skill_name="alpha", agent=agent))

    # then
    assert detail["credential_values"] == {"TOKEN": "[set]"}
    assert "ghp_secretvalue" not in repr(detail)
    assert (detail["skill"], detail["agent"], detail["version"], detail["status"]) == (
        "alpha",
        "main",
        2,
        PolicyStatus.PENDING_REVIEW,
    )


def test_history_files_and_trail(two_skills, agent):
    # given
    skill = skill_get(name="alpha")

    # when
    history = list(skill_version_history(skill=skill).values_list("number", "parent__number"))
    files = list(version_files(version=skill_version_get(skill=skill, number=1), with_data=False))
    trail = list(policy_audit_trail(policy=two_skills.policy).values_list("action", flat=True))

    # then
    assert history == [(2, 1), (1, None)]
    assert [f.path for f in files] == ["SKILL.md"]
    assert trail == ["content_changed", "skill_installed", "policy_created", "skill_installed"]


def test_not_found_errors(two_skills, agent, other_agent):
    with pytest.raises(SkillNotFound):
        skill_get(name="nope")
    with pytest.raises(PolicyNotFound):
        policy_get(skill_name="alpha", agent=other_agent)
    with pytest.raises(SkillVersionNotFound):
        skill_version_get(skill=skill_get(name="alpha"), number=3)
