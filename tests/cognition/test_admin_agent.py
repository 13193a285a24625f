"""Agents in the admin console: listed read-only, created through agent_create."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from cognition.models import Agent
from cognition.services import agent_issue_token
from tests.skills.admin_support import (
    fast_password_hashing,  # noqa: F401 - autouse fixture
    make_agent,
    make_user,
)

pytestmark = pytest.mark.django_db


def test_agent_list_shows_name_owner_energy_trust_and_never_the_token() -> None:
    # given an agent with an issued token
    root = make_user("root", superuser=True)
    agent = make_agent("scout", owner=root)
    issued = agent_issue_token(agent=agent, actor=root)
    client = Client()
    client.force_login(root)

    # when the list and the agent's page are opened
    listing = client.get(reverse("admin:cognition_agent_changelist")).content.decode()
    detail = client.get(reverse("admin:cognition_agent_change", args=[agent.pk])).content.decode()

    # then they show the agent's facts, the token only by its prefix, and no editable field
    for text in (
        "scout",
        "root",
        "1.0",
        "Supervised auto (high risk approved)",
        f"active ({issued.raw[:10]}…)",
    ):
        assert text in listing
    for html in (listing, detail):
        assert issued.raw not in html
        assert Agent.objects.get(pk=agent.pk).token_hash not in html
    assert 'name="name"' not in detail
    assert 'name="trust_level"' not in detail


def test_adding_an_agent_in_the_admin_goes_through_agent_create() -> None:
    # given a superuser
    root = make_user("root", superuser=True)
    client = Client()
    client.force_login(root)

    # when an agent is added with the add form
    response = client.post(
        reverse("admin:cognition_agent_add"), {"name": "ranger", "owner": root.pk}
    )

    # then it exists without a token, owned by that user
    assert response.status_code == 302
    agent = Agent.objects.get(name="ranger")
    assert (agent.owner_id, agent.token_hash, agent.energy) == (root.pk, "", 1.0)


def test_issuing_a_token_in_the_admin_shows_it_once_and_stores_only_its_hash() -> None:
    # given an agent with a token already
    from cognition.models import hash_token
    from cognition.selectors import agent_by_token

    root = make_user("root", superuser=True)
    agent = make_agent("scout", owner=root)
    old = agent_issue_token(agent=agent, actor=root).raw
    client = Client()
    client.force_login(root)

    # when the "issue" action runs on it
    page = client.post(
        reverse("admin:cognition_agent_changelist"),
        {"action": "issue_api_token", "_selected_action": [agent.pk]},
    )

    # then the page shows the new token once, uncached; only its hash is stored
    assert page.status_code == 200
    assert "no-store" in page["Cache-Control"].split(", ")
    html = page.content.decode()
    start = html.index('<code class="agent-token">') + len('<code class="agent-token">')
    raw = html[start : html.index("</code>", start)]
    assert raw.startswith("mc_")
    stored = Agent.objects.get(pk=agent.pk)
    assert stored.token_hash == hash_token(raw) != raw
    assert agent_by_token(raw=raw) == stored
    assert agent_by_token(raw=old) is None
    # and no later page shows it
    for later in (
        client.get(reverse("admin:cognition_agent_changelist")),
        client.get(reverse("admin:cognition_agent_change", args=[agent.pk])),
    ):
        assert raw not in later.content.decode()
    listing = client.get(reverse("admin:cognition_agent_changelist")).content.decode()
    assert f"active ({raw[:10]}…)" in listing


def test_revoking_a_token_in_the_admin_stops_it_authenticating() -> None:
    from cognition.selectors import agent_by_token

    root = make_user("root", superuser=True)
    agent = make_agent("scout", owner=root)
    raw = agent_issue_token(agent=agent, actor=root).raw
    client = Client()
    client.force_login(root)

    response = client.post(
        reverse("admin:cognition_agent_changelist"),
        {"action": "revoke_api_token", "_selected_action": [agent.pk]},
        follow=True,
    )

    assert response.status_code == 200
    assert "Token revoked for: scout" in response.content.decode()
    assert agent_by_token(raw=raw) is None
    stored = Agent.objects.get(pk=agent.pk)
    assert (stored.token_hash, stored.token_revoked_at is not None) == ("", True)
    listing = client.get(reverse("admin:cognition_agent_changelist")).content.decode()
    assert "revoked" in listing


def test_a_staff_user_cannot_issue_or_revoke_tokens_of_an_agent_they_do_not_own() -> None:
    # given staff allowed to view agents, and someone else's agent with a token
    owner = make_user("owner", superuser=True)
    agent = make_agent("scout", owner=owner)
    raw = agent_issue_token(agent=agent, actor=owner).raw
    before = list(Agent.objects.values_list("token_hash", "token_revoked_at"))
    staff = make_user("staff", perms=["cognition.view_agent"])
    client = Client()
    client.force_login(staff)

    for action in ("issue_api_token", "revoke_api_token"):
        response = client.post(
            reverse("admin:cognition_agent_changelist"),
            {"action": action, "_selected_action": [agent.pk]},
            follow=True,
        )
        assert response.status_code == 200
        assert "only the owner or a superuser manages tokens" in response.content.decode()
        assert raw not in response.content.decode()

    # then nothing changed
    assert list(Agent.objects.values_list("token_hash", "token_revoked_at")) == before


def test_the_agent_list_shows_trust_for_relayed_consent() -> None:
    from cognition.services import agent_set_relayed_consent

    root = make_user("root", superuser=True)
    trusted = make_agent("scout", owner=root)
    make_agent("ranger", owner=root)
    agent_set_relayed_consent(agent=trusted, trusted=True, actor=root)
    client = Client()
    client.force_login(root)

    listing = client.get(reverse("admin:cognition_agent_changelist")).content.decode()

    assert "Trusted for relayed consent" in listing
    assert listing.count('alt="True"') == 1
    assert listing.count('alt="False"') == 1
