"""Installing bundles: new skills, new versions, identical content, imports of every kind."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from skills.imports import skill_import_archive, skill_import_directory, skill_import_pasted
from skills.install import skill_install_bundle
from skills.models import AuditAction, Policy, PolicyAuditEvent, PolicyStatus, Skill, SkillVersion
from tests.skills.conftest import make_bundle, skill_md, write_skill

pytestmark = pytest.mark.django_db


def test_install_creates_skill_version_files_and_pending_policy(agent, system_actor):
    # given a valid bundle with a script
    bundle = make_bundle("weather", {"scripts/get.py": "print('hi')\n"})

    # when it is installed for an agent
    result = skill_install_bundle(bundle=bundle, actor=system_actor, agent=agent)

    # then the skill, its first version, both files and a pending_review policy exist
    skill = Skill.objects.get(name="weather")
    assert result.skill_created is True
    assert result.version_created is True
    assert skill.current_version == result.version
    assert result.version.number == 1
    assert result.version.content_hash == bundle.content_hash
    assert result.version.parent is None
    assert result.version.created_by_label == "test"
    assert sorted(result.version.files.values_list("path", "size")) == [
        ("SKILL.md", len(skill_md("weather").encode())),
        ("scripts/get.py", 12),
    ]
    stored = result.version.files.get(path="scripts/get.py")
    assert bytes(stored.data) == b"print('hi')\n"
    policy = Policy.objects.get(skill=skill, agent=agent)
    assert policy.status == PolicyStatus.PENDING_REVIEW
    assert list(PolicyAuditEvent.objects.order_by("id").values_list("action", flat=True)) == [
        AuditAction.SKILL_INSTALLED,
        AuditAction.POLICY_CREATED,
    ]


def test_install_without_agent_creates_no_policy(system_actor):
    # given / when
    skill_install_bundle(bundle=make_bundle("weather"), actor=system_actor)

    # then
    assert Skill.objects.filter(name="weather").count() == 1
    assert Policy.objects.count() == 0


def test_identical_content_creates_no_version_and_keeps_status(agent, system_actor, approver_actor):
    # given an installed, reviewed and approved skill
    from skills.reviewing import policy_approve, policy_review

    first = skill_install_bundle(bundle=make_bundle("weather"), actor=system_actor, agent=agent)
    policy_review(policy=first.policy, actor=approver_actor)
    policy_approve(policy=first.policy, actor=approver_actor)
    events_before = PolicyAuditEvent.objects.count()

    # when the same content is installed again
    again = skill_install_bundle(bundle=make_bundle("weather"), actor=system_actor, agent=agent)

    # then no version, no status change, no audit row
    assert again.version_created is False
    assert again.version == first.version
    assert SkillVersion.objects.count() == 1
    assert Policy.objects.get(pk=first.policy.pk).status == PolicyStatus.APPROVED
    assert PolicyAuditEvent.objects.count() == events_before


def test_changed_content_creates_next_version_and_resets_approved_policy(
    agent, system_actor, approver_actor
):
    # given an approved skill
    from skills.reviewing import policy_approve, policy_review

    first = skill_install_bundle(bundle=make_bundle("weather"), actor=system_actor, agent=agent)
    policy_review(policy=first.policy, actor=approver_actor)
    policy_approve(policy=first.policy, actor=approver_actor)

    # when changed content is installed
    changed = make_bundle("weather", body="# Steps\nUse v2 of the API.\n")
    second = skill_install_bundle(bundle=changed, actor=system_actor, agent=agent)

    # then version 2 is current, its parent is version 1, and the policy is pending_review
    assert second.version.number == 2
    assert second.version.parent == first.version
    assert Skill.objects.get(name="weather").current_version == second.version
    policy = Policy.objects.get(pk=first.policy.pk)
    assert policy.status == PolicyStatus.PENDING_REVIEW
    assert policy.approved_content_hash == first.version.content_hash  # history kept
    last = PolicyAuditEvent.objects.order_by("-id").first()
    assert (last.action, last.from_status, last.to_status, last.content_hash) == (
        AuditAction.CONTENT_CHANGED,
        PolicyStatus.APPROVED,
        PolicyStatus.PENDING_REVIEW,
        changed.content_hash,
    )


def test_import_pasted_lands_pending_review_with_provenance(agent, system_actor):
    # when
    result = skill_import_pasted(text=skill_md("notes"), actor=system_actor, agent=agent)

    # then
    assert result.policy.status == PolicyStatus.PENDING_REVIEW
    assert result.version.provenance["source"] == "pasted"
    assert list(result.version.files.values_list("path", flat=True)) == ["SKILL.md"]


def test_import_directory_tree_installs_every_skill(tmp_path: Path, agent, system_actor):
    # given a tree with two skills
    write_skill(tmp_path, "alpha", {"references/a.md": "A"})
    write_skill(tmp_path, "beta")

    # when
    results = skill_import_directory(path=tmp_path, actor=system_actor, agent=agent).installed

    # then
    assert sorted(r.skill.name for r in results) == ["alpha", "beta"]
    assert sorted(Policy.objects.values_list("skill__name", "status")) == [
        ("alpha", PolicyStatus.PENDING_REVIEW),
        ("beta", PolicyStatus.PENDING_REVIEW),
    ]


def test_import_single_skill_directory(tmp_path: Path, system_actor):
    # given
    directory = write_skill(tmp_path, "alpha", {"scripts/run.sh": "echo hi\n"})

    # when
    results = skill_import_directory(path=directory, actor=system_actor).installed

    # then
    assert [r.skill.name for r in results] == ["alpha"]
    assert sorted(results[0].version.files.values_list("path", flat=True)) == [
        "SKILL.md",
        "scripts/run.sh",
    ]


def test_import_uses_policy_json_only_as_a_proposal(tmp_path: Path, agent, system_actor):
    # given a skill with a policy.json that claims to be approved
    policy_json = (
        '{"trust": "approved", "approvedBy": "user", "allowedDomains": ["api.example.org"],'
        ' "requiredCredentials": ["API_KEY"], "tools": ["bash"],'
        ' "credentialValues": {"API_KEY": "sk-smuggled"}}'
    )
    directory = write_skill(tmp_path, "alpha", {"policy.json": policy_json})

    # when
    [result] = skill_import_directory(path=directory, actor=system_actor, agent=agent).installed

    # then it is not content, not approved, and no credential value was taken from it
    policy = Policy.objects.get(pk=result.policy.pk)
    assert list(result.version.files.values_list("path", flat=True)) == ["SKILL.md"]
    assert result.version.content_hash == make_bundle("alpha").content_hash
    assert policy.status == PolicyStatus.PENDING_REVIEW
    assert policy.approved_content_hash == ""
    assert policy.allowed_domains == ["api.example.org"]
    assert policy.required_credentials == ["API_KEY"]
    assert policy.tools == ["bash"]
    assert policy.credential_values == ""


def _zip(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _tar_gz(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.mark.parametrize(("filename", "pack"), [("skills.zip", _zip), ("skills.tar.gz", _tar_gz)])
def test_import_archive_installs_its_skills(filename, pack, agent, system_actor):
    # given an archive with two skill directories
    data = pack(
        {
            "alpha/SKILL.md": skill_md("alpha").encode(),
            "alpha/scripts/x.py": b"print(1)\n",
            "beta/SKILL.md": skill_md("beta").encode(),
        }
    )

    # when
    results = skill_import_archive(
        data=data, filename=filename, actor=system_actor, agent=agent
    ).installed

    # then
    assert sorted((r.skill.name, r.version.number) for r in results) == [("alpha", 1), ("beta", 1)]
    assert results[0].version.provenance["source"] == filename
