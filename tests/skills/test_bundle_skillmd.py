"""SKILL.md parsing (lenient), the strict spec report and the installation refusals."""

from __future__ import annotations

import pytest

from skills.bundle import (
    BundleError,
    Problem,
    bundle_from_files,
    bundle_from_pasted,
    parse_skill_md,
    spec_findings,
)


def rules(findings) -> list[str]:
    return [f.rule for f in findings]


def refused(call) -> list[tuple[str, str]]:
    with pytest.raises(BundleError) as info:
        call()
    return [(p.path, p.rule) for p in info.value.problems]


def test_plain_frontmatter_and_body_are_split():
    # given a minimal SKILL.md
    text = "---\nname: pdf-tools\ndescription: Work with PDFs.\n---\n# PDF\n\nSteps.\n"

    # when it is parsed
    parsed = parse_skill_md(text)

    # then frontmatter and body are separated and nothing was tolerated
    assert parsed.frontmatter == {"name": "pdf-tools", "description": "Work with PDFs."}
    assert parsed.body == "# PDF\n\nSteps.\n"
    assert parsed.findings == []


def test_bom_is_tolerated_with_a_finding():
    # given SKILL.md bytes starting with a UTF-8 byte-order mark
    data = "\ufeff---\nname: bom-skill\ndescription: Has a BOM.\n---\nBody\n".encode()

    # when it is parsed and installed
    parsed = parse_skill_md(data)
    bundle = bundle_from_files({"SKILL.md": data}, dir_name="bom-skill")

    # then the BOM is ignored, reported, and the raw bytes stay exactly as given
    assert parsed.frontmatter["name"] == "bom-skill"
    assert rules(parsed.findings) == ["bom"]
    assert bundle.findings[0].rule == "bom"
    assert bundle.findings[0].path == "SKILL.md"
    assert bundle.files[0].data == data


def test_crlf_line_ends_are_tolerated_with_a_finding():
    # given a SKILL.md written with CRLF line ends
    data = b"---\r\nname: crlf-skill\r\ndescription: Windows.\r\n---\r\nLine 1\r\nLine 2\r\n"

    # when it is parsed
    parsed = parse_skill_md(data)

    # then it reads like LF text with one finding
    assert parsed.frontmatter == {"name": "crlf-skill", "description": "Windows."}
    assert parsed.body == "Line 1\nLine 2\n"
    assert rules(parsed.findings) == ["crlf"]


def test_nested_and_flow_style_metadata_and_unknown_fields_are_kept():
    # given frontmatter with flow-style and block metadata, a date and non-spec fields
    text = (
        "---\n"
        "name: meta-skill\n"
        "description: Has metadata.\n"
        "metadata: {author: ada, tags: [a, b], nested: {deep: 1}}\n"
        "version: 1.2\n"
        "released: 2026-01-02\n"
        "x-openclaw:\n"
        "  command-dispatch: true\n"
        "---\n"
    )

    # when it is parsed
    parsed = parse_skill_md(text)

    # then everything is kept in JSON-safe form and the spec report lists the deviations
    assert parsed.frontmatter["metadata"] == {
        "author": "ada",
        "tags": ["a", "b"],
        "nested": {"deep": 1},
    }
    assert parsed.frontmatter["released"] == "2026-01-02"
    assert parsed.frontmatter["x-openclaw"] == {"command-dispatch": True}
    assert rules(spec_findings(parsed.frontmatter, "meta-skill")) == [
        "spec-metadata-values",
        "spec-unknown-field",
        "spec-unknown-field",
        "spec-unknown-field",
    ]


def test_unquoted_colon_in_a_value_is_repaired_with_a_finding():
    # given a description containing ": " without quotes (invalid YAML as written)
    text = "---\nname: colon\ndescription: Use when: the user asks\n---\n"

    # when it is parsed
    parsed = parse_skill_md(text)

    # then the value is read as the author meant it
    assert parsed.frontmatter["description"] == "Use when: the user asks"
    assert rules(parsed.findings) == ["yaml-repaired"]


def test_malformed_yaml_is_refused_naming_the_rule():
    # given frontmatter that is not YAML even after repair
    text = "---\nname: broken\ndescription: [unclosed\n---\nBody\n"

    # when / then
    assert refused(lambda: bundle_from_pasted(text)) == [("SKILL.md", "yaml-invalid")]


def test_no_frontmatter_is_refused():
    # given markdown without frontmatter
    assert refused(lambda: bundle_from_pasted("# Just a heading\n")) == [
        ("SKILL.md", "frontmatter-missing")
    ]


def test_unterminated_frontmatter_is_refused():
    assert refused(lambda: parse_skill_md("---\nname: a\n")) == [
        ("SKILL.md", "frontmatter-unterminated")
    ]


def test_frontmatter_that_is_a_list_is_refused():
    assert refused(lambda: parse_skill_md("---\n- a\n- b\n---\n")) == [
        ("SKILL.md", "frontmatter-not-mapping")
    ]


def test_duplicate_keys_are_refused_because_readers_would_disagree():
    # given two name fields
    text = "---\nname: first\ndescription: d\nname: second\n---\n"

    # when / then
    with pytest.raises(BundleError) as info:
        parse_skill_md(text)
    assert info.value.problems == [
        Problem(
            "SKILL.md",
            "yaml-duplicate-key",
            "frontmatter key 'name' appears more than once (line 4)",
        )
    ]


def test_alias_bomb_is_refused():
    # given the classic "billion laughs" built from YAML aliases
    lines = ["---", "name: lol", "description: d", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        refs = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")
    lines.append("---")

    # when / then it is refused instead of expanding 10^9 values
    assert refused(lambda: parse_skill_md("\n".join(lines))) == [("SKILL.md", "yaml-too-complex")]


def test_non_utf8_skill_md_is_refused():
    assert refused(lambda: parse_skill_md(b"---\nname: \xff\n---\n")) == [
        ("SKILL.md", "skill-md-encoding")
    ]


def test_yaml_tags_that_construct_objects_are_not_executed():
    # given a python object tag (yaml.load would import and call it)
    text = "---\nname: x\ndescription: !!python/object/apply:os.system ['true']\n---\n"

    # when / then it is refused as invalid YAML by the safe loader
    assert refused(lambda: parse_skill_md(text)) == [("SKILL.md", "yaml-invalid")]


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("PdfTools", "name-format"),
        ("pdf_tools", "name-format"),
        ("-pdf", "name-format"),
        ("pdf-", "name-format"),
        ("1pdf", "name-format"),
        ("技能", "name-format"),
        ("café", "name-format"),
        ("a" * 65, "name-too-long"),
    ],
)
def test_installation_refuses_names_outside_the_strict_pattern(name, rule):
    # given a SKILL.md whose name breaks the installation rule
    text = f"---\nname: {name}\ndescription: Something.\n---\n"

    # when / then
    assert refused(lambda: bundle_from_pasted(text)) == [("SKILL.md", rule)]


def test_uppercase_name_error_message_is_clear():
    with pytest.raises(BundleError) as info:
        bundle_from_pasted("---\nname: PdfTools\ndescription: d\n---\n")
    assert str(info.value) == (
        "SKILL.md: 'name' 'PdfTools' must be lowercase ASCII letters, digits and '-', start "
        "with a letter and not end with '-' [name-format]"
    )


def test_name_must_equal_directory_name():
    # given a skill named differently from its directory
    files = {"SKILL.md": b"---\nname: alpha\ndescription: d\n---\n"}

    # when / then
    assert refused(lambda: bundle_from_files(files, dir_name="beta")) == [
        ("SKILL.md", "name-dir-mismatch")
    ]


def test_description_of_1100_characters_is_refused():
    text = f"---\nname: long\ndescription: {'x' * 1100}\n---\n"
    with pytest.raises(BundleError) as info:
        bundle_from_pasted(text)
    assert info.value.problems == [
        Problem(
            "SKILL.md",
            "description-too-long",
            "'description' is 1100 characters; the limit is 1024",
        )
    ]


def test_missing_name_and_description_are_both_reported():
    assert refused(lambda: bundle_from_pasted("---\nlicense: MIT\n---\n")) == [
        ("SKILL.md", "name-missing"),
        ("SKILL.md", "description-missing"),
    ]


def test_spec_report_lists_each_violation():
    # given frontmatter breaking several spec rules but still installable
    frontmatter = {
        "name": "double--hyphen",
        "description": "d",
        "compatibility": "c" * 501,
        "metadata": "not a map",
        "allowed-tools": ["Read"],
        "homepage": "https://x.dev",
    }

    # when the strict report is made against a different directory name
    findings = spec_findings(frontmatter, "other")

    # then every deviation is a warning on SKILL.md
    assert [(f.path, f.rule, f.severity) for f in findings] == [
        ("SKILL.md", "spec-name-double-hyphen", "warning"),
        ("SKILL.md", "spec-name-dir-mismatch", "warning"),
        ("SKILL.md", "spec-compatibility", "warning"),
        ("SKILL.md", "spec-metadata-type", "warning"),
        ("SKILL.md", "spec-allowed-tools-type", "warning"),
        ("SKILL.md", "spec-unknown-field", "warning"),
    ]


def test_spec_report_on_uppercase_and_long_names():
    assert rules(spec_findings({"name": "Bad-", "description": ""}, None)) == [
        "spec-name-chars",
        "spec-name-hyphen-edge",
        "spec-description-missing",
    ]
    assert rules(spec_findings({"name": "a" * 65, "description": "x" * 1025}, None)) == [
        "spec-name-length",
        "spec-description-length",
    ]


def test_a_valid_spec_skill_has_an_empty_report():
    frontmatter = {
        "name": "ok",
        "description": "Fine.",
        "license": "MIT",
        "compatibility": "Needs Python 3.11",
        "metadata": {"author": "ada"},
        "allowed-tools": "Bash(git:*) Read",
    }
    assert spec_findings(frontmatter, "ok") == []


def test_pasted_skill_has_no_directory_to_match_and_keeps_its_bytes():
    # given a pasted SKILL.md
    text = "---\nname: pasted\ndescription: From chat.\n---\nDo things.\n"

    # when it becomes a bundle
    bundle = bundle_from_pasted(text)

    # then it is a one-file skill whose bytes are the UTF-8 text
    assert bundle.name == "pasted"
    assert bundle.description == "From chat."
    assert bundle.body == "Do things.\n"
    assert [(f.path, f.data) for f in bundle.files] == [("SKILL.md", text.encode())]
    assert bundle.declared_policy is None


def test_pasted_text_with_lone_surrogates_is_refused_as_bad_encoding():
    assert refused(lambda: bundle_from_pasted("---\nname: x\ud800\n---\n")) == [
        ("SKILL.md", "skill-md-encoding")
    ]


def test_a_trailing_newline_in_the_name_is_refused_by_both_checks():
    # given a block scalar: YAML keeps its final newline in the value
    text = "---\nname: |\n  weather\ndescription: d\n---\n"

    # when / then the installation rule refuses it ("$" alone would match before the newline)
    assert refused(lambda: bundle_from_pasted(text)) == [("SKILL.md", "name-format")]
    # and the spec report flags it too
    assert rules(spec_findings({"name": "weather\n", "description": "d"}, None)) == [
        "spec-name-chars"
    ]


@pytest.mark.parametrize(
    ("frontmatter", "where"),
    [
        ('description: "a\\0b"', "field 'description'"),
        ('description: ok\nmetadata: {k: "x\\0y"}', "field 'metadata.k'"),
        ('description: ok\nmetadata: {list: [a, "\\ud800"]}', "field 'metadata.list[1]'"),
        ('description: ok\n"k\\0": v', "key 'k\\x00'"),
    ],
    ids=["nul-value", "nested-nul", "lone-surrogate", "nul-key"],
)
def test_nul_and_lone_surrogates_from_yaml_escapes_are_refused(frontmatter, where):
    # given frontmatter whose escapes produce characters no text column can hold
    text = f"---\nname: weather\n{frontmatter}\n---\n"

    # when / then
    with pytest.raises(BundleError) as info:
        bundle_from_pasted(text)
    [problem] = info.value.problems
    assert (problem.path, problem.rule) == ("SKILL.md", "frontmatter-invalid-char")
    assert problem.message.startswith(f"frontmatter {where} contains a NUL or an unpaired")


def test_policy_json_with_nul_escapes_is_left_out_with_a_warning():
    # given a policy.json whose JSON escapes produce a NUL
    files = {
        "SKILL.md": b"---\nname: weather\ndescription: d\n---\n",
        "policy.json": b'{"provenance": {"source": "x\\u0000y"}}',
    }

    # when
    bundle = bundle_from_files(files, dir_name="weather")

    # then it is not read as a proposal, and the reviewer is told why
    assert bundle.declared_policy is None
    assert [(f.rule, f.message) for f in bundle.findings if f.path == "policy.json"] == [
        (
            "policy-not-content",
            "policy.json came with the files: shown for information, not part of the content "
            "hash and never treated as an approval",
        ),
        (
            "policy-invalid",
            "policy.json field 'provenance.source' holds a NUL or an unpaired surrogate character",
        ),
    ]
