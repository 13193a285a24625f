"""Recognising an explicit request for a new tool in a user's message (seed 002 §4, pure)."""

from __future__ import annotations

import re

# "create a tool that…", "build me a skill for…", "make a script to…", "I need a tool…",
# "write a tool…", "can you make…" — a verb of making, an article (after an optional "me"), then
# a word for a tool ("the build tool is broken" is not a request).
_REQUEST = re.compile(
    r"\b(?:create|build|make|write|generate)\s+(?:me\s+)?(?:a|an|one)\s+(?:new\s+|small\s+|"
    r"little\s+|custom\s+)?(?:tool|skill|script|integration|plugin|mcp server)s?\b"
    r"|\bi\s+need\s+(?:a|an)\s+(?:new\s+)?(?:tool|skill|script)\b"
    r"|\bcan\s+you\s+(?:make|build|create|write)\s+(?:me\s+)?(?:a|an)\s+(?:tool|skill|script)\b",
    re.IGNORECASE,
)


def parse_skill_request(text: str) -> str | None:
    """The message itself when it explicitly asks for a new tool, else None."""
    if not isinstance(text, str) or not text.strip():
        return None
    return text.strip() if _REQUEST.search(text) else None
