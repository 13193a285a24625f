"""Recognising an explicit request for a new tool (seed 002 §4), table-driven."""

from __future__ import annotations

import pytest

from forge.intent import parse_skill_request


@pytest.mark.parametrize(
    ("text", "explicit"),
    [
        ("Create a tool that checks uptime", True),
        ("build me a skill for parsing my bank CSV", True),
        ("make a script to resize photos", True),
        ("Can you make a tool for the weather?", True),
        ("I need a tool that posts to Telegram", True),
        ("write an MCP server for Hetzner", True),
        ("is my server up?", False),
        ("create a summary of this page", False),
        ("the build tool is broken", False),
        ("", False),
    ],
)
def test_an_explicit_request(text, explicit):
    assert (parse_skill_request(text) is not None) is explicit
