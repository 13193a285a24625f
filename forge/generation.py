"""Code generation: the one LLM call that writes a skill, and the parser of its answer.

The prompt carries the requirements, the sandbox constraints, a fixed FastMCP template and
few-shot examples shipped in `forge/prompt_assets/`. The model answers with one fenced block per
file, the fence's info string naming the file (```` ```scripts/server.py ````). `parse_answer`
turns that into files or raises `GenerationMalformed` with the reason, which becomes the next
attempt's feedback: a malformed answer is a failed attempt, never a crash.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ASSETS = Path(__file__).resolve().parent / "prompt_assets"

#: the files every generated skill consists of, in the order the prompt lists them
SKILL_FILES = ("SKILL.md", "scripts/server.py", "scripts/test_server.py", "skill.toml")
#: a bare file name the model may use instead of the path
_ALIASES = {"server.py": "scripts/server.py", "test_server.py": "scripts/test_server.py"}
#: most characters of test output fed back to the model
FEEDBACK_MAX_CHARS = 6000

_OPEN = re.compile(r"^(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*?)[ \t]*$")


class GenerationMalformed(ValueError):
    """The model's answer is not the files asked for; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """What the model is asked to write (or change)."""

    request: str
    requirements: Sequence[str]
    allowed_domains: Sequence[str]
    credentials: Sequence[str]
    skill_name: str = ""
    #: edit mode: the current files the change applies to
    current_files: Mapping[str, str] | None = None
    #: a retry: what went wrong with the previous attempt, and its files
    feedback: str = ""
    previous_files: Mapping[str, str] | None = None


@cache
def _asset(name: str) -> str:
    return (ASSETS / name).read_text()


def _examples() -> str:
    return "\n\n".join(
        f"EXAMPLE ({path.stem}):\n{path.read_text()}"
        for path in sorted((ASSETS / "examples").glob("*.txt"))
    )


def system_prompt() -> str:
    """The fixed part of the prompt: role, constraints, template, answer format, examples."""
    files = ", ".join(SKILL_FILES)
    return (
        "You write sandboxed tools as MCP servers (FastMCP, stdio) packaged as Agent Skills.\n\n"
        f"CONSTRAINTS:\n{_asset('constraints.txt')}\n"
        f"TEMPLATE of scripts/server.py:\n```python\n{_asset('template_server.txt')}```\n\n"
        f"ANSWER FORMAT: exactly four fenced blocks, one per file ({files}); the fence's info "
        "string is the file's path and nothing else. Use a fence of four backticks for SKILL.md "
        "when it contains fenced code itself. SKILL.md starts with YAML front matter holding "
        "name (lowercase letters, digits and hyphens) and description (what it does and when to "
        'use it). skill.toml holds name, description, version, created_by = "agent", label, '
        "allowed_domains (exactly the hosts the code reaches), [server] command and args, "
        '[auth] (ENV_NAME = "vault:<credential name>" per credential), [sandbox] and '
        "[search] keywords and example_queries, and one [tools.<name>] table per tool with "
        'semantics = "read" or "write". Nothing outside the blocks is read.\n\n'
        f"{_examples()}"
    )


def _files_text(files: Mapping[str, str]) -> str:
    return "\n\n".join(f"````{path}\n{text}\n````" for path, text in sorted(files.items()))


def user_prompt(req: GenerationRequest) -> str:
    """The request-specific part: requirements, permissions, current files, feedback."""
    lines = [f"REQUEST: {req.request}"]
    if req.requirements:
        lines.append("REQUIREMENTS:\n" + "\n".join(f"- {item}" for item in req.requirements))
    domains = ", ".join(req.allowed_domains) or "none (no network at all)"
    lines.append(f"ALLOWED DOMAINS: {domains}")
    if req.credentials:
        names = ", ".join(req.credentials)
        lines.append(
            f"CREDENTIALS (vault entry names; map each to an environment variable in [auth], "
            f"values are never shown to you): {names}"
        )
    else:
        lines.append("CREDENTIALS: none")
    if req.skill_name:
        lines.append(f"SKILL NAME: {req.skill_name} (keep it)")
    if req.current_files is not None:
        lines.append(
            "CURRENT FILES (change them as the request says; answer with all four files):\n"
            + _files_text(req.current_files)
        )
    if req.feedback:
        if req.previous_files:
            lines.append("YOUR PREVIOUS ANSWER:\n" + _files_text(req.previous_files))
        lines.append(
            "THE PREVIOUS ATTEMPT FAILED:\n"
            + req.feedback[-FEEDBACK_MAX_CHARS:]
            + "\nFix the problem and answer with all four files again."
        )
    return "\n\n".join(lines)


def messages(req: GenerationRequest) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": system_prompt()},
        {"role": "user", "content": user_prompt(req)},
    ]


def _target(info: str) -> str | None:
    """The file a fence's info string names, or None for any other block."""
    word = info.strip().split()[-1] if info.strip() else ""
    word = word.removeprefix("./")
    if word in SKILL_FILES:
        return word
    return _ALIASES.get(word)


def parse_answer(text: str) -> dict[str, str]:
    """The four files of a generation answer, keyed by path.

    Raises GenerationMalformed naming what is wrong: a file without its block, a file given
    twice, an empty block, a block left open. Blocks naming other files are ignored.
    """
    found: dict[str, str] = {}
    lines = (text or "").splitlines()
    index = 0
    while index < len(lines):
        opened = _OPEN.match(lines[index])
        index += 1
        if opened is None:
            continue
        fence = opened["fence"]
        body: list[str] = []
        while index < len(lines):
            line = lines[index]
            index += 1
            stripped = line.strip()
            if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                break
            body.append(line)
        else:
            target = _target(opened["info"])
            if target is not None:
                raise GenerationMalformed(f"the block of {target} is never closed")
            break
        target = _target(opened["info"])
        if target is None:
            continue
        if target in found:
            raise GenerationMalformed(f"{target} is given twice")
        content = "\n".join(body).strip("\n")
        if not content.strip():
            raise GenerationMalformed(f"the block of {target} is empty")
        found[target] = content + "\n"
    missing = [path for path in SKILL_FILES if path not in found]
    if missing:
        raise GenerationMalformed(
            "the answer has no fenced block for "
            + ", ".join(missing)
            + " (each file must be one block whose info string is its path, e.g. "
            "```scripts/server.py)"
        )
    return {path: found[path] for path in SKILL_FILES}
