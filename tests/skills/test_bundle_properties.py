"""Properties that must hold for any input: no crash but BundleError, stable hashes, safe names."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skills.bundle import (
    BundleError,
    check_path,
    content_hash,
    parse_skill_md,
    review_bundle,
)
from skills.bundle.paths import BIDI_CHARS, ZERO_WIDTH_CHARS

FAST = settings(max_examples=200, deadline=None)


@FAST
@given(st.text(max_size=400))
def test_parse_never_fails_with_anything_but_bundle_error(text):
    # given any text at all, with or without a frontmatter-looking start
    for candidate in (text, f"---\n{text}\n---\nbody", f"---\nname: {text}\n---\n"):
        # when parsed, then it either works and gives a JSON-safe mapping, or is refused cleanly
        try:
            parsed = parse_skill_md(candidate)
        except BundleError as exc:
            assert all(p.path == "SKILL.md" for p in exc.problems)
        else:
            assert isinstance(parsed.frontmatter, dict)
            assert all(isinstance(key, str) for key in parsed.frontmatter)


@FAST
@given(st.binary(max_size=400))
def test_parse_of_arbitrary_bytes_never_crashes(data):
    try:
        parse_skill_md(b"---\n" + data + b"\n---\n")
    except BundleError:
        pass


@FAST
@given(st.text(max_size=60))
def test_accepted_paths_are_relative_nfc_and_free_of_hidden_characters(raw):
    normalised, problems = check_path(raw)
    if problems:
        return
    assert normalised == unicodedata.normalize("NFC", normalised)
    assert not normalised.startswith("/")
    assert ".." not in normalised.split("/")
    assert "" not in normalised.split("/")
    assert "\\" not in normalised
    assert not any(ch in BIDI_CHARS or ch in ZERO_WIDTH_CHARS for ch in normalised)
    assert not any(unicodedata.category(ch) == "Cc" for ch in normalised)


@FAST
@given(
    st.dictionaries(
        st.text(alphabet="abcdefgh/._-", min_size=1, max_size=12),
        st.binary(max_size=40),
        max_size=8,
    ),
    st.randoms(use_true_random=False),
)
def test_content_hash_is_independent_of_order(files, rng):
    items = list(files.items())
    shuffled = items[:]
    rng.shuffle(shuffled)
    assert content_hash(items) == content_hash(shuffled)


@FAST
@given(
    st.dictionaries(
        st.sampled_from(["SKILL.md", "scripts/a.sh", "references/r.md"]), st.text(max_size=300)
    )
)
def test_review_never_crashes_and_is_json_safe(files):
    import json

    facts = review_bundle(
        {path: text.encode("utf-8", "surrogatepass") for path, text in files.items()}
    )
    json.dumps(facts.to_dict())
    assert facts.referenced_domains == sorted(set(facts.referenced_domains))


@pytest.mark.parametrize(
    "text",
    [
        "---\nx: " + "[" * 5000 + "]" * 5000 + "\n---\n",
        "---\nx: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n---\n",
    ],
)
def test_deeply_nested_frontmatter_is_refused_not_crashed(text):
    with pytest.raises(BundleError) as info:
        parse_skill_md(text)
    assert info.value.rules == ["yaml-too-complex"]


def test_deep_block_nesting_is_refused_not_crashed():
    text = "---\n" + "".join(" " * i + "a:\n" for i in range(1200)) + "---\n"
    with pytest.raises(BundleError) as info:
        parse_skill_md(text)
    assert info.value.rules == ["frontmatter-too-large"]


def test_block_nesting_past_the_recursion_limit_is_a_bundle_error():
    # 300 levels of block mappings fit in 64 KiB but exceed what the YAML composer can recurse
    text = "---\nname: x\n" + "".join(" " * i + "a:\n" for i in range(300)) + "---\n"
    with pytest.raises(BundleError) as info:
        parse_skill_md(text)
    assert info.value.rules == ["yaml-too-complex"]


def test_reasonable_nesting_parses():
    text = "---\nname: x\nmeta:\n" + "".join(" " * (i + 1) + f"l{i}:\n" for i in range(20))
    text += " " * 21 + "leaf: [1, [2, [3]]]\n---\n"
    parsed = parse_skill_md(text)
    node = parsed.frontmatter["meta"]
    for i in range(20):
        node = node[f"l{i}"]
    assert node == {"leaf": [1, [2, [3]]]}
