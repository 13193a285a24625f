"""Builders for the cortex tests: an agent with an acquired skill, and runs of it that end the
way the runtime ends them (a scripted model's final answer, or the runtime's failure service)."""

from __future__ import annotations

from pathlib import Path

from django.db import transaction

from cognition.models import Agent
from runs.finishing import run_finish_failed
from runs.models import FailureCategory, MotorRun, RunStatus, Signal
from runs.mutex import redis_client
from runs.records import attempt_lock_current, run_lock
from runs.services import run_start
from skills.models import Policy
from skills.policy_edits import policy_update
from skills.reviewing import policy_approve, policy_review
from skills.services import Actor
from tests.fixtures.llm import ScriptedLLM, reply_text, reply_tools, tool_call
from tests.runs.helpers import drive, new_workspace
from tests.skills.admin_support import import_skill

REPORT_SKILL = {
    "SKILL.md": (
        "---\nname: sales-report\ndescription: Looks up sales figures and builds a sales "
        "report.\n---\n# Sales report\n\n1. Read the figures from the shared sheet.\n"
        "2. Sum them per region.\n3. Write the report as a table.\n"
    ),
}


def acquired_skill(
    root: Path,
    *,
    agent: Agent,
    approver,
    name: str = "sales-report",
    files: dict[str, str] | None = None,
    tools: list[str] | None = None,
) -> Policy:
    """A skill imported for `agent` and approved, as acquisition leaves it."""
    text = dict(files or REPORT_SKILL)
    text["SKILL.md"] = text["SKILL.md"].replace("name: sales-report", f"name: {name}")
    policy = import_skill(root, agent=agent, files=text, name=name)
    policy = policy_update(policy=policy, actor=Actor.system("test"), tools=tools or ["read"])
    actor = Actor(user=approver, label=f"admin:{approver.username}")
    policy = policy_review(policy=policy, actor=actor)
    policy = policy_approve(policy=policy, actor=actor)
    policy.refresh_from_db()
    return policy


def _free(agent: Agent) -> None:
    # The mutex is released on commit, which a test's transaction never reaches.
    redis_client().delete(f"motor:mutex:agent:{agent.pk}")


def _start(agent: Agent, policy: Policy, task: str, credentials: list[str] | None) -> str:
    _free(agent)
    return run_start(
        agent_id=agent.pk,
        task=task,
        actor="test",
        tools=["read"],
        workspace=new_workspace(),
        skill_id=policy.skill_id,
        skill_version_id=policy.skill.current_version_id,
        credential_names=credentials or [],
    )["run_id"]


def succeeded_run(
    agent: Agent, policy: Policy, *, task: str = "Look up the sales report", credentials=None
) -> tuple[MotorRun, Signal]:
    """A run of the policy's skill that completes; returns it and its motor_result signal."""
    run_id = _start(agent, policy, task, credentials)
    llm = ScriptedLLM()
    llm.add(reply_text("Here is the report."))
    drive(run_id, llm.client())
    run = MotorRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED
    _free(agent)
    return run, Signal.objects.filter(run_id=run_id).order_by("-seq").first()


def failed_run(
    agent: Agent,
    policy: Policy,
    *,
    message: str,
    category: FailureCategory = FailureCategory.TOOL_FAILURE,
    task: str = "Look up the sales report",
    credentials=None,
) -> tuple[MotorRun, Signal]:
    """A run of the policy's skill that fails with `message`: it asks a question (a real slice),
    then the runtime's failure service ends it as the loop does."""
    run_id = _start(agent, policy, task, credentials)
    llm = ScriptedLLM()
    llm.add(reply_tools(tool_call("ask_user", {"question": "Which quarter?"}), text="Ask."))
    drive(run_id, llm.client())
    with transaction.atomic():
        run = run_lock(run_id)
        attempt = attempt_lock_current(run)
        run_finish_failed(
            run, attempt, category=category, message=message, retryable=False, actor="test"
        )
    run = MotorRun.objects.get(pk=run_id)
    assert run.status == RunStatus.FAILED
    _free(agent)
    return run, Signal.objects.filter(run_id=run_id).order_by("-seq").first()
