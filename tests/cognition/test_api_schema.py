"""The OpenAPI schema validates, documents the consent header, and errors share one shape."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from rest_framework.test import APIClient

from cognition.api.exceptions import exception_handler
from skills.models import Policy

from .conftest import World, bearer, skill_md

pytestmark = pytest.mark.django_db


def test_the_schema_validates_without_warnings(tmp_path: Path) -> None:
    target = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(target))
    schema = yaml.safe_load(target.read_text())
    approve = schema["paths"]["/api/v1/skills/{name}/approve/"]["post"]
    assert "X-Motor-Trigger" in [p["name"] for p in approve["parameters"]]
    assert set(approve["responses"]) == {"200", "400", "401", "403", "404", "409"}
    assert schema["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    put = schema["components"]["schemas"]["CredentialWrite"]
    assert put["properties"]["value"]["writeOnly"] is True


def test_schema_and_docs_are_served() -> None:
    client = APIClient()
    assert client.get("/api/schema/").status_code == 200
    assert client.get("/api/docs/").status_code == 200


def test_an_unexpected_error_is_a_500_with_the_shape_and_no_internals() -> None:
    response = exception_handler(RuntimeError("password=hunter2 at /srv/secret"), {"view": None})
    assert response.status_code == 500
    assert response.data == {
        "error": {
            "code": "internal_error",
            "message": "The server failed to handle this request.",
            "details": {},
        }
    }


def test_unknown_routes_and_methods_use_the_error_shape(world: World) -> None:
    client = bearer(world.alpha_token)
    response = client.patch("/api/v1/credentials/", {}, format="json")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"


def test_paginated_lists_match_their_schema(world: World, tmp_path: Path) -> None:
    target = tmp_path / "schema.yaml"
    call_command("spectacular", "--file", str(target))
    components = yaml.safe_load(target.read_text())["components"]["schemas"]
    client = bearer(world.alpha_token)
    client.post("/api/v1/skills/", {"skill_md": skill_md("mailer")}, format="json")
    client.put("/api/v1/credentials/TOKEN/", {"value": "x"}, format="json")
    for path, component in (
        ("/api/v1/skills/", "SkillListItem"),
        ("/api/v1/credentials/", "Credential"),
        ("/api/v1/agents/", "Agent"),
    ):
        page = client.get(path).json()
        assert len(page["results"]) == 1
        assert set(page) == set(components[component.replace("ListItem", "") + "Page"]["required"])
        for item in page["results"]:
            assert set(item) == set(components[component]["properties"])


def test_a_domain_500_keeps_the_shape_and_names_no_secret(world: World) -> None:
    # given a policy whose stored credential values no configured key can read
    client = bearer(world.alpha_token)
    client.post("/api/v1/skills/", {"skill_md": skill_md("mailer")}, format="json")
    Policy.objects.filter(agent=world.alpha).update(credential_values="gAAAA-not-a-fernet-token")

    response = client.get("/api/v1/skills/mailer/")

    assert response.status_code == 500
    error = response.json()["error"]
    assert error["code"] == "credentials_unreadable"
    assert "gAAAA" not in response.content.decode()
