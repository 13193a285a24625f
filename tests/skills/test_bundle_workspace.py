"""Run workspaces: baseline written at preparation, skill discovery and the three-way diff."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from skills.bundle import (
    BASELINE_FILE,
    Baseline,
    BundleError,
    diff_against_baseline,
    find_skill_dirs,
    read_baseline,
    scan_skill_dir,
    sha256_hex,
    write_baseline,
)

SKILL = b"---\nname: mail\ndescription: Send mail.\n---\n# Mail\n"


def prepare(workspace: Path, files: dict[str, bytes]) -> None:
    """What preparing a workspace does: write the files at the root, then the baseline."""
    for rel, data in files.items():
        target = workspace / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    write_baseline(workspace, files.items(), skill_name="mail")


def test_baseline_round_trip_records_hashes_and_skips_policy(tmp_path):
    # given a workspace prepared with a skill and its policy
    prepare(tmp_path, {"SKILL.md": SKILL, "scripts/send.sh": b"echo\n"})
    write_baseline(
        tmp_path,
        [("SKILL.md", SKILL), ("scripts/send.sh", b"echo\n"), ("policy.json", b"{}")],
        skill_name="mail",
    )

    # when it is read back
    baseline = read_baseline(tmp_path)

    # then it maps each content path to its sha256, and is plain JSON on disk
    assert baseline == Baseline(
        skill_name="mail",
        files={"SKILL.md": sha256_hex(SKILL), "scripts/send.sh": sha256_hex(b"echo\n")},
    )
    on_disk = json.loads((tmp_path / BASELINE_FILE).read_text())
    assert on_disk == {"version": 1, "skill": "mail", "files": baseline.files}
    assert sorted(p.name for p in tmp_path.iterdir()) == [BASELINE_FILE, "SKILL.md", "scripts"]


def test_write_baseline_refuses_unsafe_paths(tmp_path):
    with pytest.raises(ValueError, match="path-traversal"):
        write_baseline(tmp_path, [("../x", b"")], skill_name=None)
    assert not (tmp_path / BASELINE_FILE).exists()


@pytest.mark.parametrize("content", [None, "not json", "[1, 2]", '{"files": {"a": 1}}'])
def test_missing_or_malformed_baseline_reads_as_none(tmp_path, content):
    if content is not None:
        (tmp_path / BASELINE_FILE).write_text(content)
    assert read_baseline(tmp_path) is None


def test_baseline_that_is_a_symlink_is_not_followed(tmp_path):
    real = tmp_path / "elsewhere.json"
    real.write_text(json.dumps({"files": {"SKILL.md": "0" * 64}}))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.symlink(real, workspace / BASELINE_FILE)
    assert read_baseline(workspace) is None


def test_unchanged_workspace_has_no_changes(tmp_path):
    prepare(tmp_path, {"SKILL.md": SKILL, "references/api.md": b"# API\n"})
    diff = diff_against_baseline(scan_skill_dir(tmp_path), read_baseline(tmp_path))
    assert diff.to_dict() == {"changed": [], "added": [], "deleted": []}
    assert diff.has_changes is False


def test_changed_added_and_deleted_files_are_told_apart(tmp_path):
    # given a prepared workspace the run then edits
    prepare(
        tmp_path,
        {"SKILL.md": SKILL, "references/old.md": b"old", "scripts/keep.sh": b"echo\n"},
    )
    (tmp_path / "SKILL.md").write_bytes(SKILL + b"\nFixed endpoint.\n")
    (tmp_path / "references" / "old.md").unlink()
    (tmp_path / "references" / "new.md").write_bytes(b"new")
    (tmp_path / "output.csv").write_bytes(b"not skill content")

    # when diffed
    diff = diff_against_baseline(scan_skill_dir(tmp_path), read_baseline(tmp_path))

    # then
    assert diff.changed == ["SKILL.md"]
    assert diff.added == ["references/new.md"]
    assert diff.deleted == ["references/old.md"]
    assert diff.has_changes is True


def test_without_baseline_every_file_is_added(tmp_path):
    (tmp_path / "SKILL.md").write_bytes(SKILL)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "a.py").write_bytes(b"1")
    diff = diff_against_baseline(scan_skill_dir(tmp_path), None)
    assert diff.to_dict() == {"changed": [], "added": ["SKILL.md", "scripts/a.py"], "deleted": []}


def test_nested_skill_is_compared_under_its_prefix(tmp_path):
    # given a root skill in the baseline and a new skill the run wrote under skills/
    prepare(tmp_path, {"SKILL.md": SKILL})
    nested = tmp_path / "skills" / "other"
    nested.mkdir(parents=True)
    (nested / "SKILL.md").write_bytes(b"---\nname: other\ndescription: d\n---\n")
    baseline = read_baseline(tmp_path)

    # when each is diffed with its prefix
    root_diff = diff_against_baseline(scan_skill_dir(tmp_path), baseline)
    nested_diff = diff_against_baseline(scan_skill_dir(nested), baseline, prefix="skills/other")

    # then the root is unchanged (skills/ is not root content) and the new one is all added
    assert root_diff.has_changes is False
    assert nested_diff.to_dict() == {"changed": [], "added": ["SKILL.md"], "deleted": []}


def test_find_skill_dirs_root_skills_and_immediate_subdirectories(tmp_path):
    # given a workspace with a root skill, skills/a, b/, a content dir with a SKILL.md,
    # a hidden dir and a deeper skill
    (tmp_path / "SKILL.md").write_bytes(SKILL)
    for rel in ["skills/a", "b", "references/not-a-skill", ".hidden", "c/d"]:
        (tmp_path / rel).mkdir(parents=True)
        (tmp_path / rel / "SKILL.md").write_bytes(b"x")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "SKILL.md").write_bytes(b"x")
    (tmp_path / "empty").mkdir()

    # when / then
    assert find_skill_dirs(tmp_path) == [tmp_path, tmp_path / "skills" / "a", tmp_path / "b"]


def test_find_skill_dirs_returns_links_so_the_scan_refuses_them(tmp_path):
    # given a workspace where the run symlinked a directory holding a SKILL.md
    target = tmp_path / "target"
    target.mkdir()
    (target / "SKILL.md").write_bytes(SKILL)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.symlink(target, workspace / "linked")

    # when / then it is found, and scanning it is refused rather than followed
    assert find_skill_dirs(workspace) == [workspace / "linked"]
    with pytest.raises(BundleError) as info:
        scan_skill_dir(workspace / "linked")
    assert info.value.rules == ["symlink"]


def test_scan_of_a_workspace_with_a_symlink_anywhere_is_refused(tmp_path):
    prepare(tmp_path, {"SKILL.md": SKILL})
    (tmp_path / "out").mkdir()
    os.symlink("/etc/passwd", tmp_path / "out" / "pw")
    with pytest.raises(BundleError) as info:
        scan_skill_dir(tmp_path)
    assert [(p.path, p.rule) for p in info.value.problems] == [("out/pw", "symlink")]


def test_empty_workspace_has_no_skills(tmp_path):
    assert find_skill_dirs(tmp_path) == []
