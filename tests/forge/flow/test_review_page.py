"""The review page of an MCP skill shows what its test sandbox found: the tools from tools/list
with their input schemas and docstrings, each tool's declared semantics, and the test results."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from forge.bundles import bundle_import
from skills.models import Policy
from skills.probes import version_probe_record
from skills.services import Actor
from tests.forge.flow.skillfiles import ADD_TOOL, skill_files

pytestmark = pytest.mark.django_db

TWO_TOOLS = (
    ADD_TOOL
    + '''

@mcp.tool()
def reset(counter: str) -> dict:
    """Reset a named counter to zero."""
    return {"counter": counter, "value": 0}
'''
)


def _page(olivia, policy: Policy) -> str:
    client = Client()
    client.force_login(olivia)
    response = client.get(reverse("admin:skills_policy_review", args=[policy.pk]))
    assert response.status_code == 200
    return response.content.decode()


def test_the_review_shows_the_discovered_tools_their_semantics_and_the_tests(olivia, agent):
    # given an MCP skill whose manifest declares add as read and says nothing of reset
    files = skill_files("counter", body=TWO_TOOLS, semantics={"add": "read"})
    installed = bundle_import(files=files, agent=agent, actor=Actor.system("test"))
    version_probe_record(
        version=installed.version,
        tools=[
            {
                "name": "add",
                "description": "Add two integers.",
                "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}}},
                "semantics": "read",
            },
            {
                "name": "reset",
                "description": "Reset a named counter to zero.",
                "input_schema": {"type": "object", "properties": {"counter": {"type": "string"}}},
                "semantics": "write",
            },
        ],
        tests_passed=True,
        test_output="1 passed in 0.01s",
        checked_by="skillforge forge_x",
    )
    # when the approver opens its review
    page = _page(olivia, installed.policy)
    # then the MCP section lists both tools with schema, docstring and declared semantics
    section = page.split('id="mcp-server"', 1)[1].split('id="files"', 1)[0]
    assert "<code>add</code>" in section and "<code>reset</code>" in section
    assert "Reset a named counter to zero." in section
    assert "&quot;counter&quot;: {" in section
    assert section.count('mc-tag--warn">write</span>') == 1
    assert section.count('<span class="mc-tag">read</span>') == 1
    # and the tests: passed, who ran them, their output
    assert 'mc-tag--ok">passed</span>' in section
    assert "run by skillforge forge_x" in section
    assert "1 passed in 0.01s" in section


def test_an_mcp_skill_never_run_says_so(olivia, agent):
    installed = bundle_import(files=skill_files("adder"), agent=agent, actor=Actor.system("t"))
    page = _page(olivia, installed.policy)
    assert 'id="mcp-not-probed"' in page
    assert 'id="mcp-tools"' not in page


def test_a_manifest_that_disagrees_with_the_code_is_a_review_finding(olivia, agent):
    # given a generated skill whose code fetches a host its manifest does not allow
    files = skill_files("adder")
    files["scripts/server.py"] += '\nSTATUS_URL = "https://status.myapp.io/health"\n'
    installed = bundle_import(files=files, agent=agent, actor=Actor.system("t"))
    # when it is reviewed (opening the page reviews it)
    _page(olivia, installed.policy)
    policy = Policy.objects.get(pk=installed.policy.pk)
    # then the facts name the disagreement
    mismatches = policy.review_facts["mcp"]["mismatches"]
    assert {
        "kind": "domain_not_in_manifest",
        "category": "domain",
        "value": "status.myapp.io",
    } in (mismatches)
