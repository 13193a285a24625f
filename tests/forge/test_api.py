"""/api/v1/mcp-servers/ and /api/v1/tools/ for deployed MCP skills: list, show, code, disable,
enable, remove; bad input answers with the error body and changes nothing."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from cognition.services import agent_issue_token
from forge.models import DeployedServer, ServerStatus
from forge.registry import registered
from forge.services import deploy_version

pytestmark = pytest.mark.django_db(transaction=True)


def client_for(agent) -> APIClient:
    client = APIClient()
    client.credentials(
        HTTP_AUTHORIZATION=f"Bearer {agent_issue_token(agent=agent, actor=agent.owner).raw}"
    )
    return client


def test_the_owner_lists_shows_reads_disables_enables_and_removes_a_deployed_skill(
    agent, approved_mcp_skill
):
    policy = approved_mcp_skill(agent)
    deploy_version(policy.skill.current_version, actor="owner")
    api = client_for(agent)
    # list
    listed = api.get("/api/v1/mcp-servers/")
    assert listed.status_code == 200
    [server] = listed.json()
    assert (server["skill"], server["status"], server["tool_count"], server["failure_rate"]) == (
        "echoer",
        "deployed",
        2,
        None,
    )
    assert [t["name"] for t in server["tools"]] == ["echoer__echo", "echoer__shout"]
    # the tools are offered to the agent's brain in /api/v1/tools/
    names = [t["function"]["name"] for t in api.get("/api/v1/tools/").json()]
    assert names[-2:] == ["echoer__echo", "echoer__shout"]
    # code, read-only
    code = api.get("/api/v1/mcp-servers/echoer/code/").json()
    assert sorted(code) == ["SKILL.md", "scripts/server.py", "scripts/test_server.py", "skill.toml"]
    assert code["scripts/server.py"].startswith("from mcp.server.fastmcp import FastMCP")
    # disable: the tools leave the registry
    assert api.post("/api/v1/mcp-servers/echoer/disable/").json()["status"] == "disabled"
    assert registered() == []
    # disabling again is a conflict that changes nothing
    again = api.post("/api/v1/mcp-servers/echoer/disable/")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "server_state"
    # enable: back
    assert api.post("/api/v1/mcp-servers/echoer/enable/").json()["status"] == "deployed"
    assert registered() == ["echoer__echo", "echoer__shout"]
    # remove
    assert api.delete("/api/v1/mcp-servers/echoer/").status_code == 204
    assert DeployedServer.objects.get().status == ServerStatus.REMOVED
    assert api.get("/api/v1/mcp-servers/").json() == []


def test_an_unknown_or_foreign_skill_is_not_found_and_nothing_changes(
    agent, make_agent, approved_mcp_skill
):
    policy = approved_mcp_skill(agent)
    deploy_version(policy.skill.current_version, actor="owner")
    stranger = client_for(make_agent())
    for response in (
        stranger.get("/api/v1/mcp-servers/echoer/"),
        stranger.post("/api/v1/mcp-servers/echoer/disable/"),
        stranger.delete("/api/v1/mcp-servers/echoer/"),
        client_for(agent).get("/api/v1/mcp-servers/nope/code/"),
    ):
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "server_not_found"
    assert DeployedServer.objects.get().status == ServerStatus.DEPLOYED
    assert stranger.get("/api/v1/mcp-servers/").json() == []
