"""The review page with port-scoped allowlist entries (`host:port`): saved when valid, refused
with the egress rule when the proxy would refuse them, and shown with the ports each opens."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from skills.models import Policy, PolicyAuditEvent
from tests.skills.admin_support import (
    APPROVER_PERMS,
    fast_password_hashing,  # noqa: F401 - autouse fixture
    import_skill,
    make_agent,
    make_user,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def client() -> Client:
    client = Client()
    client.force_login(make_user("ann", perms=APPROVER_PERMS))
    return client


@pytest.fixture
def policy(tmp_path: Path) -> Policy:
    return import_skill(tmp_path, agent=make_agent("scout"))


def review_url(policy: Policy) -> str:
    return reverse("admin:skills_policy_review", args=[policy.pk])


def test_a_host_port_entry_is_saved_and_shown_with_its_port(client: Client, policy: Policy) -> None:
    # given a reviewed policy
    client.get(review_url(policy))
    # when an approver saves a port-scoped entry and a bare one
    client.post(
        review_url(policy),
        {"action": "save", "allowed_domains": "API.open-meteo.com:8443\nget.weather-tools.dev"},
    )
    # then both are stored in canonical form
    policy.refresh_from_db()
    assert policy.allowed_domains == ["api.open-meteo.com:8443", "get.weather-tools.dev"]
    # and the page says which ports each opens
    html = client.get(review_url(policy)).content.decode()
    allowed_now = re.search(r'<p id="allowed-now">(.*?)</p>', html, re.S)
    assert allowed_now is not None
    text = re.sub(r"<[^>]+>", "", allowed_now.group(1))
    assert " ".join(text.split()) == (
        "Allowed now: api.open-meteo.com:8443 (port 8443 only), "
        "get.weather-tools.dev (ports 443 and 80)"
    )
    # and the referenced host counts as allowed by its port-scoped entry
    row = re.search(r"<tr[^>]*>\s*<td><code>api\.open-meteo\.com</code></td>.*?</tr>", html, re.S)
    assert row is not None
    assert 'class="mc-mismatch"' not in row.group(0)
    assert '<span class="mc-declared">yes</span>' in row.group(0)


@pytest.mark.parametrize(
    ("entry", "rule"),
    [("*", "wildcard_form"), ("api.open-meteo.com:0", "invalid_port"), ("a::b", "ipv6_brackets")],
)
def test_an_entry_the_proxy_would_refuse_is_not_saved(
    client: Client, policy: Policy, entry: str, rule: str
) -> None:
    # given a reviewed policy
    client.get(review_url(policy))
    events = PolicyAuditEvent.objects.filter(policy=policy).count()
    # when the entry is saved next to a good one
    response = client.post(
        review_url(policy), {"action": "save", "allowed_domains": f"api.open-meteo.com\n{entry}"}
    )
    # then the page names the entry and the egress rule, and nothing changed
    html = response.content.decode()
    assert "The policy was not saved:" in html
    assert f"(rule: {rule})" in html
    policy.refresh_from_db()
    assert policy.allowed_domains == []
    assert PolicyAuditEvent.objects.filter(policy=policy).count() == events
