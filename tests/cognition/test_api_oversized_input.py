"""Input no endpoint can take answers 4xx with the error body, never 500: a body over the size
limit (413), JSON nested beyond the depth limit (400), an Authorization header that is not ASCII
text (401). Each refusal leaves the database as it was."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.conf import settings
from django.core.management import call_command
from rest_framework.test import APIClient

from cognition.api.parsers import MAX_JSON_DEPTH
from cognition.models import IdempotencyRecord, PersonalToken
from runs.models import MotorRun
from skills.imports import skill_import_pasted
from skills.services import Actor

from .conftest import World, bearer, skill_md, state_snapshot

pytestmark = pytest.mark.django_db

TEN_MB = b"x" * (10 * 1024 * 1024)
ERROR_KEYS = {"code", "message", "details"}


def everything(world: World) -> dict[str, Any]:
    return {
        **state_snapshot(),
        "runs": MotorRun.objects.count(),
        "idempotency": IdempotencyRecord.objects.count(),
        "tokens": PersonalToken.objects.count(),
    }


def body_operations(tmp_path: Path) -> list[tuple[str, str]]:
    """(method, path) of every documented operation that takes a request body."""
    target = tmp_path / "schema.yaml"
    call_command("spectacular", "--file", str(target))
    paths = yaml.safe_load(target.read_text())["paths"]
    ids = {"{name}": "mailer", "{ref}": "alpha", "{run_id}": "r_missing"}
    ids |= {"{schedule_id}": "1", "{conversation_id}": "1"}
    found = []
    for path, operations in paths.items():
        for method, operation in operations.items():
            if "requestBody" in operation:
                for placeholder, value in ids.items():
                    path = path.replace(placeholder, value)
                found.append((method, path))
    return found


@pytest.fixture
def human(world: World) -> APIClient:
    skill_import_pasted(text=skill_md("mailer"), actor=Actor.system("test"), agent=world.alpha)
    from cognition.services import personal_token_create

    return bearer(personal_token_create(user=world.olivia, name="t", actor=world.olivia).raw)


@pytest.mark.parametrize(
    ("content_type", "refusal"),
    [
        ("application/json", 413),
        # bodies are JSON only: another type is refused before the body is read
        ("application/x-www-form-urlencoded", 415),
        ("multipart/form-data; boundary=xx", 415),
    ],
)
def test_a_body_over_the_limit_on_any_endpoint_is_refused_and_changes_nothing(
    world: World, human: APIClient, tmp_path: Path, content_type: str, refusal: int
) -> None:
    # given every operation that takes a body, called by a human who may use all of them
    operations = body_operations(tmp_path)
    assert len(operations) > 15
    before = everything(world)
    for method, path in operations:
        # when the body is 10 MB
        response = getattr(human, method)(f"{path}?agent=alpha", TEN_MB, content_type=content_type)

        # then the call is refused with 413 (or 404 where the path names a row that does not
        # exist: that is checked before the body is read)
        expected = 404 if any(p in path for p in ("r_missing", "/1/")) else refusal
        assert response.status_code == expected, (method, path, response.content[:300])
        error = response.json()["error"]
        assert set(error) == ERROR_KEYS
        if expected == 415:
            assert error["code"] == "unsupported_media_type"
        if expected == 413:
            assert error["code"] == "request_too_large"
            assert error["details"] == {
                "rule": "DATA_UPLOAD_MAX_MEMORY_SIZE",
                "limit_bytes": settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
            }
            assert str(settings.DATA_UPLOAD_MAX_MEMORY_SIZE) in error["message"]
    # and nothing was created or changed
    assert everything(world) == before


def test_an_agent_starting_a_run_with_a_10_mb_body_gets_413(world: World) -> None:
    before = everything(world)
    response = bearer(world.alpha_token).post(
        "/api/v1/runs/", TEN_MB, content_type="application/json", HTTP_IDEMPOTENCY_KEY="k"
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert everything(world) == before


def nested(depth: int, kind: str) -> str:
    if kind == "list":
        return "[" * depth + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


@pytest.mark.parametrize("kind", ["list", "object"])
@pytest.mark.parametrize("depth", [5000, MAX_JSON_DEPTH + 1])
def test_json_nested_beyond_the_limit_is_a_400_naming_the_limit(
    world: World, kind: str, depth: int
) -> None:
    before = everything(world)
    body = (
        json.dumps({"task": "x", "inputs": json.loads(nested(depth - 1, kind))})
        if (depth <= 900)
        else '{"task": "x", "inputs": ' + nested(depth - 1, kind) + "}"
    )

    response = bearer(world.alpha_token).post(
        "/api/v1/runs/", body, content_type="application/json"
    )

    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"] == {
        "code": "malformed_request",
        "message": f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels.",
        "details": {"rule": "max_json_depth", "limit": MAX_JSON_DEPTH},
    }
    assert everything(world) == before


def test_json_nested_up_to_the_limit_is_parsed(world: World) -> None:
    # the body object is level 1, so `inputs` may hold MAX_JSON_DEPTH - 1 levels
    inputs = json.loads(nested(MAX_JSON_DEPTH - 1, "object"))
    response = bearer(world.alpha_token).post(
        "/api/v1/skills/", {"skill_md": "", "deep": inputs}, format="json"
    )
    # the parser took it: what refuses it is the serializer, naming the field
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"
    assert "skill_md" in response.json()["error"]["details"]["fields"]


@pytest.mark.parametrize("header", ["\x85", "\xa0", "\xff", " ", "\x85Bearer mc_x", "Bearer \xe9"])
def test_an_authorization_header_that_is_not_ascii_text_is_a_401(world: World, header: str) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)

    response = client.get("/api/v1/agents/")

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "authentication_failed"
    assert response.json()["error"]["details"] == {"rule": "authorization_header_format"}
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="api"'
