"""GET /api/v1/tools: the core.* tools as OpenAI function schemas; core_dispatch runs them."""
# ruff: noqa: F811 - pytest fixtures imported from core_support are parameters here

from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from django.core.management import call_command
from rest_framework.test import APIClient

from cognition.models import Agent, Credential
from cognition.principals import Principal
from cognition.tools import TOOL_NAMES, core_dispatch
from runs.models import MotorRun, RunStatus
from tests.fixtures.llm import reply_tools, tool_call
from tests.runs.helpers import drive, snapshot

from .conftest import bearer
from .core_support import _clean_mutex_keys, workspaces  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db

OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def test_tools_are_openai_function_schemas_for_every_core_tool(world):
    response = bearer(world.alpha_token).get("/api/v1/tools/")
    assert response.status_code == 200
    tools = response.json()
    assert [t["function"]["name"] for t in tools] == [
        "core_act",
        "core_task",
        "core_skill",
        "core_credential",
    ]
    for tool in tools:
        assert set(tool) == {"type", "function"}
        assert tool["type"] == "function"
        function = tool["function"]
        assert set(function) == {"name", "description", "parameters"}
        assert OPENAI_NAME.fullmatch(function["name"])
        assert function["description"]
        parameters = function["parameters"]
        jsonschema.Draft202012Validator.check_schema(parameters)
        assert parameters["type"] == "object"
        assert parameters["additionalProperties"] is False
        assert set(parameters["required"]) <= set(parameters["properties"])
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    assert by_name["core_act"]["properties"]["mode"]["enum"] == ["oneshot", "agentic"]
    assert by_name["core_act"]["required"] == ["mode", "task"]
    assert by_name["core_task"]["properties"]["action"]["enum"] == [
        "list",
        "status",
        "cancel",
        "respond",
        "approve",
        "reject",
        "log",
        "retry",
    ]
    assert by_name["core_task"]["properties"]["status"]["enum"] == list(RunStatus.values)
    assert by_name["core_skill"]["properties"]["action"]["enum"] == [
        "list",
        "search",
        "describe",
        "review",
        "approve",
        "reject",
        "update",
        "delete",
        "import",
        "find",
        "acquire",
        "perceive",
        "plan",
        "take_up",
        "retain",
        "create",
        "edit",
        "improve",
        "flows",
        "flow",
        "answer",
        "deploy",
        "decline",
        "cancel",
    ]
    assert by_name["core_credential"]["properties"]["action"]["enum"] == ["set", "delete", "list"]
    assert TOOL_NAMES == {
        "core_act": "core.act",
        "core_task": "core.task",
        "core_skill": "core.skill",
        "core_credential": "core.credential",
    }


def test_tools_need_a_principal():
    response = APIClient().get("/api/v1/tools/")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"


def test_arguments_valid_against_the_schema_are_accepted_by_the_dispatcher(world, workspaces):
    schema = {
        t["function"]["name"]: t for t in bearer(world.alpha_token).get("/api/v1/tools/").json()
    }
    arguments = {"mode": "agentic", "task": "List files", "tools": ["read"], "domains": []}
    jsonschema.validate(arguments, schema["core_act"]["function"]["parameters"])
    result = core_dispatch(
        principal=Principal.for_agent(world.alpha),
        tool_name="core.act",
        arguments=arguments,
        trigger="user_message",
    )
    assert result["ok"] is True
    run = MotorRun.objects.get(pk=result["result"]["run_id"])
    assert (run.agent_id, run.trigger, run.tools) == (world.alpha.pk, "user_message", ["read"])


def test_refusals_come_back_as_data(world, workspaces):
    principal = Principal.for_agent(world.alpha)
    unknown = core_dispatch(principal=principal, tool_name="core_fly", arguments={}, trigger="api")
    assert unknown["ok"] is False
    assert unknown["error"]["code"] == "cognition_error"
    extra = core_dispatch(
        principal=principal,
        tool_name="core_act",
        arguments={"mode": "agentic", "task": "x", "sudo": True},
        trigger="api",
    )
    assert extra["error"]["details"] == {"unknown": ["sudo"]}
    missing = core_dispatch(
        principal=principal,
        tool_name="core_task",
        arguments={"action": "status", "run_id": "run_000000000000"},
        trigger="api",
    )
    assert missing["error"]["code"] == "not_found"
    assert MotorRun.objects.count() == 0


def test_respond_through_the_dispatcher_is_consent_gated(world, workspaces, scripted_llm):
    principal = Principal.for_agent(world.alpha)
    started = core_dispatch(
        principal=principal,
        tool_name="core_act",
        arguments={"mode": "agentic", "task": "Sort", "tools": ["read"], "domains": []},
        trigger="api",
    )
    run_id = started["result"]["run_id"]
    scripted_llm.add(reply_tools(tool_call("ask_user", {"question": "Ascending?"})))
    drive(run_id, scripted_llm.client())
    before = snapshot(run_id)
    refused = core_dispatch(
        principal=principal,
        tool_name="core_task",
        arguments={"action": "respond", "run_id": run_id, "answer": "yes"},
        trigger="motor_result",
    )
    assert refused["ok"] is False
    assert refused["error"]["code"] == "consent_required"
    assert snapshot(run_id) == before
    Agent.objects.filter(pk=world.alpha.pk).update(trusted_for_relayed_consent=True)
    principal = Principal.for_agent(Agent.objects.get(pk=world.alpha.pk))
    answered = core_dispatch(
        principal=principal,
        tool_name="core_task",
        arguments={"action": "respond", "run_id": run_id, "answer": "yes"},
        trigger="user_message",
    )
    assert answered == {
        "ok": True,
        "result": {"run_id": run_id, "previous_status": "awaiting_input", "new_status": "running"},
    }


def test_core_credential_never_returns_a_value(world):
    principal = Principal.for_agent(world.alpha)
    stored = core_dispatch(
        principal=principal,
        tool_name="core_credential",
        arguments={"action": "set", "name": "VAULT_API_KEY", "value": "very-secret-123"},
        trigger="user_message",
    )
    assert stored == {"ok": True, "result": {"name": "API_KEY", "value": "[set]"}}
    listed = core_dispatch(
        principal=principal,
        tool_name="core_credential",
        arguments={"action": "list"},
        trigger="user_message",
    )
    assert listed == {"ok": True, "result": {"names": ["API_KEY"]}}
    assert "very-secret-123" not in repr(Credential.objects.values_list("value", flat=True))


def test_the_openapi_schema_validates_with_the_runs_endpoints(tmp_path: Path):
    target = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(target))
    paths = yaml.safe_load(target.read_text())["paths"]
    for path in (
        "/api/v1/runs/",
        "/api/v1/runs/{run_id}/",
        "/api/v1/runs/{run_id}/respond/",
        "/api/v1/runs/{run_id}/cancel/",
        "/api/v1/runs/{run_id}/approve/",
        "/api/v1/runs/{run_id}/reject/",
        "/api/v1/runs/{run_id}/retry/",
        "/api/v1/runs/{run_id}/log/",
        "/api/v1/oneshot/",
        "/api/v1/tools/",
    ):
        assert path in paths
    create = paths["/api/v1/runs/"]["post"]
    assert "Idempotency-Key" in [p["name"] for p in create["parameters"]]
