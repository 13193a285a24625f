"""Schema and validation say the same thing: a value of another JSON type than documented is
refused, not converted; what the views enforce (minimums, non-blank text, page sizes, header
formats) is written in the schema."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command

from cognition.api.fields import NOT_BLANK_PATTERN
from cognition.models import Conversation
from runs.models import MotorRun, Trigger

from .conftest import World, bearer, state_snapshot

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def schema(tmp_path_factory) -> dict[str, Any]:
    target: Path = tmp_path_factory.mktemp("schema") / "schema.yaml"
    call_command("spectacular", "--file", str(target))
    return yaml.safe_load(target.read_text())


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        ("/api/v1/conversations/", {"title": 0}, "title"),
        ("/api/v1/runs/", {"task": 7}, "task"),
        ("/api/v1/runs/", {"task": "x", "tools": [1], "domains": []}, "tools"),
        ("/api/v1/runs/", {"task": "x", "approval_required": "true"}, "approval_required"),
        ("/api/v1/runs/", {"task": "x", "approval_required": 1}, "approval_required"),
        ("/api/v1/runs/", {"task": "x", "max_iterations": "5"}, "max_iterations"),
        ("/api/v1/runs/", {"task": "x", "max_iterations": True}, "max_iterations"),
        ("/api/v1/runs/", {"task": "x", "max_iterations": 2.5}, "max_iterations"),
        ("/api/v1/oneshot/", {"code": "print(1)", "timeout_s": "1"}, "timeout_s"),
        ("/api/v1/oneshot/", {"code": "print(1)", "timeout_s": 0}, "timeout_s"),
        ("/api/v1/skills/", {"skill_md": 12}, "skill_md"),
    ],
)
def test_a_value_of_another_type_is_refused_not_converted(
    world: World, url: str, body: dict[str, Any], field: str
) -> None:
    before = (state_snapshot(), MotorRun.objects.count(), Conversation.objects.count())

    response = bearer(world.alpha_token).post(url, body, format="json")

    assert response.status_code == 400, response.content[:300]
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert list(error["details"]["fields"]) == [field]
    assert (state_snapshot(), MotorRun.objects.count(), Conversation.objects.count()) == before


@pytest.mark.parametrize("url", ["/api/v1/skills/", "/api/v1/runs/", "/api/v1/conversations/"])
@pytest.mark.parametrize("size", ["null", "0", "201", "5.0", "-1", "", "ten"])
def test_a_page_size_that_is_not_1_to_the_maximum_is_a_400(
    world: World, url: str, size: str
) -> None:
    response = bearer(world.alpha_token).get(f"{url}?page_size={size}")

    assert response.status_code == 400
    assert response.json()["error"]["details"] == {
        "fields": {"page_size": ["Must be an integer from 1 to 200."]}
    }


def test_a_page_size_in_range_sizes_the_page(world: World) -> None:
    for n in range(3):
        Conversation.objects.create(agent=world.alpha, user=world.olivia, title=f"c{n}")
    page = bearer(world.alpha_token).get("/api/v1/conversations/?page_size=2").json()
    assert [c["title"] for c in page["results"]] == ["c2", "c1"]
    assert page["next"] is not None


@pytest.mark.parametrize(
    "query", ["status=", "status=nope", "limit=5.0", "after=%201", "wait=null"]
)
def test_query_parameters_outside_their_documented_values_are_a_400(
    world: World, query: str
) -> None:
    url = (
        "/api/v1/signals/" if query.split("=")[0] in ("limit", "after", "wait") else "/api/v1/runs/"
    )
    response = bearer(world.alpha_token).get(f"{url}?{query}")
    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"]["code"] == "invalid"


def test_the_schema_states_the_rules_the_views_enforce(schema: dict[str, Any]) -> None:
    components = schema["components"]["schemas"]
    paths = schema["paths"]
    # non-blank text: the pattern refuses "", whitespace only and NUL, and takes text
    task = components["RunCreate"]["properties"]["task"]
    assert task["pattern"] == NOT_BLANK_PATTERN
    pattern = re.compile(NOT_BLANK_PATTERN)
    assert [bool(pattern.search(v)) for v in ("", " \t\u3000", "a\x00", " a ")] == [
        False,
        False,
        False,
        True,
    ]
    # minimums and maximums
    oneshot = components["Oneshot"]["properties"]["timeout_s"]
    assert (oneshot["minimum"], oneshot["maximum"]) == (0.001, 5.0)
    signals = {p["name"]: p for p in paths["/api/v1/signals/"]["get"]["parameters"]}
    assert (signals["limit"]["schema"]["minimum"], signals["limit"]["schema"]["maximum"]) == (
        1,
        1000,
    )
    assert signals["after"]["schema"]["minimum"] == 0
    for url, maximum in (("/api/v1/runs/", 200), ("/api/v1/conversations/{id}/messages/", 500)):
        url = url.replace("{id}", "{conversation_id}")
        sizes = [p for p in paths[url]["get"]["parameters"] if p["name"] == "page_size"]
        assert sizes[0]["schema"] == {"type": "integer", "minimum": 1, "maximum": maximum}
    # headers with a format
    runs = {p["name"]: p for p in paths["/api/v1/runs/"]["post"]["parameters"]}
    assert runs["Idempotency-Key"]["schema"]["pattern"] == "^[!-~]{1,255}$"
    assert set(runs["X-Motor-Trigger"]["schema"]["enum"]) == set(Trigger.values)
    stream = paths["/api/v1/signals/stream/"]["get"]
    assert {p["name"]: p for p in stream["parameters"]}["Last-Event-ID"]["schema"]["pattern"] == (
        "^[0-9]{1,18}$"
    )
    # the event stream's format
    events = stream["responses"]["200"]
    assert "`id: <seq>`" in events["description"]
    assert "`: heartbeat`" in events["description"]
    # request bodies are JSON only
    for operations in paths.values():
        for operation in operations.values():
            if "requestBody" in operation:
                assert list(operation["requestBody"]["content"]) == ["application/json"]
