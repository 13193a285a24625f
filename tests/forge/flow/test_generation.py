"""The generation prompt and the parser of the model's answer (pure)."""

from __future__ import annotations

import pytest

from forge.generation import (
    SKILL_FILES,
    GenerationMalformed,
    GenerationRequest,
    messages,
    parse_answer,
    system_prompt,
)
from tests.forge.flow.skillfiles import answer, skill_files


def test_an_answer_with_the_four_blocks_gives_the_four_files_exactly():
    # given an answer in which SKILL.md itself holds a fenced block (so it uses four backticks)
    files = skill_files()
    files["SKILL.md"] += "\n```bash\necho hi\n```\n"
    text = answer(files)
    # when it is parsed
    parsed = parse_answer(text)
    # then each file is its block's text, in the listed order
    assert list(parsed) == list(SKILL_FILES)
    assert parsed == {path: files[path].rstrip() + "\n" for path in SKILL_FILES}


def test_bare_file_names_are_read_as_the_scripts_and_other_blocks_are_ignored():
    files = skill_files()
    text = (
        "```python\nprint('an aside')\n```\n"
        f"```SKILL.md\n{files['SKILL.md']}```\n"
        f"```server.py\n{files['scripts/server.py']}```\n"
        f"```test_server.py\n{files['scripts/test_server.py']}```\n"
        f"```skill.toml\n{files['skill.toml']}```\n"
    )
    assert parse_answer(text)["scripts/server.py"] == files["scripts/server.py"]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("I cannot do that.", "no fenced block for SKILL.md, scripts/server.py"),
        ("```SKILL.md\n---\nname: x\n---\n```\n", "no fenced block for scripts/server.py"),
        ("```skill.toml\n\n```\n", "the block of skill.toml is empty"),
        (
            "```skill.toml\nname='a'\n```\n```skill.toml\nname='b'\n```\n",
            "skill.toml is given twice",
        ),
        ("```scripts/server.py\nprint(1)\n", "the block of scripts/server.py is never closed"),
    ],
)
def test_a_malformed_answer_is_refused_with_the_reason(text, reason):
    with pytest.raises(GenerationMalformed) as caught:
        parse_answer(text)
    assert reason in str(caught.value)


def test_the_prompt_carries_constraints_template_examples_and_the_feedback():
    # given a retry of an edit
    request = GenerationRequest(
        request="check uptime",
        requirements=["report the response time"],
        allowed_domains=["status.myapp.io"],
        credentials=["MYAPP_TOKEN"],
        skill_name="uptime-checker",
        current_files={"scripts/server.py": "OLD CODE"},
        feedback="pytest failed:\nAssertionError: 1 != 2",
        previous_files={"scripts/server.py": "ATTEMPT ONE"},
    )
    system, user = messages(request)
    # then the fixed part names the sandbox rules, the template and the shipped examples
    assert system["content"] == system_prompt()
    assert "only writable directory is /tmp" in system["content"]
    assert "from mcp.server.fastmcp import FastMCP" in system["content"]
    assert "EXAMPLE (unit-converter)" in system["content"]
    assert "EXAMPLE (uptime-checker)" in system["content"]
    # and the request part everything this attempt needs, never a credential value
    content = user["content"]
    assert "ALLOWED DOMAINS: status.myapp.io" in content
    assert "MYAPP_TOKEN" in content
    assert "OLD CODE" in content and "ATTEMPT ONE" in content
    assert "AssertionError: 1 != 2" in content
