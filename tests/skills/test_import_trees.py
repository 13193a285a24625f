"""Importing a tree or an archive of many skills: each valid skill is installed, each invalid one
is reported with its file and rule; all-or-nothing is an explicit option. Skills are found as
peers find them: in hidden directories, with SKILL.md in any letter case, at any depth."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from skills.bundle import BundleLimits, bundles_from_archive, bundles_from_tree
from skills.errors import SkillValidationError
from skills.imports import skill_import_archive, skill_import_directory
from skills.models import Policy, PolicyStatus, Skill, SkillFile
from tests.skills.conftest import skill_md, write_skill

pytestmark = pytest.mark.django_db


def _bad_tree(root: Path) -> Path:
    """alpha and beta are valid; gamma's name breaks the rule; delta proposes an unknown tool."""
    write_skill(root, "alpha")
    write_skill(root / "skills", "beta", {"scripts/run.sh": "echo hi\n"})
    gamma = root / "gamma"
    gamma.mkdir()
    (gamma / "SKILL.md").write_text(skill_md("Gamma"))
    write_skill(root, "delta", {"policy.json": '{"tools": ["sudo"]}'})
    return root


def _refusals(report) -> list[tuple[str, list[tuple[str, str]]]]:
    return [(r.where, [(p.path, p.rule) for p in r.problems]) for r in report.refused]


def _zip(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


# --- partial imports -------------------------------------------------------------------------


def test_a_tree_installs_each_valid_skill_and_reports_each_invalid_one(
    tmp_path: Path, agent, system_actor
):
    # given a registry checkout with two valid and two invalid skills
    _bad_tree(tmp_path)

    # when it is imported
    report = skill_import_directory(path=tmp_path, actor=system_actor, agent=agent)

    # then the valid ones are installed, pending review for the agent
    assert sorted(r.skill.name for r in report.installed) == ["alpha", "beta"]
    assert sorted(Policy.objects.values_list("skill__name", "status")) == [
        ("alpha", PolicyStatus.PENDING_REVIEW),
        ("beta", PolicyStatus.PENDING_REVIEW),
    ]
    # and each invalid one is reported with its file and rule, and left no row behind
    assert _refusals(report) == [
        ("delta", [("delta/policy.json", "known_tool")]),
        ("gamma", [("gamma/SKILL.md", "name-format"), ("gamma/SKILL.md", "name-dir-mismatch")]),
    ]
    assert sorted(Skill.objects.values_list("name", flat=True)) == ["alpha", "beta"]


def test_all_or_nothing_refuses_the_whole_tree(tmp_path: Path, agent, system_actor, snapshot):
    # given
    _bad_tree(tmp_path)
    before = snapshot()

    # when / then
    with pytest.raises(SkillValidationError) as caught:
        skill_import_directory(path=tmp_path, actor=system_actor, agent=agent, all_or_nothing=True)
    assert {(p["path"], p["rule"]) for p in caught.value.details["problems"]} == {
        ("gamma/SKILL.md", "name-format"),
        ("gamma/SKILL.md", "name-dir-mismatch"),
        ("delta/policy.json", "known_tool"),
    }
    assert "nothing was imported" in caught.value.message
    assert snapshot() == before


def test_a_tree_where_every_skill_is_invalid_is_refused(tmp_path: Path, system_actor, snapshot):
    # given
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "SKILL.md").write_text("no frontmatter\n")
    before = snapshot()

    # when / then
    with pytest.raises(SkillValidationError) as caught:
        skill_import_directory(path=tmp_path, actor=system_actor)
    assert [(p["path"], p["rule"]) for p in caught.value.details["problems"]] == [
        ("bad/SKILL.md", "frontmatter-missing")
    ]
    assert snapshot() == before


def test_a_skill_present_twice_is_refused_in_both_places_and_the_rest_installed(
    tmp_path: Path, system_actor
):
    # given
    write_skill(tmp_path / "team-a", "weather")
    write_skill(tmp_path / "team-b", "weather", body="# other\n")
    write_skill(tmp_path, "alpha")

    # when
    report = skill_import_directory(path=tmp_path, actor=system_actor)

    # then
    assert [r.skill.name for r in report.installed] == ["alpha"]
    assert _refusals(report) == [
        ("team-a/weather", [("team-a/weather/SKILL.md", "duplicate_skill")]),
        ("team-b/weather", [("team-b/weather/SKILL.md", "duplicate_skill")]),
    ]
    assert not Skill.objects.filter(name="weather").exists()


def test_an_archive_installs_each_valid_skill(agent, system_actor):
    # given
    data = _zip(
        {
            "alpha/SKILL.md": skill_md("alpha").encode(),
            "bad/SKILL.md": skill_md("not-bad").encode(),
        }
    )

    # when
    report = skill_import_archive(data=data, filename="s.zip", actor=system_actor, agent=agent)

    # then
    assert [r.skill.name for r in report.installed] == ["alpha"]
    assert _refusals(report) == [("bad", [("bad/SKILL.md", "name-dir-mismatch")])]


def test_an_archive_all_or_nothing(agent, system_actor, snapshot):
    data = _zip(
        {
            "alpha/SKILL.md": skill_md("alpha").encode(),
            "bad/SKILL.md": skill_md("not-bad").encode(),
        }
    )
    before = snapshot()
    with pytest.raises(SkillValidationError) as caught:
        skill_import_archive(
            data=data, filename="s.zip", actor=system_actor, agent=agent, all_or_nothing=True
        )
    assert [(p["path"], p["rule"]) for p in caught.value.details["problems"]] == [
        ("bad/SKILL.md", "name-dir-mismatch")
    ]
    assert snapshot() == before


# --- discovery -------------------------------------------------------------------------------


def test_skills_are_found_in_hidden_directories_any_case_and_any_depth(
    tmp_path: Path, system_actor
):
    # given skills under .curated/ and .system/, one with skill.md, one deep with Skill.MD,
    # and one inside .git (never searched)
    write_skill(tmp_path / "skills" / ".curated", "alpha")
    write_skill(tmp_path / "skills" / ".system", "beta")
    gamma = tmp_path / "gamma"
    gamma.mkdir()
    (gamma / "skill.md").write_text(skill_md("gamma"))
    delta = tmp_path / "a" / "b" / "c" / "d" / "e" / "delta"
    delta.mkdir(parents=True)
    (delta / "Skill.MD").write_text(skill_md("delta"))
    write_skill(tmp_path / ".git", "hidden-in-git")

    # when
    report = skill_import_directory(path=tmp_path, actor=system_actor)

    # then each is installed with its SKILL.md stored under that name
    assert report.refused == []
    assert sorted(r.skill.name for r in report.installed) == ["alpha", "beta", "delta", "gamma"]
    assert set(SkillFile.objects.values_list("path", flat=True)) == {"SKILL.md"}


def test_skill_md_in_two_letter_cases_is_ambiguous(tmp_path: Path):
    # given a skill directory holding SKILL.md and skill.md
    directory = write_skill(tmp_path, "alpha")
    (directory / "skill.md").write_text(skill_md("alpha", description="Another one."))

    # when
    bundles, errors = bundles_from_tree(tmp_path)

    # then
    assert bundles == []
    assert [(key, [(p.path, p.rule) for p in exc.problems]) for key, exc in errors] == [
        ("alpha", [("skill.md", "skill-md-ambiguous")])
    ]


def test_an_archive_finds_hidden_and_lower_case_skills():
    data = _zip(
        {
            ".curated/alpha/skill.md": skill_md("alpha").encode(),
            "x/y/z/.system/beta/SKILL.md": skill_md("beta").encode(),
        }
    )
    bundles, errors = bundles_from_archive(data, filename="s.zip")
    assert errors == []
    assert sorted((b.name, [f.path for f in b.files]) for b in bundles) == [
        ("alpha", ["SKILL.md"]),
        ("beta", ["SKILL.md"]),
    ]


def test_the_search_is_bounded_by_the_entry_limit(tmp_path: Path):
    # given a skill and many other directories (limit: 2 entries x 50 examined)
    write_skill(tmp_path, "alpha")
    for i in range(120):
        (tmp_path / "noise" / f"d{i:03}").mkdir(parents=True)

    # when
    bundles, errors = bundles_from_tree(tmp_path, limits=BundleLimits(max_archive_entries=2))

    # then the search stops and says why
    assert [(key, exc.rules) for key, exc in errors] == [(".", ["too-many-files"])]


# --- the command -----------------------------------------------------------------------------


def test_import_skills_installs_the_valid_skills_and_lists_the_refused(tmp_path: Path, agent):
    # given
    _bad_tree(tmp_path)
    out, err = io.StringIO(), io.StringIO()

    # when
    call_command("import_skills", str(tmp_path), "--agent", "main", stdout=out, stderr=err)

    # then
    assert "alpha: created (v1" in out.getvalue()
    assert "beta: created (v1" in out.getvalue()
    assert "refused delta: delta/policy.json:" in err.getvalue()
    assert "[known_tool]" in err.getvalue()
    assert "refused gamma: gamma/SKILL.md:" in err.getvalue()
    assert "[name-format]" in err.getvalue()
    assert sorted(Skill.objects.values_list("name", flat=True)) == ["alpha", "beta"]


def test_import_skills_all_or_nothing_flag(tmp_path: Path, agent, snapshot):
    _bad_tree(tmp_path)
    before = snapshot()
    with pytest.raises(CommandError) as caught:
        call_command("import_skills", str(tmp_path), "--all-or-nothing", stdout=io.StringIO())
    assert "gamma/SKILL.md" in str(caught.value)
    assert "[name-format]" in str(caught.value)
    assert snapshot() == before
