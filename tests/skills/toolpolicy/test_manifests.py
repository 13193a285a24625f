"""Tool manifests: every tool has one with the seed-004 fields, and what the model is offered is
generated from them (equal to what the sandbox library validates against)."""

from __future__ import annotations

import jsonschema
import pytest

import sandbox.tools as sandbox_tools
from runs import tools as run_tools
from runs.errors import InvalidRunParams
from skills.toolpolicy import manifests
from skills.toolpolicy.manifests import MANIFESTS, UnknownTool, expand, function_schemas

FIELDS = {
    "id",
    "name",
    "description",
    "category",
    "inputs",
    "outputs",
    "risk",
    "cost",
    "min_trust_level",
    "requires_approval",
    "allowed_directories",
    "command_whitelist",
    "host_side",
    "action_risks",
    "submit_risk",
}


def test_every_tool_the_runtime_knows_has_a_manifest_and_nothing_else_does():
    assert manifests.TOOL_IDS == (
        "code",
        "bash",
        "read",
        "write",
        "edit",
        "list",
        "glob",
        "grep",
        "fetch",
        "browser",
        "ask_user",
        "request_approval",
        "save_credential",
    )
    assert manifests.SANDBOX_TOOL_IDS == sandbox_tools.TOOL_NAMES
    assert manifests.HOST_TOOL_IDS == run_tools.SYNTHETIC_TOOLS
    assert manifests.GRANTABLE == manifests.TOOL_IDS + ("filesystem", "shell")


@pytest.mark.parametrize("tool_id", list(MANIFESTS))
def test_each_manifest_has_the_seed_fields_and_valid_json_schemas(tool_id):
    data = MANIFESTS[tool_id].to_dict()

    assert set(data) == FIELDS
    assert data["id"] == tool_id
    assert data["name"] and data["description"]
    assert data["risk"] in {"low", "medium", "high"}
    assert data["cost"] in {"free", "cheap", "expensive"}
    assert data["min_trust_level"] in {"observe", "suggest", "supervised_auto", "bounded_auto"}
    jsonschema.Draft202012Validator.check_schema(data["inputs"])
    jsonschema.Draft202012Validator.check_schema(data["outputs"])
    assert data["inputs"]["type"] == "object"
    assert data["inputs"]["additionalProperties"] is False
    if data["category"] == "fs":
        assert data["allowed_directories"] == ["."]
    if tool_id == "bash":
        assert data["command_whitelist"] == list(sandbox_tools.DEFAULT_BASH_ALLOWLIST)
    else:
        assert data["command_whitelist"] == []


def test_the_models_function_schemas_are_generated_from_the_manifests():
    every = list(manifests.SANDBOX_TOOL_IDS)

    assert function_schemas(every) == sandbox_tools.tool_schemas(every)
    assert function_schemas(["bash"], bash_allowlist=["jq"]) == sandbox_tools.tool_schemas(
        ["bash"], bash_allowlist=["jq"]
    )
    assert run_tools.offered_schemas(["filesystem"], save_credential=True) == [
        MANIFESTS[t].function_schema()
        for t in ("read", "write", "edit", "list", "glob", "grep")
        + ("ask_user", "request_approval", "save_credential")
    ]
    assert run_tools.ASK_USER_SCHEMA == MANIFESTS["ask_user"].function_schema()


def test_a_generated_schema_is_a_copy_a_caller_cannot_change_the_manifest_through():
    schema = MANIFESTS["read"].function_schema()
    schema["function"]["parameters"]["properties"].clear()

    assert MANIFESTS["read"].function_schema()["function"]["parameters"]["properties"]


def test_aliases_expand_and_an_unknown_name_is_refused_naming_the_grantable_set():
    assert expand(["shell", "read", "filesystem"]) == (
        "bash",
        "read",
        "write",
        "edit",
        "list",
        "glob",
        "grep",
    )
    with pytest.raises(UnknownTool) as caught:
        expand(["telnet", "read", "nope"])
    assert str(caught.value) == (
        "unknown tool(s): 'telnet', 'nope'; grantable: code, bash, read, write, edit, list, "
        "glob, grep, fetch, browser, ask_user, request_approval, save_credential, filesystem, "
        "shell"
    )


def test_core_act_and_policy_validation_offer_exactly_the_grantable_set():
    from cognition.tools import GRANTABLE_TOOLS, core_tool_schemas
    from skills.admin_review_actions import PolicyEditForm
    from skills.policy_fields import KNOWN_TOOLS

    act = core_tool_schemas()[0]["function"]["parameters"]["properties"]["tools"]
    assert GRANTABLE_TOOLS == list(manifests.GRANTABLE)
    assert act["items"]["enum"] == list(manifests.GRANTABLE)
    assert KNOWN_TOOLS == frozenset(manifests.GRANTABLE)
    offered = [value for value, _label in PolicyEditForm.base_fields["tools"].choices]
    assert offered == sorted(manifests.GRANTABLE)
    assert "browser" in offered


def test_host_side_tools_may_be_named_in_a_grant_and_are_not_sandbox_grants():
    assert run_tools.expand_granted(["ask_user", "shell", "save_credential"]) == ["bash"]
    assert run_tools.expand_granted(["browser", "ask_user"]) == ["browser"]
    with pytest.raises(InvalidRunParams) as caught:
        run_tools.expand_granted(["telnet"])
    assert caught.value.details == {"field": "tools"}
