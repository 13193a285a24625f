"""bundle_from_files: path rules, size limits, policy.json handling and the content hash."""

from __future__ import annotations

import hashlib
import unicodedata

import pytest

from skills.bundle import (
    Bundle,
    BundleError,
    BundleLimits,
    Problem,
    bundle_from_files,
    content_hash,
)

SKILL = b"---\nname: demo\ndescription: A demo skill.\n---\n# Demo\n"


def problems(files, *, dir_name="demo", limits=BundleLimits()) -> list[tuple[str, str]]:
    with pytest.raises(BundleError) as info:
        bundle_from_files(files, dir_name=dir_name, limits=limits)
    return [(p.path, p.rule) for p in info.value.problems]


def test_content_files_are_sorted_and_other_files_skipped_with_findings():
    # given SKILL.md, content directories, a README, a denylisted tree and a log
    files = {
        "scripts/run.py": b"print('hi')\n",
        "SKILL.md": SKILL,
        "assets/logo.png": b"\x89PNG\0\0",
        "references/api.md": b"# API\n",
        "README.md": b"readme",
        "node_modules/left-pad/index.js": b"x",
        ".git/HEAD": b"ref",
        "scripts/debug.log": b"noise",
        "scripts/__pycache__/run.cpython-311.pyc": b"\0",
    }

    # when it is validated
    bundle = bundle_from_files(files, dir_name="demo")

    # then only skill content is kept, in path order, each with size and digest
    assert [f.path for f in bundle.files] == [
        "SKILL.md",
        "assets/logo.png",
        "references/api.md",
        "scripts/run.py",
    ]
    assert bundle.get("scripts/run.py").size == 12
    assert bundle.get("scripts/run.py").sha256 == hashlib.sha256(b"print('hi')\n").hexdigest()
    assert [(f.path, f.rule, f.severity) for f in bundle.findings] == [
        (".git/", "path-denylisted", "info"),
        ("README.md", "path-not-allowed", "info"),
        ("node_modules/", "path-denylisted", "info"),
        ("scripts/__pycache__/", "path-denylisted", "info"),
        ("scripts/debug.log", "path-denylisted", "info"),
    ]


@pytest.mark.parametrize(
    ("path", "shown", "rule"),
    [
        ("../evil.md", "../evil.md", "path-traversal"),
        ("scripts/../../evil", "scripts/../../evil", "path-traversal"),
        ("/etc/passwd", "/etc/passwd", "path-absolute"),
        ("C:/Windows/evil", "C:/Windows/evil", "path-absolute"),
        ("scripts\\evil.sh", "scripts\\evil.sh", "path-backslash"),
        ("scripts//run.sh", "scripts//run.sh", "path-empty-segment"),
        ("scripts/./run.sh", "scripts/./run.sh", "path-dot-segment"),
        ("scripts/run\n.sh", "scripts/run\\u000a.sh", "path-control-char"),
        ("", "", "path-empty"),
    ],
)
def test_unsafe_paths_are_refused(path, shown, rule):
    assert problems({"SKILL.md": SKILL, path: b"x"}) == [(shown, rule)]


def test_bidi_and_zero_width_names_are_refused_and_shown_escaped():
    # given names that would display differently from what they are
    files = {"SKILL.md": SKILL, "scripts/a\u202egpj.sh": b"x", "scripts/ru\u200bn.sh": b"y"}

    # when / then both are refused and the message shows the hidden character escaped
    with pytest.raises(BundleError) as info:
        bundle_from_files(files, dir_name="demo")
    assert [(p.path, p.rule) for p in info.value.problems] == [
        ("scripts/a\\u202egpj.sh", "path-bidi"),
        ("scripts/ru\\u200bn.sh", "path-zero-width"),
    ]


def test_names_equal_after_nfc_are_duplicates():
    # given "é" once precomposed and once as e + combining accent
    composed = "references/caf\u00e9.md"
    decomposed = "references/cafe\u0301.md"
    assert unicodedata.normalize("NFC", decomposed) == composed

    # when / then
    assert problems({"SKILL.md": SKILL, composed: b"1", decomposed: b"2"}) == [
        (composed, "duplicate-path")
    ]


def test_decomposed_names_are_stored_nfc():
    bundle = bundle_from_files(
        {"SKILL.md": SKILL, "references/cafe\u0301.md": b"x"}, dir_name="demo"
    )
    assert [f.path for f in bundle.files] == ["SKILL.md", "references/caf\u00e9.md"]


def test_a_file_that_is_also_a_directory_is_refused():
    assert problems({"SKILL.md": SKILL, "scripts/x": b"1", "scripts/x/y": b"2"}) == [
        ("scripts/x", "path-conflict")
    ]


def test_skill_md_in_another_letter_case_is_stored_as_skill_md():
    # when
    bundle = bundle_from_files({"skill.md": SKILL}, dir_name="demo")

    # then it is the skill's SKILL.md, and the reviewer is told
    assert [f.path for f in bundle.files] == ["SKILL.md"]
    assert (
        bundle.content_hash == bundle_from_files({"SKILL.md": SKILL}, dir_name="demo").content_hash
    )
    assert ("skill.md", "skill-md-case") in [(f.path, f.rule) for f in bundle.findings]


def test_missing_skill_md_is_refused():
    with pytest.raises(BundleError) as info:
        bundle_from_files({"references/a.md": b"a"}, dir_name="demo")
    assert [(p.path, p.rule) for p in info.value.problems] == [("SKILL.md", "skill-md-missing")]


def test_file_of_1_1_mb_is_refused_naming_the_file():
    # given a 1.1 MB reference file (limit 1 MiB)
    big = b"x" * 1_100_000

    # when / then
    with pytest.raises(BundleError) as info:
        bundle_from_files({"SKILL.md": SKILL, "references/big.md": big}, dir_name="demo")
    assert [(p.path, p.rule) for p in info.value.problems] == [
        ("references/big.md", "file-too-large")
    ]
    assert str(info.value) == (
        "references/big.md: file is 1,100,000 bytes; the limit is 1,048,576 bytes per file "
        "[file-too-large]"
    )


def test_eleven_mb_in_total_is_refused():
    # given eleven files of 1,000,000 bytes (each under the per-file limit)
    files = {"SKILL.md": SKILL} | {f"assets/part{i:02}.bin": b"\0" * 1_000_000 for i in range(11)}

    # when / then
    assert problems(files) == [(".", "bundle-too-large")]


def test_every_problem_is_collected_in_one_error():
    # given a bundle that is wrong in three independent ways
    files = {
        "SKILL.md": b"---\nname: Wrong\ndescription: d\n---\n",
        "../x": b"",
        "assets/big": b"x" * 2000,
    }

    # when / then all three are reported together
    assert problems(files, limits=BundleLimits(max_file_bytes=1000)) == [
        ("../x", "path-traversal"),
        ("assets/big", "file-too-large"),
        ("SKILL.md", "name-format"),
        ("SKILL.md", "name-dir-mismatch"),
    ]


def test_policy_json_is_not_content_not_hashed_and_kept_only_as_information():
    # given a bundle shipping a policy.json that claims to be approved
    policy = b'{"trust": "approved", "allowedDomains": ["evil.example.net"]}'
    with_policy = bundle_from_files({"SKILL.md": SKILL, "policy.json": policy}, dir_name="demo")
    without = bundle_from_files({"SKILL.md": SKILL}, dir_name="demo")

    # then it is not a file of the skill, does not change the hash and is only "declared"
    assert [f.path for f in with_policy.files] == ["SKILL.md"]
    assert with_policy.content_hash == without.content_hash
    assert with_policy.declared_policy == {
        "trust": "approved",
        "allowedDomains": ["evil.example.net"],
    }
    assert [(f.path, f.rule) for f in with_policy.findings] == [
        ("policy.json", "policy-not-content")
    ]


def test_invalid_policy_json_is_only_a_warning():
    bundle = bundle_from_files({"SKILL.md": SKILL, "policy.json": b"{nope"}, dir_name="demo")
    assert bundle.declared_policy is None
    assert [(f.rule, f.severity) for f in bundle.findings] == [
        ("policy-not-content", "info"),
        ("policy-invalid", "warning"),
    ]


def test_nested_policy_json_is_ordinary_content():
    # only the top-level policy.json is the sidecar
    bundle = bundle_from_files(
        {"SKILL.md": SKILL, "references/policy.json": b"{}"}, dir_name="demo"
    )
    assert [f.path for f in bundle.files] == ["SKILL.md", "references/policy.json"]


# -- content hash ---------------------------------------------------------------------------


def expected_hash(files: dict[str, bytes]) -> str:
    """Re-derivation of the documented definition, independent of the implementation."""
    digest = hashlib.sha256()
    for path in sorted(p for p in files if p != "policy.json"):
        data = files[path]
        digest.update(path.encode() + b"\x00" + str(len(data)).encode() + b"\x00" + data)
    return "sha256:" + digest.hexdigest()


def test_content_hash_known_answer():
    # given two files whose hash input is written out by hand
    files = {"scripts/a.sh": b"echo a\n", "SKILL.md": b"---\nname: x\n---\n"}
    stream = b"SKILL.md\x0016\x00---\nname: x\n---\nscripts/a.sh\x007\x00echo a\n"

    # when hashed
    value = content_hash(files.items())

    # then it is sha256 over exactly that stream, and equals the re-derivation
    assert value == "sha256:" + hashlib.sha256(stream).hexdigest()
    assert value == expected_hash(files)
    assert value == "sha256:8ccbfd4c43ea4e507eb62a1a8036e9fd4ed3c9b74d415b99da635fa24287d0a6"


def test_content_hash_is_independent_of_order_and_ignores_policy_json():
    files = [("b.md", b"2"), ("SKILL.md", b"s"), ("a/b", b"1"), ("policy.json", b"{}")]
    assert content_hash(files) == content_hash(reversed(files))
    assert content_hash(files) == content_hash([f for f in files if f[0] != "policy.json"])
    assert content_hash(files) == expected_hash(dict(files))


def test_content_hash_changes_with_any_byte_or_name():
    base = {"SKILL.md": b"s", "scripts/x": b"1"}
    assert content_hash(base.items()) != content_hash({"SKILL.md": b"s", "scripts/x": b"2"}.items())
    assert content_hash(base.items()) != content_hash({"SKILL.md": b"s", "scripts/y": b"1"}.items())
    # moving bytes across the file boundary changes the hash (lengths are part of the input)
    assert content_hash({"a": b"xy", "b": b""}.items()) != content_hash(
        {"a": b"x", "b": b"y"}.items()
    )


def test_content_hash_normalises_unicode_and_refuses_duplicates():
    assert content_hash([("cafe\u0301", b"1")]) == content_hash([("caf\u00e9", b"1")])
    with pytest.raises(ValueError, match="duplicate path"):
        content_hash([("caf\u00e9", b"1"), ("cafe\u0301", b"2")])


def test_bundle_hash_matches_the_definition():
    files = {"SKILL.md": SKILL, "references/z.md": b"z", "assets/a.bin": b"\0\1"}
    bundle: Bundle = bundle_from_files(files, dir_name="demo")
    assert bundle.content_hash == expected_hash(files)


def test_bundle_error_survives_pickling_and_rebuilding_from_its_message():
    import pickle

    error = BundleError([Problem("SKILL.md", "name-format", "bad name")])
    assert pickle.loads(pickle.dumps(error)).problems == error.problems
    assert BundleError(str(error)).problems == [
        Problem(".", "bundle-error", "SKILL.md: bad name [name-format]")
    ]
