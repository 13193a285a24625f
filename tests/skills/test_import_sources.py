"""A skill's identity is its name and its source: a same-named skill from another source is
refused (naming both) or installed under a new name the user gives, never a new version."""

from __future__ import annotations

import importlib
import io
from pathlib import Path

import pytest
from django.apps import apps as django_apps
from django.core.management import call_command

from skills.errors import SkillSourceConflict, SkillValidationError
from skills.imports import skill_import_archive, skill_import_directory, skill_import_pasted
from skills.install import skill_install_bundle
from skills.models import Policy, PolicyStatus, Skill, SkillVersion
from skills.reviewing import policy_approve, policy_review
from tests.skills.conftest import make_bundle, skill_md, write_skill

pytestmark = pytest.mark.django_db


@pytest.fixture
def first(tmp_path: Path, agent, system_actor, approver_actor):
    """google-calendar from publisher alice, approved for the agent."""
    root = tmp_path / "alice"
    write_skill(root, "google-calendar", body="# Alice's calendar\n")
    report = skill_import_directory(path=root, actor=system_actor, agent=agent)
    policy = report.installed[0].policy
    policy_review(policy=policy, actor=approver_actor)
    policy_approve(policy=policy, actor=approver_actor)
    return root


def _bob(tmp_path: Path) -> Path:
    root = tmp_path / "bob"
    write_skill(root, "google-calendar", body="# Bob's calendar: send events to bob.example\n")
    write_skill(root, "notes")
    return root


def test_the_source_is_recorded(first: Path):
    assert Skill.objects.get(name="google-calendar").source == str(first.resolve())


def test_a_same_named_skill_from_another_source_is_refused_naming_both(
    tmp_path: Path, first: Path, agent, system_actor, snapshot
):
    # given
    bob = _bob(tmp_path)
    (bob / "notes").rename(tmp_path / "elsewhere")  # bob's tree holds google-calendar only
    before = snapshot()

    # when / then: refused, the approved skill keeps its content and its policy
    with pytest.raises(SkillValidationError) as caught:
        skill_import_directory(path=bob, actor=system_actor, agent=agent)
    [problem] = caught.value.details["problems"]
    assert (problem["path"], problem["rule"]) == (
        "google-calendar/SKILL.md",
        "skill-source-conflict",
    )
    assert str(first.resolve()) in problem["message"]
    assert str(bob.resolve()) in problem["message"]
    assert snapshot() == before
    assert Policy.objects.get(skill__name="google-calendar").status == PolicyStatus.APPROVED


def test_a_tree_import_installs_the_rest_and_reports_the_conflict(
    tmp_path: Path, first: Path, agent, system_actor
):
    # when bob's tree (google-calendar and notes) is imported
    report = skill_import_directory(path=_bob(tmp_path), actor=system_actor, agent=agent)

    # then notes is installed, google-calendar refused, alice's version still current
    assert [r.skill.name for r in report.installed] == ["notes"]
    assert [(r.where, [p.rule for p in r.problems]) for r in report.refused] == [
        ("google-calendar", ["skill-source-conflict"])
    ]
    assert SkillVersion.objects.filter(skill__name="google-calendar").count() == 1


def test_the_user_may_install_it_under_a_new_name(tmp_path: Path, first: Path, agent, system_actor):
    # when bob's google-calendar is imported as google-calendar-bob
    report = skill_import_directory(
        path=_bob(tmp_path),
        actor=system_actor,
        agent=agent,
        renames={"google-calendar": "google-calendar-bob"},
    )

    # then it is a new skill whose SKILL.md carries the new name; alice's is untouched
    assert sorted(r.skill.name for r in report.installed) == ["google-calendar-bob", "notes"]
    renamed = Skill.objects.get(name="google-calendar-bob")
    text = bytes(renamed.current_version.files.get(path="SKILL.md").data).decode()
    assert text.startswith("---\nname: google-calendar-bob\ndescription: Does a useful thing.\n")
    assert "Bob's calendar" in text
    assert renamed.current_version.frontmatter["name"] == "google-calendar-bob"
    assert renamed.source == str((tmp_path / "bob").resolve())
    assert Policy.objects.get(skill__name="google-calendar").status == PolicyStatus.APPROVED
    assert SkillVersion.objects.filter(skill__name="google-calendar").count() == 1


def test_a_new_name_must_follow_the_naming_rules(tmp_path: Path, first: Path, system_actor):
    report = skill_import_directory(
        path=_bob(tmp_path), actor=system_actor, renames={"google-calendar": "google--cal"}
    )
    assert [r.skill.name for r in report.installed] == ["notes"]
    assert [(r.where, [(p.path, p.rule) for p in r.problems]) for r in report.refused] == [
        ("google-calendar", [("google-calendar/SKILL.md", "name-double-hyphen")])
    ]


def test_a_rename_of_a_skill_not_in_the_import_is_refused(tmp_path: Path, system_actor, snapshot):
    before = snapshot()
    with pytest.raises(SkillValidationError) as caught:
        skill_import_directory(
            path=_bob(tmp_path), actor=system_actor, renames={"calendar": "calendar-bob"}
        )
    assert caught.value.details["rule"] == "rename-unknown"
    assert snapshot() == before


def test_reimport_from_the_same_source_is_a_new_version(
    first: Path, agent, system_actor, approver_actor
):
    # given alice's skill changes in her tree
    (first / "google-calendar" / "SKILL.md").write_text(skill_md("google-calendar", body="# v2\n"))

    # when
    report = skill_import_directory(path=first, actor=system_actor, agent=agent)

    # then a new version, and the agent's policy goes back to review (as before)
    assert [(r.skill.name, r.version.number) for r in report.installed] == [("google-calendar", 2)]
    assert Policy.objects.get(skill__name="google-calendar").status == PolicyStatus.PENDING_REVIEW


def test_the_user_may_state_the_source(tmp_path: Path, first: Path, system_actor):
    # given alice's skill, now downloaded to another place
    moved = tmp_path / "download"
    write_skill(moved, "google-calendar", body="# v2 from alice\n")

    # when imported saying it comes from alice's source
    report = skill_import_directory(path=moved, actor=system_actor, source=str(first.resolve()))

    # then it is alice's skill's next version
    assert [(r.skill.name, r.version.number) for r in report.installed] == [("google-calendar", 2)]


def test_an_archive_is_its_own_source(first: Path, system_actor, snapshot):
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("google-calendar/SKILL.md", skill_md("google-calendar"))
    before = snapshot()
    with pytest.raises(SkillValidationError) as caught:
        skill_import_archive(data=buffer.getvalue(), filename="bob.zip", actor=system_actor)
    assert "bob.zip" in caught.value.message
    assert str(first.resolve()) in caught.value.message
    assert snapshot() == before


def test_pasting_over_an_imported_skill_is_a_conflict(first: Path, agent, system_actor, snapshot):
    # given
    before = snapshot()

    # when / then
    with pytest.raises(SkillSourceConflict) as caught:
        skill_import_pasted(text=skill_md("google-calendar"), actor=system_actor, agent=agent)
    assert caught.value.details["rule"] == "skill-source-conflict"
    assert caught.value.details["installed_source"] == str(first.resolve())
    assert caught.value.details["source"] == "local"
    assert snapshot() == before


def test_a_pasted_skill_may_be_installed_under_a_new_name(first: Path, agent, system_actor):
    result = skill_import_pasted(
        text=skill_md("google-calendar"),
        actor=system_actor,
        agent=agent,
        install_as="my-calendar",
    )
    assert result.skill.name == "my-calendar"
    assert result.skill.source == "local"


def test_pasting_again_is_a_new_version_of_ones_own_pasted_skill(agent, system_actor):
    skill_import_pasted(text=skill_md("notes"), actor=system_actor, agent=agent)
    again = skill_import_pasted(
        text=skill_md("notes", body="# v2\n"), actor=system_actor, agent=agent
    )
    assert again.version.number == 2


# --- the command -----------------------------------------------------------------------------


def test_import_skills_reports_the_conflict_and_renames_on_request(tmp_path: Path, first: Path):
    bob = _bob(tmp_path)
    out, err = io.StringIO(), io.StringIO()

    call_command("import_skills", str(bob), stdout=out, stderr=err)
    assert "refused google-calendar:" in err.getvalue()
    assert "[skill-source-conflict]" in err.getvalue()
    assert "notes: created" in out.getvalue()

    out = io.StringIO()
    call_command(
        "import_skills",
        str(bob),
        "--rename",
        "google-calendar=google-calendar-bob",
        stdout=out,
        stderr=io.StringIO(),
    )
    assert "google-calendar-bob: created (v1" in out.getvalue()
    assert sorted(Skill.objects.values_list("name", flat=True)) == [
        "google-calendar",
        "google-calendar-bob",
        "notes",
    ]


def test_import_skills_source_option(tmp_path: Path, first: Path):
    moved = tmp_path / "download"
    write_skill(moved, "google-calendar", body="# v2\n")
    out = io.StringIO()
    call_command("import_skills", str(moved), "--source", str(first.resolve()), stdout=out)
    assert "google-calendar: new version (v2" in out.getvalue()


# --- existing rows ---------------------------------------------------------------------------


def test_the_migration_backfills_the_source_from_the_first_version(system_actor):
    # given skills installed before sources were recorded
    backfill = importlib.import_module("skills.migrations.0003_skill_source").backfill_sources
    imported = skill_install_bundle(
        bundle=make_bundle("imported"),
        actor=system_actor,
        provenance={"source": "/srv/registry", "fetched_at": "2026-01-01T00:00:00+00:00"},
    )
    pasted = skill_install_bundle(
        bundle=make_bundle("pasted"), actor=system_actor, provenance={"source": "api"}
    )
    learned = skill_install_bundle(
        bundle=make_bundle("learned"), actor=system_actor, extracted_from={"run_id": "7"}
    )
    unknown = skill_install_bundle(bundle=make_bundle("unknown"), actor=system_actor)
    Skill.objects.update(source="")

    # when
    backfill(django_apps, None)

    # then
    assert dict(Skill.objects.values_list("name", "source")) == {
        "imported": "/srv/registry",
        "pasted": "local",
        "learned": "local",
        "unknown": "",
    }
    assert {imported.skill.pk, pasted.skill.pk, learned.skill.pk, unknown.skill.pk}


def test_identical_content_from_another_source_changes_nothing(
    tmp_path: Path, first: Path, other_agent, system_actor
):
    # given the same bytes published elsewhere
    copy = tmp_path / "mirror"
    write_skill(copy, "google-calendar", body="# Alice's calendar\n")

    # when imported for another agent
    [result] = skill_import_directory(path=copy, actor=system_actor, agent=other_agent).installed

    # then it is the installed skill (no new version, source kept); the agent gets its policy
    assert (result.version.number, result.version_created) == (1, False)
    assert Skill.objects.get(name="google-calendar").source == str(first.resolve())
    assert result.policy.status == PolicyStatus.PENDING_REVIEW


# --- renaming rewrites SKILL.md ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        ("name: old-name\r\ndescription: d\r\n", "name: new-name\r\ndescription: d\r\n"),
        ("name: >-\n  old-name\ndescription: d\n", "name: new-name\ndescription: d\n"),
        ('description: d\nname: "old-name"\n', "description: d\nname: new-name\n"),
    ],
    ids=["crlf", "folded-block", "quoted-last"],
)
def test_renaming_rewrites_only_the_name_line(head: str, expected: str):
    from skills.bundle import bundle_from_files, rename_bundle

    ending = "\r\n" if "\r\n" in head else "\n"
    original = f"---{ending}{head}---{ending}# Body{ending}".encode()
    bundle = bundle_from_files(
        {"SKILL.md": original, "scripts/a.sh": b"echo\n"}, dir_name="old-name"
    )

    renamed = rename_bundle(bundle, "new-name")

    assert (
        renamed.get("SKILL.md").data == f"---{ending}{expected}---{ending}# Body{ending}".encode()
    )
    assert renamed.frontmatter == {"name": "new-name", "description": "d"}
    assert renamed.get("scripts/a.sh") == bundle.get("scripts/a.sh")
    assert renamed.content_hash != bundle.content_hash
    assert ("SKILL.md", "renamed") in [(f.path, f.rule) for f in renamed.findings]


def test_a_name_that_cannot_be_rewritten_is_refused():
    from skills.bundle import BundleError, bundle_from_files, rename_bundle

    bundle = bundle_from_files(
        {"SKILL.md": b"---\n{name: old-name, description: d}\n---\n"}, dir_name=None
    )
    with pytest.raises(BundleError) as caught:
        rename_bundle(bundle, "new-name")
    assert caught.value.rules == ["rename-unsupported"]


def test_new_content_over_a_skill_of_unrecorded_source_is_refused(
    tmp_path: Path, system_actor, snapshot
):
    # given a skill whose source was never recorded (an old row the backfill could not place)
    skill_install_bundle(bundle=make_bundle("weather"), actor=system_actor)
    Skill.objects.filter(name="weather").update(source="")
    write_skill(tmp_path, "weather", body="# other\n")
    before = snapshot()

    # when / then
    with pytest.raises(SkillValidationError) as caught:
        skill_import_directory(path=tmp_path / "weather", actor=system_actor)
    assert "an unrecorded source" in caught.value.message
    assert "[skill-source-conflict]" in caught.value.message
    assert snapshot() == before
