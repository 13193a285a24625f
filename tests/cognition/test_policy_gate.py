# ruff: noqa: F811 - pytest fixtures imported from core_support are parameters here
"""The run's standing for the policy decision (runs.policy_gate): its trust level, the tools an
approved skill policy granted, its shell allowlist; and that allowlist enforced in a real sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from cognition.core_act import core_act
from cognition.models import Agent
from cognition.principals import Principal
from runs.models import MotorRun
from runs.policy_gate import decide_call, refusal, run_policy
from runs.tools import SandboxSlot
from skills.models import Policy
from skills.toolpolicy.trust import TrustLevel

from .core_support import _clean_mutex_keys, skill_in_status, workspaces  # noqa: F401

pytestmark = pytest.mark.django_db


def _start(world, **params) -> MotorRun:
    args = {"mode": "agentic", "task": "Report the weather", "trigger": "api", **params}
    result = core_act(principal=Principal.for_agent(world.alpha), agent=world.alpha, **args)
    return MotorRun.objects.get(pk=result["run_id"])


def test_an_approved_skill_run_carries_its_grants_version_and_the_agents_trust(
    world, workspaces, tmp_path
):
    policy = skill_in_status(
        tmp_path / "src", agent=world.alpha, approver=world.olivia, status="approved"
    )
    Policy.objects.filter(pk=policy.pk).update(shell_allowlist=["echo"])

    run = _start(world, skill="weather-report")
    standing = run_policy(run)

    assert standing.trust is TrustLevel.SUPERVISED_AUTO
    assert standing.context.skill_grants == frozenset({"code", "read"})
    assert standing.context.granted == frozenset(
        {"code", "read", "ask_user", "request_approval", "save_credential"}
    )
    assert standing.skill_name == "weather-report"
    assert standing.skill_version_hash == run.skill_version.content_hash
    assert standing.bash_allowlist == ("echo",)
    assert decide_call(standing, "code", {"code": "print(1)"}).rule == "approved_skill"


def test_explicit_grants_without_an_approved_skill_follow_the_trust_level(world, workspaces):
    Agent.objects.filter(pk=world.alpha.pk).update(trust_level="observe")
    run = _start(world, tools=["read", "write"], domains=[])

    standing = run_policy(run)
    read = decide_call(standing, "read", {"path": "a"})
    write = decide_call(standing, "write", {"path": "a", "content": "b"})
    unknown = decide_call(standing, "teleport", {})

    assert standing.context.skill_grants == frozenset()
    assert (read.verdict.value, read.rule) == ("runs", "trust_level")
    assert refusal(write) == {
        "ok": False,
        "output": "write needs trust level suggest or higher; this agent is at observe "
        "(it may only read)",
        "error_code": "denied",
        "retryable": False,
        "provenance": "internal",
        "duration_ms": 0,
        "cost": 0.0,
    }
    assert refusal(unknown)["output"] == "there is no tool 'teleport'"


def test_a_skills_shell_allowlist_is_enforced_by_the_sandbox(tmp_path: Path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    slot = SandboxSlot(
        run_id="allowlist-probe",
        workspace=str(workspace),
        allowed_domains=[],
        bash_allowlist=["echo"],
    )
    try:
        allowed = slot.execute(name="bash", arguments={"command": "echo hi"}, credentials={})
        refused = slot.execute(name="bash", arguments={"command": "date"}, credentials={})
    finally:
        from runs.sessions import run_session_close

        slot.close()
        run_session_close(run_id="allowlist-probe")

    assert (allowed["ok"], allowed["output"].strip()) == (True, "hi")
    assert refused["ok"] is False
    assert "not-allowlisted" in refused["output"]
