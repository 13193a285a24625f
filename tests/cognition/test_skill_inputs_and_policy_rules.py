# ruff: noqa: F811 - pytest fixtures imported from core_support are parameters here
"""A skill's inputs are checked when a run starts (400 naming each field, nothing created, no
energy taken) and reach the motor as a structured block; a policy refuses an input schema that
is not JSON Schema, a shell allowlist naming a program the sandbox lacks, and a dependency that
is not a pinned plain name — each naming the rule, the policy left as it was."""

from __future__ import annotations

import pytest

from cognition.core_act import core_act
from cognition.models import Agent
from cognition.principals import Principal
from runs.models import MotorRun
from skills.errors import PolicyValidationError
from skills.models import Policy
from skills.policy_edits import policy_update
from skills.services import Actor
from skills.toolpolicy.inputs import InputsInvalid

from .core_support import _clean_mutex_keys, skill_in_status, workspaces  # noqa: F401

pytestmark = pytest.mark.django_db

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city"],
}


@pytest.fixture
def weather(world, workspaces, tmp_path) -> Policy:
    policy = skill_in_status(
        tmp_path / "src", agent=world.alpha, approver=world.olivia, status="approved"
    )
    return policy_update(policy=policy, actor=Actor.system("test"), inputs=SCHEMA)


def _act(world, **params):
    args = {"mode": "agentic", "task": "Report the weather", "trigger": "api", **params}
    return core_act(principal=Principal.for_agent(world.alpha), agent=world.alpha, **args)


@pytest.mark.parametrize(
    ("inputs", "fields"),
    [
        ({"city": 7}, [("$.city", "type")]),
        ({"days": 2}, [("$.city", "required")]),
        (None, [("$.city", "required")]),
        ({"city": "Berlin", "days": "two"}, [("$.days", "type")]),
    ],
    ids=["wrong-type", "missing-required", "no-inputs", "second-field"],
)
def test_invalid_inputs_are_refused_naming_each_field_and_nothing_happens(
    world, weather, inputs, fields
):
    energy = Agent.objects.get(pk=world.alpha.pk).energy
    workspace_count = len(list(weather_workspaces(world)))

    with pytest.raises(InputsInvalid) as caught:
        _act(world, skill="weather-report", inputs=inputs)

    assert caught.value.http_status == 400
    assert [(e["field"], e["rule"]) for e in caught.value.details["errors"]] == fields
    assert not MotorRun.objects.exists()
    assert Agent.objects.get(pk=world.alpha.pk).energy == energy
    assert len(list(weather_workspaces(world))) == workspace_count


def weather_workspaces(world):
    from django.conf import settings

    return settings.MOTOR_WORKSPACES_DIR.iterdir()


def test_valid_inputs_reach_the_motor_as_a_structured_block(world, weather):
    result = _act(world, skill="weather-report", inputs={"city": "Berlin", "days": 2})

    task = MotorRun.objects.get(pk=result["run_id"]).task
    assert task == (
        "Report the weather\n\nInputs of this run (JSON, validated against the skill's input "
        'schema):\n```json\n{\n  "city": "Berlin",\n  "days": 2\n}\n```'
    )


def test_the_api_answers_invalid_inputs_with_400_naming_the_fields(world, weather):
    from .conftest import bearer

    response = bearer(world.alpha_token).post(
        "/api/v1/runs/",
        {"task": "Report the weather", "skill": "weather-report", "inputs": {"city": 7}},
        format="json",
    )

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "inputs_invalid"
    assert error["details"]["errors"] == [
        {"field": "$.city", "rule": "type", "message": "7 is not of type 'string'"}
    ]
    assert not MotorRun.objects.exists()


@pytest.mark.parametrize(
    ("fields", "field", "rule", "message"),
    [
        (
            {"inputs": {"type": "object", "properties": {"n": {"type": "integr"}}}},
            "inputs",
            "json_schema",
            "policy update: inputs is not a valid JSON Schema: keyword 'type' at "
            "properties/n/type: 'integr' is not valid under any of the given schemas.",
        ),
        (
            {"shell_allowlist": ["jq", "no-such-program-here"]},
            "shell_allowlist",
            "sandbox_program",
            "policy update: shell_allowlist: 'no-such-program-here' does not exist in the "
            "sandbox (searched /usr/local/bin, /usr/bin, /bin, /usr/local/sbin, /usr/sbin, "
            "/sbin).",
        ),
        (
            {"dependencies": ["pip:requests;rm -rf /==1.0"]},
            "dependencies",
            "plain_name",
            "policy update: dependency 'pip:requests;rm -rf /==1.0': 'requests;rm -rf /' is not "
            "a plain pip package name (no URLs, paths, spaces or shell characters).",
        ),
        (
            {"dependencies": ["pip:https://evil.test/x.whl==1"]},
            "dependencies",
            "plain_name",
            None,
        ),
        ({"tools": ["read", "teleport"]}, "tools", "known_tool", None),
    ],
    ids=[
        "schema",
        "shell-allowlist",
        "dependency-metacharacters",
        "dependency-url",
        "unknown-tool",
    ],
)
def test_a_policy_refuses_bad_fields_naming_the_rule_and_stays_as_it_was(
    weather, fields, field, rule, message
):
    before = Policy.objects.filter(pk=weather.pk).values().get()

    with pytest.raises(PolicyValidationError) as caught:
        policy_update(policy=weather, actor=Actor.system("test"), **fields)

    assert (caught.value.details["field"], caught.value.details["rule"]) == (field, rule)
    if message is not None:
        assert caught.value.message == message
    assert Policy.objects.filter(pk=weather.pk).values().get() == before


def test_a_shell_allowlist_of_programs_the_sandbox_has_is_saved(weather):
    updated = policy_update(
        policy=weather, actor=Actor.system("test"), shell_allowlist=["jq", "echo"]
    )

    assert Policy.objects.get(pk=updated.pk).shell_allowlist == ["jq", "echo"]
