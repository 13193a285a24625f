"""Token management through the API: humans issue and revoke; agents may not."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cognition.models import Agent, PersonalToken

from .conftest import World, bearer

pytestmark = pytest.mark.django_db


def test_an_owner_issues_an_agent_token_shown_once_and_revokes_it(
    world: World, session_client: Callable
) -> None:
    olivia = session_client(world.olivia)

    issued = olivia.post("/api/v1/agents/alpha/token/")
    assert issued.status_code == 201
    raw = issued.json()["token"]
    assert raw.startswith("mc_")
    assert issued.json()["prefix"] == raw[:10]
    # the old token stopped working, the new one works, and only a hash is stored
    assert bearer(world.alpha_token).get("/api/v1/agents/me/").status_code == 401
    assert bearer(raw).get("/api/v1/agents/me/").json()["name"] == "alpha"
    assert raw not in str(list(Agent.objects.values_list("token_hash", "token_prefix")))

    assert olivia.delete("/api/v1/agents/alpha/token/").status_code == 204
    assert bearer(raw).get("/api/v1/agents/me/").status_code == 401


def test_a_non_owner_gets_404_and_nothing_changes(world: World, session_client: Callable) -> None:
    before = list(Agent.objects.values_list("token_hash", "token_revoked_at"))
    bob = session_client(world.bob)
    assert bob.post("/api/v1/agents/alpha/token/").status_code == 404
    assert bob.delete(f"/api/v1/agents/{world.alpha.pk}/token/").status_code == 404
    assert list(Agent.objects.values_list("token_hash", "token_revoked_at")) == before


def test_agents_cannot_manage_tokens(world: World) -> None:
    alpha = bearer(world.alpha_token)
    for response in (
        alpha.post("/api/v1/agents/alpha/token/"),
        alpha.get("/api/v1/tokens/"),
        alpha.post("/api/v1/tokens/", {"name": "x"}, format="json"),
    ):
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "human_required"
    assert PersonalToken.objects.count() == 0


def test_personal_tokens_are_created_listed_without_value_and_revoked(
    world: World, session_client: Callable
) -> None:
    olivia = session_client(world.olivia)
    created = olivia.post("/api/v1/tokens/", {"name": "laptop"}, format="json")
    assert created.status_code == 201
    raw = created.json()["token"]
    assert raw.startswith("mcp_")

    listing = olivia.get("/api/v1/tokens/")
    assert [(t["name"], t["prefix"], t["revoked_at"]) for t in listing.json()] == [
        ("laptop", raw[:10], None)
    ]
    assert raw.encode() not in listing.content
    assert bearer(raw).get("/api/v1/agents/").status_code == 200

    token_id = created.json()["id"]
    assert session_client(world.bob).delete(f"/api/v1/tokens/{token_id}/").status_code == 404
    assert olivia.delete(f"/api/v1/tokens/{token_id}/").status_code == 204
    assert bearer(raw).get("/api/v1/agents/").status_code == 401
