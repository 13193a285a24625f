"""Only tools that exist can be granted, and every one that can be granted works: each tool
checkbox the review console offers is granted through the console's own form, an approved run of
the skill calls that tool through a scripted model, and the runtime runs it (or, for a host-side
tool, pauses as that tool does) — none is refused as unknown or not granted."""
# ruff: noqa: F811 - pytest fixtures imported from core_support are parameters here

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from cognition.core_act import core_act
from cognition.models import Agent
from cognition.principals import Principal
from runs.audit_models import ToolCallAudit
from runs.models import MotorRun, RunStatus, Step
from runs.services import run_cancel
from skills.models import Policy, PolicyStatus
from skills.toolpolicy import manifests
from tests.cognition.core_support import _clean_mutex_keys  # noqa: F401 - autouse fixture
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import drive
from tests.skills.admin_support import (
    APPROVER_PERMS,
    fast_password_hashing,  # noqa: F401 - autouse fixture
    import_skill,
    make_agent,
    make_user,
)

pytestmark = pytest.mark.django_db

#: a valid call of each tool; an alias is called through its first tool
CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "code": ("code", {"code": "print(6 * 7)"}),
    "bash": ("bash", {"command": "echo hi"}),
    "shell": ("bash", {"command": "echo hi"}),
    "read": ("read", {"path": "SKILL.md"}),
    "filesystem": ("read", {"path": "SKILL.md"}),
    "write": ("write", {"path": "notes.txt", "content": "x"}),
    "edit": ("edit", {"path": "SKILL.md", "old_string": "Weather", "new_string": "The weather"}),
    "list": ("list", {}),
    "glob": ("glob", {"pattern": "*.md"}),
    "grep": ("grep", {"pattern": "weather"}),
    "fetch": ("fetch", {"url": "https://api.open-meteo.com/v1/forecast"}),
    "browser": ("browser", {"action": "navigate", "url": "https://api.open-meteo.com/"}),
    "ask_user": ("ask_user", {"question": "Which city?"}),
    "request_approval": (
        "request_approval",
        {"tool": "list", "arguments": {}, "reason": "look around"},
    ),
    "save_credential": ("save_credential", {"name": "CITY_TOKEN", "value": "tok-98765432"}),
}

#: what a call of each tool leads to: the run's status after it, and the call's error code
#: ("" for a result that is ok; None while a host-side tool waits for the human)
OUTCOMES: dict[str, tuple[str, str | None]] = {
    "code": (RunStatus.COMPLETED, ""),
    "bash": (RunStatus.COMPLETED, ""),
    "shell": (RunStatus.COMPLETED, ""),
    "read": (RunStatus.COMPLETED, ""),
    "filesystem": (RunStatus.COMPLETED, ""),
    "write": (RunStatus.COMPLETED, ""),
    "edit": (RunStatus.COMPLETED, ""),
    "list": (RunStatus.COMPLETED, ""),
    "glob": (RunStatus.COMPLETED, ""),
    "grep": (RunStatus.COMPLETED, ""),
    # granted and taken up, then refused by the tool's own rule: the run has no domain to reach
    "fetch": (RunStatus.COMPLETED, "network_blocked"),
    # the same for the browser: the page it is sent to lies outside the run's domains
    "browser": (RunStatus.COMPLETED, "network_blocked"),
    "ask_user": (RunStatus.AWAITING_INPUT, None),
    # the tool whose approval it asks for (list) is not granted: nothing to approve
    "request_approval": (RunStatus.COMPLETED, "denied"),
    # the skill declares no credential, so there is none it may save
    "save_credential": (RunStatus.COMPLETED, "denied"),
}


def _review_url(policy: Policy) -> str:
    return reverse("admin:skills_policy_review", args=[policy.pk])


def _form(action: str, tool: str) -> dict[str, Any]:
    return {
        "action": action,
        "allowed_domains": "",
        "required_credentials": "",
        "tools": [tool],
        "dependencies": "",
        "shell_allowlist": "",
    }


def test_every_offered_tool_checkbox_is_granted_and_runs(tmp_path: Path, settings, scripted_llm):
    settings.MOTOR_WORKSPACES_DIR = tmp_path / "workspaces"
    settings.MOTOR_EXTRACT_SKILLS = False  # a run's writes must not become a new skill version
    agent = make_agent("scout")
    policy = import_skill(tmp_path / "src", agent=agent)
    client = Client()
    client.force_login(make_user("ann", perms=APPROVER_PERMS))

    # given the checkboxes the review console offers
    page = client.get(_review_url(policy)).content.decode()
    offered = re.findall(r'name="tools" value="([^"]+)"', page)
    assert offered == sorted(manifests.GRANTABLE)
    assert set(offered) == set(CALLS) == set(OUTCOMES)

    seen: dict[str, tuple[str, str | None]] = {}
    for position, checkbox in enumerate(offered):
        # when exactly that checkbox is granted through the console (approved the first time,
        # a policy-only edit after that, which keeps the approval)
        response = client.post(
            _review_url(policy), _form("approve" if position == 0 else "save", checkbox)
        )
        assert response.status_code == 302, checkbox
        policy.refresh_from_db()
        assert (policy.status, policy.tools) == (PolicyStatus.APPROVED, [checkbox])
        # and a run of the skill calls it
        Agent.objects.filter(pk=agent.pk).update(energy=1.0)
        run_id = core_act(
            principal=Principal.for_agent(agent),
            agent=agent,
            mode="agentic",
            task="Use your tool once",
            skill="weather-report",
            trigger="api",
        )["run_id"]
        name, arguments = CALLS[checkbox]
        scripted_llm.responses.clear()  # a paused run leaves its closing answer unread
        scripted_llm.add(
            reply_tools(tool_call(name, arguments, call_id=f"c-{checkbox}")), reply_text("done")
        )
        drive(run_id, scripted_llm.client())

        # then the runtime took the call for what it is
        run = MotorRun.objects.get(pk=run_id)
        assert Step.objects.filter(attempt__run_id=run_id).count() == 1, (checkbox, run.result)
        step = Step.objects.get(attempt__run_id=run_id)
        assert step.tool == name
        code = None if step.result is None else (step.result.get("error_code") or "")
        seen[checkbox] = (run.status, code)
        decisions = list(
            ToolCallAudit.objects.filter(run_ref=run_id).values_list("decision", flat=True)
        )
        assert not {"unknown_tool", "not_granted"} & set(decisions), (checkbox, decisions)
        if run.status in (RunStatus.AWAITING_INPUT, RunStatus.AWAITING_APPROVAL):
            run_cancel(run_id=run_id, actor="test")  # the agent's hands are free for the next

    assert seen == OUTCOMES
