"""PUT/GET /api/v1/agents/{ref}/webhook/ and POST …/webhook/rotate/: for the agent's human owner
only; the signing secret appears in the one response that generated it."""

from __future__ import annotations

import logging

import pytest

from cognition.models import Agent
from cognition.services import personal_token_create
from cognition.webhooks import webhook_secret

from .conftest import World, bearer

pytestmark = pytest.mark.django_db

URL = "https://brain.example.org/hook"


def test_the_owner_sets_the_url_and_gets_the_secret_once(world: World, session_client, caplog):
    caplog.set_level(logging.DEBUG)
    client = session_client(world.olivia)

    first = client.put(f"/api/v1/agents/{world.alpha.pk}/webhook/", {"url": URL}, format="json")

    assert first.status_code == 200
    body = first.json()
    raw = body.pop("secret")
    assert raw.startswith("whsec_")
    assert webhook_secret(Agent.objects.get(pk=world.alpha.pk)) == raw
    assert body == {
        "agent": "alpha",
        "url": URL,
        "secret_set": True,
        "secret_created_at": body["secret_created_at"],
    }
    # afterwards: never again, not on a read, not on a URL change
    read = client.get("/api/v1/agents/alpha/webhook/")
    assert read.json() == body
    changed = client.put("/api/v1/agents/alpha/webhook/", {"url": URL + "2"}, format="json")
    assert changed.json()["secret"] is None
    for response in (read, changed):
        assert raw not in response.content.decode()
    assert raw not in caplog.text
    # a rotation returns a new one, once
    rotated = client.post("/api/v1/agents/alpha/webhook/rotate/")
    assert rotated.status_code == 201
    new = rotated.json()["secret"]
    assert new != raw
    assert webhook_secret(Agent.objects.get(pk=world.alpha.pk)) == new


def test_agents_and_other_humans_cannot_touch_the_webhook(world: World) -> None:
    before = Agent.objects.values("webhook_url", "webhook_secret").get(pk=world.alpha.pk)
    agent_client = bearer(world.alpha_token)
    bob = bearer(personal_token_create(user=world.bob, name="t", actor=world.bob).raw)

    denied = agent_client.put("/api/v1/agents/alpha/webhook/", {"url": URL}, format="json")
    assert denied.status_code == 403
    assert denied.json()["error"]["code"] == "human_required"
    assert agent_client.post("/api/v1/agents/alpha/webhook/rotate/").status_code == 403
    other = bob.put("/api/v1/agents/alpha/webhook/", {"url": URL}, format="json")
    assert other.status_code == 404
    assert bob.post(f"/api/v1/agents/{world.alpha.pk}/webhook/rotate/").status_code == 404
    assert bob.get("/api/v1/agents/alpha/webhook/").status_code == 404

    after = Agent.objects.values("webhook_url", "webhook_secret").get(pk=world.alpha.pk)
    assert after == before == {"webhook_url": "", "webhook_secret": ""}


@pytest.mark.parametrize(
    "url, rule",
    [("ftp://x.example/", "http_url"), ("https://u:p@x.example/", "no_userinfo")],
)
def test_a_bad_url_is_a_400_naming_the_rule_and_nothing_changes(
    world: World, session_client, url: str, rule: str
) -> None:
    response = session_client(world.olivia).put(
        "/api/v1/agents/alpha/webhook/", {"url": url}, format="json"
    )

    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["details"]) == (
        "webhook_invalid",
        {"field": "webhook_url", "rule": rule},
    )
    stored = Agent.objects.get(pk=world.alpha.pk)
    assert (stored.webhook_url, stored.webhook_secret) == ("", "")


PRIVATE_URLS = [
    ("http://127.0.0.1:8080/hook", "loopback", "127.0.0.1"),
    ("http://localhost/hook", "loopback", "127.0.0.1"),
    ("https://10.0.0.5/hook", "private", "10.0.0.5"),
    ("http://[::1]/hook", "loopback", "::1"),
    ("http://169.254.169.254/latest", "cloud metadata", "169.254.169.254"),
]


@pytest.mark.parametrize("url, kind, address", PRIVATE_URLS)
def test_a_private_address_is_refused_naming_the_setting_while_it_is_off(
    world: World, session_client, settings, url: str, kind: str, address: str
) -> None:
    # given private receivers are off (the default) and the agent has a webhook
    settings.MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False
    client = session_client(world.olivia)
    client.put("/api/v1/agents/alpha/webhook/", {"url": URL}, format="json")
    before = Agent.objects.get(pk=world.alpha.pk)

    # when the owner sets a URL whose host is on this host or the internal network
    response = client.put("/api/v1/agents/alpha/webhook/", {"url": url}, format="json")

    # then it is refused, naming the address and the setting that would allow it
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "webhook_invalid"
    assert error["details"] == {
        "field": "webhook_url",
        "rule": "private_address",
        "setting": "MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES",
        "address": address,
    }
    assert error["message"] == (
        f"The webhook host resolves to a {kind} address ({address}) and "
        "MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES is off, so no signal could be delivered to it. "
        "Set MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES=true for a receiver on this host or network."
    )
    # and the stored webhook is the one before
    after = Agent.objects.get(pk=world.alpha.pk)
    assert (after.webhook_url, after.webhook_secret) == (URL, before.webhook_secret)


def test_a_private_address_is_accepted_when_the_setting_allows_it(
    world: World, session_client, settings
) -> None:
    settings.MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    response = session_client(world.olivia).put(
        "/api/v1/agents/alpha/webhook/", {"url": "http://127.0.0.1:8080/hook"}, format="json"
    )
    assert response.status_code == 200
    assert Agent.objects.get(pk=world.alpha.pk).webhook_url == "http://127.0.0.1:8080/hook"


def test_a_host_that_does_not_resolve_yet_is_accepted(world: World, session_client) -> None:
    # delivery checks the addresses again on every attempt; a name may get its address later
    response = session_client(world.olivia).put(
        "/api/v1/agents/alpha/webhook/", {"url": "https://brain.invalid/hook"}, format="json"
    )
    assert response.status_code == 200
