"""Authentication of the API: agent tokens, sessions, personal tokens, revocation."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from cognition.models import Credential
from cognition.services import agent_revoke_token, personal_token_create, personal_token_revoke

from .conftest import World, bearer

pytestmark = pytest.mark.django_db

ME = "/api/v1/agents/me/"
AGENTS = "/api/v1/agents/"


def test_an_agent_token_authenticates_as_that_agent(world: World) -> None:
    response = bearer(world.alpha_token).get(ME)
    assert response.status_code == 200
    assert response.json() == {
        "id": world.alpha.pk,
        "name": "alpha",
        "energy": 1.0,
        "energy_band": "all",
        "regen_per_hour": 0.1,
        "trust_level": "supervised_auto",
        "trusted_for_relayed_consent": False,
    }


def test_a_revoked_agent_token_gets_401(world: World) -> None:
    agent_revoke_token(agent=world.alpha, actor=world.olivia)
    response = bearer(world.alpha_token).get(ME)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "authentication_failed"
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="api"'


@pytest.mark.parametrize("header", ["Bearer mc_not-a-token", "Bearer", "Bearer a b"])
def test_bad_bearer_headers_get_401(world: World, header: str) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get(AGENTS)
    assert response.status_code == 401
    assert set(response.json()["error"]) == {"code", "message", "details"}


def test_no_credentials_get_401_with_the_error_shape() -> None:
    response = APIClient().get(AGENTS)
    assert response.status_code == 401
    assert response.json() == {
        "error": {
            "code": "not_authenticated",
            "message": "Authentication credentials were not provided.",
            "details": {},
        }
    }


def test_a_session_is_a_human_who_sees_the_agents_they_own(
    world: World, session_client: Callable
) -> None:
    response = session_client(world.olivia).get(AGENTS)
    assert response.status_code == 200
    assert [a["name"] for a in response.json()["results"]] == ["alpha"]


def test_a_personal_token_is_a_human_and_revocation_stops_it(world: World) -> None:
    issued = personal_token_create(user=world.bob, name="laptop", actor=world.bob)
    client = bearer(issued.raw)
    assert [a["name"] for a in client.get(AGENTS).json()["results"]] == ["bravo"]
    assert issued.raw not in str(issued.token.token_hash)

    personal_token_revoke(token=issued.token, actor=world.bob)
    assert client.get(AGENTS).status_code == 401


def test_an_inactive_users_personal_token_is_refused(world: World) -> None:
    issued = personal_token_create(user=world.bob, name="laptop", actor=world.bob)
    world.bob.is_active = False
    world.bob.save()
    assert bearer(issued.raw).get(AGENTS).status_code == 401


def test_agents_me_is_for_agents_only(world: World, personal_client: Callable) -> None:
    response = personal_client(world.olivia).get(ME)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "agent_principal_required"


def test_an_agent_lists_only_itself(world: World) -> None:
    response = bearer(world.bravo_token).get(AGENTS)
    assert [a["name"] for a in response.json()["results"]] == ["bravo"]


def test_a_session_post_without_the_csrf_token_is_refused(world: World) -> None:
    # given a logged-in browser session that does not send the CSRF token
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(world.olivia)

    # when it writes a credential
    response = client.put("/api/v1/credentials/TOKEN/", {"value": "x"}, format="json")

    # then it is refused and nothing is stored
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"
    assert "CSRF" in response.json()["error"]["message"]
    assert Credential.objects.count() == 0
