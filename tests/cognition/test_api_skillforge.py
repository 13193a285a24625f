"""REST /api/v1/skillforge/: start a flow, follow it, answer it; consent and bad input."""

from __future__ import annotations

import pytest

from forge.models import FlowEvent, FlowState, ForgeFlow

from .conftest import World, bearer

pytestmark = pytest.mark.django_db

URL = "/api/v1/skillforge/"


def test_a_person_starts_a_flow_and_follows_it(world: World, session_client):
    # given the owner of alpha, logged in
    client = session_client(world.olivia)
    # when they ask for a tool
    response = client.post(
        f"{URL}?agent=alpha",
        {"request": "check if status.myapp.io is up", "allowed_domains": ["status.myapp.io"]},
        format="json",
    )
    # then a flow exists in designing, audited, with what they said
    assert response.status_code == 201, response.content
    body = response.json()
    flow = ForgeFlow.objects.get()
    assert body["flow_id"] == flow.id
    assert (body["state"], body["mode"], body["allowed_domains"], body["credentials"]) == (
        "designing",
        "create",
        ["status.myapp.io"],
        None,
    )
    assert flow.started_by == "api:olivia"
    # and the list and the detail show it, the detail with its audit trail
    listed = client.get(f"{URL}?agent=alpha").json()["flows"]
    assert [f["flow_id"] for f in listed] == [flow.id]
    detail = client.get(f"{URL}{flow.id}/?agent=alpha").json()
    assert [(e["from"], e["to"]) for e in detail["events"]] == [(None, "designing")]


def test_the_answer_endpoint_answers_the_pending_question(world: World, session_client):
    client = session_client(world.olivia)
    flow_id = client.post(f"{URL}?agent=alpha", {"request": "uptime"}, format="json").json()[
        "flow_id"
    ]
    flow = ForgeFlow.objects.get(pk=flow_id)
    flow.ask(topic="domains", question="Which web addresses…")
    flow.save()
    response = client.post(
        f"{URL}{flow_id}/answer/?agent=alpha", {"answer": "status.myapp.io"}, format="json"
    )
    assert response.status_code == 200, response.content
    assert (response.json()["allowed_domains"], response.json()["question"]) == (
        ["status.myapp.io"],
        None,
    )


def test_an_agent_token_without_the_users_words_cannot_start_a_flow(world: World):
    # given an agent calling on its own (no user_message trigger)
    response = bearer(world.alpha_token).post(URL, {"request": "make a tool"}, format="json")
    # then the consent gate refuses it and nothing is created
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "consent_required"
    assert ForgeFlow.objects.count() == 0 and FlowEvent.objects.count() == 0


def test_a_trusted_agent_relaying_its_users_words_starts_one(world: World):
    type(world.alpha).objects.filter(pk=world.alpha.pk).update(trusted_for_relayed_consent=True)
    response = bearer(world.alpha_token).post(
        URL,
        {"request": "make a tool that adds numbers", "allowed_domains": [], "credentials": []},
        format="json",
        HTTP_X_MOTOR_TRIGGER="user_message",
    )
    assert response.status_code == 201, response.content
    assert ForgeFlow.objects.get().started_by == "agent:alpha relaying olivia"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "request"),
        ({"request": 5}, "request"),
        ({"request": "x", "allowed_domains": "a.io"}, "allowed_domains"),
        ({"request": "x", "allowed_domains": ["https://a.io/x"]}, "allowed_domains"),
        ({"request": "x", "credentials": ["not a name"]}, "credentials"),
        ({"request": "x", "mode": "destroy"}, "mode"),
        ({"request": "x", "mode": "edit", "skill": "nothing-here"}, None),
    ],
)
def test_bad_input_is_a_clear_error_and_creates_nothing(world: World, session_client, body, field):
    response = session_client(world.olivia).post(f"{URL}?agent=alpha", body, format="json")
    assert response.status_code in (400, 404), response.content
    error = response.json()["error"]
    if field is not None:
        assert field in str(error["details"]) or field in error["message"]
    assert ForgeFlow.objects.count() == 0 and FlowEvent.objects.count() == 0


def test_another_agents_flow_is_not_found(world: World, session_client):
    flow_id = (
        session_client(world.olivia)
        .post(f"{URL}?agent=alpha", {"request": "uptime"}, format="json")
        .json()["flow_id"]
    )
    assert session_client(world.bob).get(f"{URL}{flow_id}/?agent=bravo").status_code == 404
    response = bearer(world.bravo_token).post(f"{URL}{flow_id}/cancel/")
    assert response.status_code == 404
    assert ForgeFlow.objects.get().state == FlowState.DESIGNING
