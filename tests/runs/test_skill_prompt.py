"""Runs that may write a skill are taught the Agent Skills layout in the motor prompt, and a skill
written exactly as the prompt's example shows is a valid bundle the store installs."""

from __future__ import annotations

import re

import pytest

from runs.prompts import SKILL_LAYOUT, build_system_prompt
from runs.services import run_start
from skills.bundle import bundle_from_directory, find_skill_dirs, spec_findings
from skills.extraction import skills_extract_from_workspace
from skills.models import Policy, PolicyStatus, Skill
from tests.fixtures.llm import reply_text

pytestmark = pytest.mark.django_db

_FILE = re.compile(r'<file path="([^"]+)">\n(.*?)\n</file>', re.S)


def _example_files() -> dict[str, str]:
    return {path: body + "\n" for path, body in _FILE.findall(SKILL_LAYOUT)}


def test_the_layout_section_states_the_agent_skills_rules():
    text = SKILL_LAYOUT
    for rule in (
        "skills/<name>/",
        "name and description are required",
        "only license, compatibility, metadata",
        "1-64 characters, lowercase letters a-z, digits and hyphens",
        "exactly the directory's name",
        "description: 1-1024 characters",
        "what the skill does and when to use it",
        "references/",
        "scripts/",
        "assets/",
        "Do not write policy.json",
        "Never write a secret into a file",
    ):
        assert rule in text, rule
    assert sorted(_example_files()) == [
        "skills/currency-rates/SKILL.md",
        "skills/currency-rates/references/api.md",
        "skills/currency-rates/scripts/rate.py",
    ]


def test_a_skill_written_as_the_example_shows_is_valid_and_is_installed(tmp_path, agent):
    # given a workspace with the example's files written as the prompt shows them
    workspace = tmp_path / "ws"
    for path, body in _example_files().items():
        (workspace / path).parent.mkdir(parents=True, exist_ok=True)
        (workspace / path).write_text(body)
    # then it is found where extraction looks, validates with its directory name, and follows
    # the specification without a single warning
    [directory] = find_skill_dirs(workspace)
    assert directory == workspace / "skills" / "currency-rates"
    bundle = bundle_from_directory(directory, check_dir_name=True)
    assert bundle.name == "currency-rates"
    assert spec_findings(bundle.frontmatter, "currency-rates") == []
    # and post-run extraction installs it for review
    result = skills_extract_from_workspace(workspace=workspace, run_id="run_t", agent=agent)
    assert result["created"] == ["currency-rates"] and result["failed"] == []
    skill = Skill.objects.get(name="currency-rates")
    assert Policy.objects.get(skill=skill, agent=agent).status == PolicyStatus.PENDING_REVIEW
    assert sorted(f.path for f in skill.current_version.files.all()) == [
        "SKILL.md",
        "references/api.md",
        "scripts/rate.py",
    ]


@pytest.mark.parametrize(
    ("params", "taught"),
    [
        ({"tools": ["filesystem"], "workspace": True}, True),
        ({"tools": ["bash"], "workspace": True}, True),
        ({"tools": ["read"], "workspace": True}, False),  # cannot write a file
        ({"tools": ["read"], "workspace": True, "review": True}, False),
    ],
)
def test_only_runs_that_can_write_a_skill_are_taught_the_layout(
    agent, scripted_llm, tmp_path, params, taught
):
    from tests.runs.helpers import drive

    workspace = tmp_path / "ws"
    workspace.mkdir()
    run_id = run_start(
        agent_id=agent.pk,
        task="Learn the rates API",
        tools=params["tools"],
        workspace=str(workspace) if params["workspace"] else "",
        review=params.get("review", False),
        actor="test",
    )["run_id"]
    scripted_llm.add(reply_text("Nothing to do."))
    drive(run_id, scripted_llm.client())
    system = scripted_llm.requests[0]["messages"][0]["content"]
    assert (SKILL_LAYOUT in system) is taught
    assert ("Writing a skill:" in system) is taught


def test_the_layout_follows_the_safety_rules_in_the_prompt():
    prompt = build_system_prompt(task="t", granted_tools=["write"], may_write_skill=True)
    assert prompt.index("Rules:") < prompt.index("Writing a skill:")
