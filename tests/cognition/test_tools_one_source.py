"""One source of truth for the tools: what the model is offered in a real run, what
GET /api/v1/tools/ and GET /api/v1/tools/manifests/ answer and what the OpenAPI description
documents are all generated from skills.toolpolicy.manifests, and equal."""
# ruff: noqa: F811 - pytest fixtures imported from core_support are parameters here

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from runs.services import run_start
from skills.toolpolicy import manifests
from tests.fixtures.llm import reply_text
from tests.runs.helpers import drive, new_workspace
from tests.skills.admin_support import make_user

from .conftest import bearer
from .core_support import _clean_mutex_keys, workspaces  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db


def _openapi() -> dict:
    client = Client()
    client.force_login(make_user("root", superuser=True))
    return client.get(reverse("api-schema"), {"format": "json"}).json()


def test_the_model_the_api_and_the_openapi_description_see_the_same_tools(
    world, workspaces, scripted_llm
):
    # given a run granted every sandbox tool, whose model is asked once
    run_id = run_start(
        agent_id=world.alpha.pk,
        task="Look around",
        tools=list(manifests.SANDBOX_TOOL_IDS),
        workspace=new_workspace(),
        actor="test",
    )["run_id"]
    scripted_llm.add(reply_text("done"))
    drive(run_id, scripted_llm.client())
    offered = {t["function"]["name"]: t["function"] for t in scripted_llm.requests[0]["tools"]}

    # when the API and the OpenAPI description are read
    api = bearer(world.alpha_token)
    listed = {m["id"]: m for m in api.get("/api/v1/tools/manifests/").json()}
    core = {t["function"]["name"]: t["function"] for t in api.get("/api/v1/tools/").json()}
    schema = _openapi()

    # then the model was offered exactly the manifests' schemas (the granted tools and the
    # host-side ones), name, description and parameters
    assert set(manifests.SANDBOX_TOOL_IDS) | {"ask_user", "request_approval"} <= set(offered)
    assert set(offered) <= set(manifests.TOOL_IDS)
    for name, function in offered.items():
        assert function == manifests.MANIFESTS[name].function_schema()["function"]
        assert function["parameters"] == listed[name]["inputs"]
        if name != "bash":  # the run's allowlist is written into bash's description
            assert function["description"] == listed[name]["description"]
    assert list(listed) == list(manifests.TOOL_IDS)
    # and what core.act may grant, what POST /api/v1/runs/ documents and the grantable set of
    # the manifests are one list
    grantable = list(manifests.GRANTABLE)
    assert core["core_act"]["parameters"]["properties"]["tools"]["items"]["enum"] == grantable
    run_create = schema["components"]["schemas"]["RunCreate"]["properties"]["tools"]
    ref = run_create["items"]["$ref"].rsplit("/", 1)[1]
    assert schema["components"]["schemas"][ref]["enum"] == grantable
    assert ", ".join(manifests.TOOL_IDS) in run_create["description"]


def test_an_unknown_tool_in_a_run_request_is_refused_naming_the_grantable_set(world, workspaces):
    response = bearer(world.alpha_token).post(
        "/api/v1/runs/", {"task": "x", "tools": ["read", "teleport"]}, format="json"
    )

    assert response.status_code == 400
    assert "'teleport'" in response.json()["error"]["message"]
    assert ", ".join(manifests.GRANTABLE) in response.json()["error"]["message"]
