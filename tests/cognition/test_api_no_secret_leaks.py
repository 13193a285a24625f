"""A tour of every endpoint with a secret stored in the vault and in a policy: the raw value is in
no response body, for any kind of caller, and the database holds only ciphertext."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cognition.models import Agent

from .conftest import (
    SECRET,
    World,
    bearer,
    raw_credential_column,
    raw_policy_credential_column,
    skill_md,
)

pytestmark = pytest.mark.django_db

USER_MESSAGE = {"HTTP_X_MOTOR_TRIGGER": "user_message"}


def test_no_response_of_any_endpoint_contains_a_credential_value(
    world: World, session_client: Callable, personal_client: Callable
) -> None:
    Agent.objects.filter(pk=world.alpha.pk).update(trusted_for_relayed_consent=True)
    alpha = bearer(world.alpha_token)
    responses = [
        alpha.post("/api/v1/skills/", {"skill_md": skill_md("mailer")}, format="json"),
        alpha.put("/api/v1/credentials/API_KEY/", {"value": SECRET}, format="json"),
        alpha.post(
            "/api/v1/skills/mailer/update/",
            {"credentials": ["API_KEY"], "credential_values": {"API_KEY": SECRET}},
            format="json",
            **USER_MESSAGE,
        ),
        alpha.get("/api/v1/skills/mailer/review/"),
        alpha.post("/api/v1/skills/mailer/approve/", {}, format="json", **USER_MESSAGE),
    ]
    for client in (
        alpha,
        session_client(world.olivia),
        personal_client(world.olivia),
        bearer(world.bravo_token),
    ):
        for path in (
            "/api/v1/skills/",
            "/api/v1/skills/mailer/",
            "/api/v1/skills/mailer/review/",
            "/api/v1/credentials/",
            "/api/v1/agents/",
            "/api/v1/agents/me/",
            "/api/v1/tokens/",
            "/api/schema/",
        ):
            responses.append(client.get(path))
    responses.append(bearer(world.bravo_token).get("/api/v1/credentials/?agent=alpha"))

    assert [r.status_code for r in responses[:5]] == [201, 200, 200, 200, 200]
    assert responses[4].json()["status"] == "approved"
    for response in responses:
        assert response.status_code < 500
        assert SECRET.encode() not in response.content
    assert all(SECRET not in v for v in raw_credential_column() + raw_policy_credential_column())
