"""Usage counts per tool and the failing-skill signal: more than 30 % failures of the latest
>= 10 calls tells the owner once per streak, offering an improvement (never deploying)."""

from __future__ import annotations

import pytest

from forge.models import DeployedServer, McpTool, ServerStatus
from forge.services import tool_record_call
from runs.models import Signal

pytestmark = pytest.mark.django_db


def deployed(agent, approved_mcp_skill) -> McpTool:
    policy = approved_mcp_skill(agent)
    version = policy.skill.current_version
    server = DeployedServer.objects.create(
        skill=policy.skill,
        version=version,
        agent=agent,
        status=ServerStatus.DEPLOYED,
        content_hash=version.content_hash,
    )
    return McpTool.objects.create(
        server=server,
        name="echo",
        qualified_name="echoer__echo",
        input_schema={"type": "object"},
        semantics="read",
    )


def test_the_owner_is_told_once_when_a_skill_fails_too_often(agent, approved_mcp_skill):
    tool = deployed(agent, approved_mcp_skill)
    # given 9 calls, 4 of them failed: too few calls to judge
    for ok in (True, False, True, False, True, False, True, False, True):
        tool_record_call(tool.pk, ok=ok, error="" if ok else "HTTP 500 from upstream")
    assert Signal.objects.filter(kind="skill_failing").count() == 0
    # when the 10th call succeeds (4 of 10 failed: 40 % > 30 %)
    tool_record_call(tool.pk, ok=True)
    # then the owner got one signal offering an improvement
    [signal] = Signal.objects.filter(kind="skill_failing")
    assert signal.agent_id == agent.pk
    assert signal.payload == {
        "skill": "echoer",
        "version": tool.server.version_id,
        "failure_rate": 0.4,
        "calls": 10,
        "last_error": "HTTP 500 from upstream",
        "offer": "improve",
    }
    # and more failing calls in the same streak do not repeat it
    tool_record_call(tool.pk, ok=False, error="again")
    assert Signal.objects.filter(kind="skill_failing").count() == 1
    tool.refresh_from_db()
    assert (tool.calls, tool.failures, tool.last_error) == (11, 5, "again")
    tool.server.refresh_from_db()
    assert tool.server.recent == "10101010110"


def test_a_healthy_skill_is_never_signalled(agent, approved_mcp_skill):
    tool = deployed(agent, approved_mcp_skill)
    for i in range(12):
        tool_record_call(tool.pk, ok=i % 5 != 0)  # 3 of 12 failed: 25 %
    assert Signal.objects.filter(kind="skill_failing").count() == 0
    tool.server.refresh_from_db()
    assert tool.server.recent == "011110111101"
    assert tool.server.failure_rate == 0.25
