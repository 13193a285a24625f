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
    for text in ("scout", "root", "1.0", "Standard", f"active ({issued.raw[:10]}…)"):
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
