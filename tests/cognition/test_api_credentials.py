"""/api/v1/credentials: names only out, values write-only and encrypted in the column."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cognition.models import Credential
from cognition.selectors import credentials_resolve

from .conftest import SECRET, World, bearer, raw_credential_column, state_snapshot

pytestmark = pytest.mark.django_db

CREDENTIALS = "/api/v1/credentials/"


def test_an_agent_sets_lists_and_deletes_its_credentials_and_never_sees_a_value(
    world: World,
) -> None:
    alpha = bearer(world.alpha_token)
    responses = []

    put = alpha.put(CREDENTIALS + "VAULT_API_KEY/", {"value": SECRET}, format="json")
    responses.append(put)
    assert put.status_code == 200
    assert put.json()["name"] == "API_KEY"
    assert put.json()["value"] == "[set]"

    listing = alpha.get(CREDENTIALS)
    responses.append(listing)
    assert [(c["name"], c["value"]) for c in listing.json()["results"]] == [("API_KEY", "[set]")]
    assert credentials_resolve(agent=world.alpha, names=["API_KEY"]) == {"API_KEY": SECRET}
    assert all(SECRET not in v for v in raw_credential_column())

    deleted = alpha.delete(CREDENTIALS + "API_KEY/")
    responses.append(deleted)
    assert deleted.status_code == 204
    assert Credential.objects.count() == 0
    for response in responses:
        assert SECRET.encode() not in response.content


def test_a_human_manages_an_owned_agents_vault(
    world: World, session_client: Callable, personal_client: Callable
) -> None:
    olivia = session_client(world.olivia)
    assert olivia.put(CREDENTIALS + "TOKEN/", {"value": SECRET}, format="json").status_code == 200
    assert Credential.objects.get().agent_id == world.alpha.pk
    listing = personal_client(world.olivia).get(CREDENTIALS, {"agent": "alpha"})
    assert [c["name"] for c in listing.json()["results"]] == ["TOKEN"]
    assert SECRET.encode() not in listing.content


def test_a_second_agent_sees_nothing_and_cannot_touch_the_first_agents_vault(
    world: World, personal_client: Callable
) -> None:
    bearer(world.alpha_token).put(CREDENTIALS + "TOKEN/", {"value": SECRET}, format="json")
    before = state_snapshot()
    bravo = bearer(world.bravo_token)
    bob = personal_client(world.bob)

    assert bravo.get(CREDENTIALS).json()["results"] == []
    for response in (
        bravo.delete(CREDENTIALS + "TOKEN/"),
        bravo.get(CREDENTIALS, {"agent": "alpha"}),
        bob.get(CREDENTIALS, {"agent": "alpha"}),
        bob.put(CREDENTIALS + "TOKEN/?agent=alpha", {"value": "x"}, format="json"),
    ):
        assert response.status_code == 404
        assert response.json()["error"]["code"] in {"credential_not_found", "agent_not_found"}
        assert SECRET.encode() not in response.content
    assert state_snapshot() == before


@pytest.mark.parametrize(
    ("name", "data", "code"),
    [
        ("9LIVES", {"value": "x"}, "credential_invalid"),
        ("TOKEN", {"value": ""}, "invalid"),
        ("TOKEN", {}, "invalid"),
    ],
)
def test_bad_input_is_400_and_stores_nothing(
    world: World, name: str, data: dict, code: str
) -> None:
    response = bearer(world.alpha_token).put(CREDENTIALS + f"{name}/", data, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert Credential.objects.count() == 0


@pytest.mark.parametrize(
    ("path_name", "stored"),
    [
        ("VAULT_API_KEY", "API_KEY"),
        ("vault_token", "token"),
        ("vault_", "vault_"),
        ("VAULT_1X", "VAULT_1X"),
    ],
)
def test_a_vault_prefix_is_dropped_only_before_a_valid_name(
    world: World, path_name: str, stored: str
) -> None:
    # every name the documented pattern admits is stored: the prefix goes only when what
    # follows it is a name of its own
    response = bearer(world.alpha_token).put(
        CREDENTIALS + f"{path_name}/", {"value": SECRET}, format="json"
    )
    assert (response.status_code, response.json()["name"]) == (200, stored)
    assert list(Credential.objects.values_list("name", flat=True)) == [stored]


def test_deleting_an_unknown_name_is_404(world: World) -> None:
    response = bearer(world.alpha_token).delete(CREDENTIALS + "NOPE/")
    assert response.status_code == 404
    assert response.json() == {
        "error": {
            "code": "credential_not_found",
            "message": "Agent 'alpha' has no credential named 'NOPE'.",
            "details": {"name": "NOPE"},
        }
    }
