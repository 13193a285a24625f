"""How the console renders author-controlled text: markdown without raw HTML or unsafe links,
hidden characters made visible, audit changes as readable lines."""

from __future__ import annotations

import pytest

from skills.templatetags.skill_review import (
    diff_lines,
    format_changes,
    render_markdown,
    reveal_hidden,
    short_hash,
    status_badge,
)


def test_raw_html_in_markdown_is_escaped_not_rendered() -> None:
    html = render_markdown(
        '# Title\n\n<script>alert(1)</script>\n\nhi <img src=x onerror="alert(2)">\n'
    )

    assert "<h4>Title</h4>" in html  # demoted below the page's own headings
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script" not in html
    assert "<img" not in html


@pytest.mark.parametrize(
    "target",
    [
        "javascript:alert(1)",
        "JAVASCRIPT:alert(1)",
        "jav&#x61;script:alert(1)",
        "java&#09;script:alert(1)",
        "data:text/html,<b>x</b>",
        "vbscript:msgbox",
        "../../admin/auth/user/",
        "/admin/logout/",
    ],
)
def test_links_other_than_absolute_http_and_mailto_lose_their_target(target: str) -> None:
    html = render_markdown(f"[click]({target})")

    assert "href" not in html
    assert 'class="mc-inert-link"' in html


def test_http_links_stay_and_open_without_referrer() -> None:
    html = render_markdown("[docs](https://open-meteo.com/en/docs?a=1&b=2)")

    assert (
        '<a href="https://open-meteo.com/en/docs?a=1&amp;b=2" rel="noopener noreferrer nofollow"'
        ' target="_blank">docs</a>'
    ) in html


def test_images_become_text_so_the_reviewer_fetches_nothing() -> None:
    html = render_markdown("![tracker](https://collect.example.net/pixel.png)")

    assert "<img" not in html
    assert "[image: tracker — https://collect.example.net/pixel.png]" in html


def test_bidi_and_zero_width_characters_are_shown_as_code_points() -> None:
    text = "rm -rf /tmp/x\u202e# safe\u200b"

    assert reveal_hidden(text) == "rm -rf /tmp/x⟦U+202E⟧# safe⟦U+200B⟧"
    assert "⟦U+202E⟧" in render_markdown(text)
    assert diff_lines("+a\u2066b\n") == [("mc-diff-add", "+a⟦U+2066⟧b")]


def test_unified_diff_lines_are_classified() -> None:
    diff = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\n same\n"

    assert [css for css, _ in diff_lines(diff)] == [
        "mc-diff-file",
        "mc-diff-file",
        "mc-diff-hunk",
        "mc-diff-del",
        "mc-diff-add",
        "mc-diff-ctx",
    ]


def test_audit_changes_read_as_lines_with_credential_names_only() -> None:
    changes = {
        "allowed_domains": {"from": [], "to": ["api.open-meteo.com"]},
        "credential_values": {"set": {"WEATHER_TOKEN": "[set]"}, "cleared": ["OLD_KEY"]},
    }

    assert format_changes(changes) == [
        "allowed_domains: [] → [api.open-meteo.com]",
        "credential values: set WEATHER_TOKEN [set]; cleared OLD_KEY",
    ]


def test_badges_and_short_hashes() -> None:
    assert status_badge("needs_reapproval") == (
        '<span class="mc-badge mc-badge--needs_reapproval">Needs re-approval</span>'
    )
    assert status_badge("<b>") == '<span class="mc-badge mc-badge--&lt;b&gt;">&lt;b&gt;</span>'
    assert short_hash("sha256:" + "ab" * 32) == "sha256:abababababab"
    assert short_hash("cd" * 32) == "cdcdcdcdcdcd"


def test_nested_change_values_read_as_text_not_as_python_reprs() -> None:
    # given the changes an extraction records (a nested object, lists inside it)
    changes = {
        "files": ["SKILL.md"],
        "extracted_from": {
            "run_id": "run_3026d0928032",
            "changed_files": ["SKILL.md"],
            "deleted_files": [],
        },
    }

    # then each nested field reads as "name value", without quotes or braces
    assert format_changes(changes) == [
        "files: [SKILL.md]",
        "extracted_from: run_id run_3026d0928032, changed_files [SKILL.md], deleted_files []",
    ]
