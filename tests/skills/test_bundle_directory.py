"""Skills read from directories: links, special files, denylist, limits, trees of many skills."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from skills.bundle import (
    BundleError,
    BundleLimits,
    bundle_from_directory,
    bundle_from_files,
    bundles_from_tree,
    scan_skill_dir,
)


def skill_md(name: str) -> str:
    return f"---\nname: {name}\ndescription: The {name} skill.\n---\n# {name}\n"


def make_skill(root: Path, name: str, files: dict[str, bytes] | None = None) -> Path:
    directory = root / name
    directory.mkdir(parents=True)
    (directory / "SKILL.md").write_text(skill_md(name))
    for rel, data in (files or {}).items():
        target = directory / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return directory


def refused(call) -> list[tuple[str, str]]:
    with pytest.raises(BundleError) as info:
        call()
    return [(p.path, p.rule) for p in info.value.problems]


def test_directory_reads_like_the_same_files_in_memory(tmp_path):
    # given a skill directory with content, a policy and files that are not content
    directory = make_skill(
        tmp_path,
        "demo",
        {
            "scripts/run.sh": b"echo hi\n",
            "references/deep/api.md": b"# API\n",
            "assets/data.bin": b"\0\1\2",
            "policy.json": b'{"trust": "approved"}',
            "notes.txt": b"scratch",
            "node_modules/x/index.js": b"x",
            "build.log": b"noise",
        },
    )

    # when it is read
    bundle = bundle_from_directory(directory)

    # then it equals the in-memory equivalent, hash included
    same = bundle_from_files(
        {
            "SKILL.md": skill_md("demo").encode(),
            "scripts/run.sh": b"echo hi\n",
            "references/deep/api.md": b"# API\n",
            "assets/data.bin": b"\0\1\2",
        },
        dir_name="demo",
    )
    assert bundle.files == same.files
    assert bundle.content_hash == same.content_hash
    assert bundle.declared_policy == {"trust": "approved"}
    assert [(f.path, f.rule) for f in bundle.findings] == [
        ("build.log", "path-denylisted"),
        ("node_modules/", "path-denylisted"),
        ("notes.txt", "path-not-allowed"),
        ("policy.json", "policy-not-content"),
    ]


def test_symlink_to_etc_passwd_is_refused(tmp_path):
    # given a skill whose reference is a real symlink to /etc/passwd
    directory = make_skill(tmp_path, "leaky")
    (directory / "references").mkdir()
    os.symlink("/etc/passwd", directory / "references" / "passwd.md")

    # when / then it is refused, naming the link, and nothing behind it is read
    with pytest.raises(BundleError) as info:
        bundle_from_directory(directory)
    assert [(p.path, p.rule) for p in info.value.problems] == [("references/passwd.md", "symlink")]
    assert "/etc/passwd" in info.value.problems[0].message
    assert "root:" not in str(info.value)


def test_symlink_outside_the_content_directories_is_refused_too(tmp_path):
    # "no symlinks anywhere": even in a directory that would be ignored
    directory = make_skill(tmp_path, "demo")
    (directory / "misc" / "deeper").mkdir(parents=True)
    os.symlink("/", directory / "misc" / "deeper" / "root")
    assert refused(lambda: scan_skill_dir(directory)) == [("misc/deeper/root", "symlink")]


def test_symlinked_directory_is_refused_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("secret")
    directory = make_skill(tmp_path, "demo")
    os.symlink(outside, directory / "references")
    assert refused(lambda: bundle_from_directory(directory)) == [("references", "symlink")]


def test_skill_directory_that_is_itself_a_link_is_refused(tmp_path):
    real = make_skill(tmp_path, "real")
    link = tmp_path / "demo"
    os.symlink(real, link)
    assert refused(lambda: bundle_from_directory(link)) == [(".", "symlink")]


def test_hardlink_is_refused(tmp_path):
    # given a reference hard-linked to a file outside the skill
    outside = tmp_path / "outside.txt"
    outside.write_text("shared inode")
    directory = make_skill(tmp_path, "demo")
    (directory / "references").mkdir()
    os.link(outside, directory / "references" / "inside.md")

    # when / then
    assert refused(lambda: bundle_from_directory(directory)) == [
        ("references/inside.md", "hardlink")
    ]


def test_fifo_and_socket_are_refused_without_blocking(tmp_path):
    # given a FIFO (opening it for reading would block) and a unix socket
    directory = make_skill(tmp_path, "demo")
    (directory / "scripts").mkdir()
    os.mkfifo(directory / "scripts" / "pipe")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(directory / "scripts" / "sock"))

        # when / then
        assert refused(lambda: bundle_from_directory(directory)) == [
            ("scripts/pipe", "special-file"),
            ("scripts/sock", "special-file"),
        ]
    finally:
        sock.close()


def test_links_inside_denylisted_directories_are_pruned_not_read(tmp_path):
    # given npm's usual node_modules/.bin symlink
    directory = make_skill(tmp_path, "demo", {"node_modules/pkg/cli.js": b"x"})
    (directory / "node_modules" / ".bin").mkdir()
    os.symlink("../pkg/cli.js", directory / "node_modules" / ".bin" / "cli")

    # when read, the denylisted tree is skipped as a whole
    bundle = bundle_from_directory(directory)
    assert [f.path for f in bundle.files] == ["SKILL.md"]


def test_oversized_file_is_refused_without_reading_it(tmp_path):
    # given a sparse 1.1 MB file (no real data written)
    directory = make_skill(tmp_path, "demo")
    (directory / "assets").mkdir()
    with open(directory / "assets" / "big.bin", "wb") as handle:
        handle.truncate(1_100_000)

    # when / then
    assert refused(lambda: bundle_from_directory(directory)) == [
        ("assets/big.bin", "file-too-large")
    ]


def test_eleven_mb_in_total_is_refused(tmp_path):
    directory = make_skill(tmp_path, "demo")
    (directory / "assets").mkdir()
    for i in range(11):
        with open(directory / "assets" / f"part{i:02}.bin", "wb") as handle:
            handle.truncate(1_000_000)
    assert refused(lambda: bundle_from_directory(directory)) == [(".", "bundle-too-large")]


def test_directory_problems_and_skill_md_problems_are_reported_together(tmp_path):
    directory = tmp_path / "demo"
    directory.mkdir()
    (directory / "SKILL.md").write_text("---\nname: Other\ndescription: d\n---\n")
    os.symlink("/etc/hosts", directory / "hosts")
    assert refused(lambda: bundle_from_directory(directory)) == [
        ("hosts", "symlink"),
        ("SKILL.md", "name-format"),
        ("SKILL.md", "name-dir-mismatch"),
    ]


def test_name_must_match_directory_unless_told_otherwise(tmp_path):
    # given a skill named "alpha" stored in directory "workspace-123"
    directory = tmp_path / "workspace-123"
    directory.mkdir()
    (directory / "SKILL.md").write_text(skill_md("alpha"))

    # when read with and without the directory-name check
    assert refused(lambda: bundle_from_directory(directory)) == [("SKILL.md", "name-dir-mismatch")]
    bundle = bundle_from_directory(directory, check_dir_name=False)

    # then without the check it installs, with the spec deviation still reported
    assert bundle.name == "alpha"
    assert [f.rule for f in bundle.findings] == ["spec-name-dir-mismatch"]


def test_too_many_files_is_refused(tmp_path):
    directory = make_skill(tmp_path, "demo", {f"references/{i}.md": b"" for i in range(12)})
    assert refused(
        lambda: bundle_from_directory(directory, limits=BundleLimits(max_archive_entries=10))
    ) == [(".", "too-many-files")]


def test_scan_skill_dir_returns_content_only(tmp_path):
    directory = make_skill(
        tmp_path, "demo", {"scripts/a.py": b"1", "policy.json": b"{}", ".git/HEAD": b"x"}
    )
    (directory / ".motor-baseline.json").write_text("{}")
    assert scan_skill_dir(directory) == {
        "SKILL.md": skill_md("demo").encode(),
        "scripts/a.py": b"1",
    }


def test_tree_of_many_skills_installs_valid_ones_and_reports_the_rest(tmp_path):
    # given a tree with two valid skills (one nested under skills/), one invalid, one link
    make_skill(tmp_path, "alpha")
    make_skill(tmp_path / "skills", "beta", {"references/r.md": b"r"})
    bad = tmp_path / "gamma"
    bad.mkdir()
    (bad / "SKILL.md").write_text(skill_md("not-gamma"))
    os.symlink(tmp_path / "alpha", tmp_path / "delta")
    (tmp_path / "README.md").write_text("not a skill")

    # when the tree is read
    bundles, errors = bundles_from_tree(tmp_path)

    # then
    assert sorted(b.name for b in bundles) == ["alpha", "beta"]
    assert [(key, [(p.path, p.rule) for p in exc.problems]) for key, exc in errors] == [
        ("delta", [("delta", "symlink")]),
        ("gamma", [("SKILL.md", "name-dir-mismatch")]),
    ]


def test_tree_that_is_one_skill(tmp_path):
    directory = make_skill(tmp_path, "solo", {"scripts/s.sh": b"echo\n"})
    bundles, errors = bundles_from_tree(directory)
    assert [b.name for b in bundles] == ["solo"]
    assert errors == []


def test_tree_without_skills_reports_it(tmp_path):
    (tmp_path / "empty").mkdir()
    bundles, errors = bundles_from_tree(tmp_path)
    assert bundles == []
    assert [(key, exc.rules) for key, exc in errors] == [(".", ["no-skills"])]


def test_many_non_skill_files_next_to_a_skill_are_only_checked(tmp_path):
    # given a skill (limit: 10 skill files) next to 40 output files of a run
    directory = make_skill(tmp_path, "demo", {f"output/{i}.csv": b"1" for i in range(40)})

    # when read, the output is looked at (for links) but does not count as skill files
    bundle = bundle_from_directory(directory, limits=BundleLimits(max_archive_entries=10))
    assert [f.path for f in bundle.files] == ["SKILL.md"]
    assert [(f.path, f.rule) for f in bundle.findings] == [("output/", "path-not-allowed")]
