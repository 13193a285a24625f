"""Look-alike skill names: a review finding that names the installed skill being imitated."""

from __future__ import annotations

import pytest

from skills.bundle import review_bundle
from skills.bundle.lookalike import edit_distance, imitated, skeleton
from skills.install import skill_install_bundle
from skills.reviewing import policy_review
from tests.skills.conftest import make_bundle


@pytest.mark.parametrize(
    ("name", "installed", "expected"),
    [
        ("c1awhub-tools", "clawhub-tools", "the same name once look-alike characters are folded"),
        ("clawhub-t00ls", "clawhub-tools", "the same name once look-alike characters are folded"),
        ("modern-docs", "modem-docs", "the same name once look-alike characters are folded"),
        ("clawhub_tools", "clawhub-tools", "the same name once look-alike characters are folded"),
        ("clawhub1", "clawhub", "one edit away"),
        ("cllawhub", "clawhub", "one edit away"),
        ("polymarket-traiding-bot", "polymarket-trading-bot", "one edit away"),
        ("solana-wallet-tarcker", "solana-wallet-tracker", "one edit away"),
    ],
)
def test_names_that_imitate_an_installed_skill(name, installed, expected):
    assert imitated(name, [installed, "weather", name]) == [(installed, expected)]


@pytest.mark.parametrize(
    ("name", "installed"),
    [
        ("git", "gif"),  # short names differ by one letter all the time
        ("google-calendar-v2", "google-calendar"),
        ("weather", "wetter-report"),
        ("clawhub-tools", "clawhub-tools"),  # the skill itself
    ],
)
def test_names_that_do_not_imitate(name, installed):
    assert imitated(name, [installed]) == []


def test_skeleton_and_distance():
    assert skeleton("C1awHub-T00ls") == skeleton("clawhub_tools")
    assert edit_distance("clawhub", "clawhbu", 1) == 1  # a swap is one edit
    assert edit_distance("abcdef", "uvwxyz", 1) == 2  # past the limit: limit + 1


def test_review_bundle_reports_the_imitated_skill():
    files = {"SKILL.md": b"---\nname: c1awhub-tools\ndescription: Tools.\n---\nBody.\n"}
    facts = review_bundle(files, installed_names=["clawhub-tools", "weather"])
    assert [(f.rule, f.severity, f.path) for f in facts.suspicious] == [
        ("look-alike-name", "warning", "SKILL.md")
    ]
    assert "'clawhub-tools'" in facts.suspicious[0].message
    assert facts.to_dict()["suspicious"][0]["why"]
    assert review_bundle(files).suspicious == []  # nothing installed: nothing imitated


@pytest.mark.django_db
def test_policy_review_names_the_installed_skill_a_new_one_imitates(
    agent, system_actor, approver_actor
):
    # given an installed skill and a look-alike installed next to it
    skill_install_bundle(bundle=make_bundle("clawhub-tools", {}), actor=system_actor, agent=agent)
    impostor = skill_install_bundle(
        bundle=make_bundle("c1awhub-tools", {}), actor=system_actor, agent=agent
    )
    # when the impostor is reviewed
    policy = policy_review(policy=impostor.policy, actor=approver_actor)
    # then its stored facts carry a finding naming the imitated skill
    found = [f for f in policy.review_facts["suspicious"] if f["rule"] == "look-alike-name"]
    assert len(found) == 1
    assert "looks like the installed skill 'clawhub-tools'" in found[0]["message"]
