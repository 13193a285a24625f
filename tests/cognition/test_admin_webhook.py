"""An agent's webhook in the admin console: the URL is set on its own page, the signing secret is
shown once (on the response that made it) and never again, rotation goes through the service."""

from __future__ import annotations

import logging
import re

import pytest
from django.test import Client
from django.urls import reverse

from cognition.models import Agent
from cognition.webhooks import WebhookInvalid, agent_set_webhook, webhook_secret
from tests.skills.admin_support import (
    fast_password_hashing,  # noqa: F401 - autouse fixture
    make_agent,
    make_user,
)

pytestmark = pytest.mark.django_db

VIEW_AGENTS = ["cognition.view_agent"]
SECRET_RE = re.compile(r'<code class="webhook-secret">(whsec_[A-Za-z0-9_-]+)</code>')


def login(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def webhook_page(agent: Agent) -> str:
    return reverse("admin:cognition_agent_webhook", args=[agent.pk])


def test_setting_the_first_url_shows_the_new_secret_once_and_never_again(caplog) -> None:
    caplog.set_level(logging.DEBUG)
    owner = make_user("olivia", perms=VIEW_AGENTS)
    agent = make_agent("scout", owner=owner)
    client = login(owner)

    # when the owner saves a webhook URL
    response = client.post(webhook_page(agent), {"webhook_url": "https://brain.example.org/hook"})

    # then the response shows the generated secret, uncacheable, and it is the stored one
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    (raw,) = SECRET_RE.findall(response.content.decode())
    stored = Agent.objects.get(pk=agent.pk)
    assert stored.webhook_url == "https://brain.example.org/hook"
    assert webhook_secret(stored) == raw
    assert raw not in stored.webhook_secret  # encrypted at rest
    # and no later page, and no log line, carries it or its ciphertext
    pages = [
        client.get(reverse("admin:cognition_agent_change", args=[agent.pk])),
        client.get(reverse("admin:cognition_agent_changelist")),
        client.get(webhook_page(agent)),
    ]
    for page in pages:
        assert page.status_code == 200
        html = page.content.decode()
        assert raw not in html and stored.webhook_secret not in html
    assert "https://brain.example.org/hook" in pages[0].content.decode()
    assert "configure the webhook" in pages[0].content.decode()
    assert raw not in caplog.text and stored.webhook_secret not in caplog.text

    # when the URL changes later, the secret stays and is not shown
    changed = client.post(webhook_page(agent), {"webhook_url": "https://brain.example.org/v2"})
    assert changed.status_code == 302
    again = Agent.objects.get(pk=agent.pk)
    assert (again.webhook_url, webhook_secret(again)) == ("https://brain.example.org/v2", raw)


def test_the_rotate_action_replaces_the_secret_and_shows_the_new_one_once() -> None:
    owner = make_user("olivia", perms=VIEW_AGENTS)
    agent = make_agent("scout", owner=owner)
    old = agent_set_webhook(agent=agent, url="https://brain.example.org/hook", actor=owner).raw
    client = login(owner)

    response = client.post(
        reverse("admin:cognition_agent_changelist"),
        {"action": "rotate_webhook_secret", "_selected_action": [agent.pk]},
    )

    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    (new,) = SECRET_RE.findall(response.content.decode())
    assert new != old
    assert webhook_secret(Agent.objects.get(pk=agent.pk)) == new
    assert old not in response.content.decode()


def test_another_users_agent_cannot_be_configured_or_rotated() -> None:
    owner = make_user("olivia", perms=VIEW_AGENTS)
    intruder = make_user("mallory", perms=VIEW_AGENTS)
    agent = make_agent("scout", owner=owner)
    raw = agent_set_webhook(agent=agent, url="https://brain.example.org/hook", actor=owner).raw
    before = Agent.objects.get(pk=agent.pk)
    client = login(intruder)

    assert client.get(webhook_page(agent)).status_code == 403
    post = client.post(webhook_page(agent), {"webhook_url": "https://evil.example.org/"})
    assert post.status_code == 403
    rotate = client.post(
        reverse("admin:cognition_agent_changelist"),
        {"action": "rotate_webhook_secret", "_selected_action": [agent.pk]},
        follow=True,
    )
    assert raw not in rotate.content.decode()
    after = Agent.objects.get(pk=agent.pk)
    assert (after.webhook_url, after.webhook_secret) == (before.webhook_url, before.webhook_secret)


@pytest.mark.parametrize(
    "url, rule",
    [
        ("ftp://brain.example.org/", "http_url"),
        ("not a url", "http_url"),
        ("https://user:pw@brain.example.org/", "no_userinfo"),
        ("https://brain.example.org/" + "a" * 500, "max_length"),
    ],
)
def test_a_bad_url_is_refused_naming_the_rule_and_nothing_changes(url: str, rule: str) -> None:
    owner = make_user("olivia", perms=VIEW_AGENTS)
    agent = make_agent("scout", owner=owner)

    with pytest.raises(WebhookInvalid) as caught:
        agent_set_webhook(agent=agent, url=url, actor=owner)
    assert caught.value.details == {"field": "webhook_url", "rule": rule}

    # and through the admin page: the form says why, and no secret was generated
    response = login(owner).post(webhook_page(agent), {"webhook_url": url})
    assert response.status_code == 200
    assert "errorlist" in response.content.decode()
    stored = Agent.objects.get(pk=agent.pk)
    assert (stored.webhook_url, stored.webhook_secret) == ("", "")


def test_clearing_the_url_keeps_the_secret_and_stops_webhook_delivery() -> None:
    owner = make_user("olivia", perms=VIEW_AGENTS)
    agent = make_agent("scout", owner=owner)
    raw = agent_set_webhook(agent=agent, url="https://brain.example.org/hook", actor=owner).raw

    assert agent_set_webhook(agent=agent, url="", actor=owner) is None

    stored = Agent.objects.get(pk=agent.pk)
    assert stored.webhook_url == ""
    assert webhook_secret(stored) == raw


def test_a_secret_copied_to_another_agent_is_refused() -> None:
    from skills.errors import CredentialsUnreadable

    owner = make_user("olivia", perms=VIEW_AGENTS)
    first = make_agent("scout", owner=owner)
    second = make_agent("ranger", owner=owner)
    agent_set_webhook(agent=first, url="https://brain.example.org/hook", actor=owner)
    sealed = Agent.objects.get(pk=first.pk).webhook_secret
    Agent.objects.filter(pk=second.pk).update(webhook_secret=sealed)

    with pytest.raises(CredentialsUnreadable):
        webhook_secret(Agent.objects.get(pk=second.pk))


def test_an_owner_without_the_admin_permission_on_agents_cannot_open_the_page() -> None:
    owner = make_user("olivia")  # staff, but no permission on agents
    agent = make_agent("scout", owner=owner)

    assert login(owner).get(webhook_page(agent)).status_code == 403
    assert (
        login(owner).post(webhook_page(agent), {"webhook_url": "https://a.example/"}).status_code
        == 403
    )
    assert Agent.objects.get(pk=agent.pk).webhook_url == ""


def test_a_private_address_is_refused_on_the_admin_page_naming_the_setting(settings) -> None:
    settings.MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False
    owner = make_user("olivia", perms=VIEW_AGENTS)
    agent = make_agent("scout", owner=owner)

    response = login(owner).post(webhook_page(agent), {"webhook_url": "http://127.0.0.1/hook"})

    assert response.status_code == 200
    page = response.content.decode()
    assert "errorlist" in page
    assert "MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES=true" in page
    stored = Agent.objects.get(pk=agent.pk)
    assert (stored.webhook_url, stored.webhook_secret) == ("", "")
