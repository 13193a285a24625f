"""A run bound to no skill gets the agent's approved skills that fit its task in its system
prompt, one line each, and the skill_describe tool to read one's SKILL.md (seed 002 §9 stage 2).
Real loop and database; only the LLM is scripted."""
# ruff: noqa: F811 - pytest fixtures imported from core_support are parameters here

from __future__ import annotations

import pytest

from cognition.principals import Principal
from cognition.tools import core_dispatch
from runs.models import MotorRun, Step
from skills.models import PolicyStatus
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import drive
from tests.skills.admin_support import import_skill

from .core_support import _clean_mutex_keys, skill_in_status, workspaces  # noqa: F401

pytestmark = pytest.mark.django_db

CSV_SKILL = {
    "SKILL.md": "---\nname: csv-cleaner\ndescription: Clean and deduplicate CSV files.\n---\n"
    "# Clean a CSV\n\n1. Read the file.\n"
}


def _act(world, task: str, **extra):
    return core_dispatch(
        principal=Principal.for_agent(world.alpha),
        tool_name="core_act",
        arguments={"mode": "agentic", "task": task, "tools": ["read"], "domains": [], **extra},
        trigger="user_message",
    )


def test_an_unbound_run_lists_approved_candidates_and_may_describe_one(
    world, workspaces, tmp_path, scripted_llm
):
    # given an approved weather skill and a pending CSV skill of alpha
    skill_in_status(tmp_path / "src", agent=world.alpha, approver=world.olivia, status="approved")
    pending = import_skill(
        tmp_path / "src2", agent=world.alpha, files=CSV_SKILL, name="csv-cleaner"
    )
    assert pending.status == PolicyStatus.PENDING_REVIEW
    # when a run bound to no skill is started for a weather task
    started = _act(world, "Tell me the weather forecast for Berlin")
    run = MotorRun.objects.get(pk=started["result"]["run_id"])
    # then it lists the approved weather skill (not the pending one) and is granted skill_describe
    assert run.skill_id is None
    assert run.tools == ["read", "skill_describe"]
    assert run.skill_candidates.startswith('<skill name="weather-report" status="approved"')
    assert "csv-cleaner" not in run.skill_candidates
    # when the model reads the skill, then answers
    scripted_llm.add(
        reply_tools(tool_call("skill_describe", {"name": "weather-report"}, call_id="d1")),
        reply_tools(tool_call("skill_describe", {"name": "csv-cleaner"}, call_id="d2")),
        reply_text("Done."),
    )
    drive(run.pk, scripted_llm.client())
    # then the prompt showed the candidates and the tool, and the SKILL.md came back
    first = scripted_llm.requests[0]
    system = first["messages"][0]["content"]
    assert "<available_skills>\n" + run.skill_candidates + "\n</available_skills>" in system
    assert "skill_describe" in [t["function"]["name"] for t in first["tools"]]
    described = Step.objects.filter(attempt__run=run).order_by("id")
    assert [s.result["ok"] for s in described] == [True, False]
    assert (
        described[0].result["output"].startswith('<skill name="weather-report" version="1">\n---')
    )
    assert "# Weather report" in described[0].result["output"]
    # and an unapproved skill is not described to the motor
    assert described[1].result["error_code"] == "skill_not_approved"
    run.refresh_from_db()
    assert run.status == "completed"


def test_a_run_with_no_fitting_approved_skill_gets_no_candidates(world, workspaces):
    started = _act(world, "Tell me the weather forecast for Berlin")
    run = MotorRun.objects.get(pk=started["result"]["run_id"])
    assert (run.tools, run.skill_candidates) == (["read"], "")
