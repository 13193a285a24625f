"""A person's first API token from the admin: issued for themselves, shown once, stored hashed."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connection
from django.test import Client
from playwright.sync_api import Page, expect

from cognition.models import PersonalToken, hash_token
from tests.skills.admin_support import (
    PASSWORD,
    fast_password_hashing,  # noqa: F401 - autouse fixture
    make_user,
)

from .conftest import bearer

ISSUE_URL = "/admin/cognition/personaltoken/issue/"


def _token_columns() -> list[tuple[object, ...]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM cognition_personaltoken")
        return cursor.fetchall()


@pytest.mark.django_db
def test_a_staff_user_issues_a_token_for_themselves_shown_once() -> None:
    # given a staff user with no token and no special permission
    staff = make_user("stella")
    client = Client()
    client.force_login(staff)
    # when they open the issue page and submit a name
    assert client.get(ISSUE_URL).status_code == 200
    page = client.post(ISSUE_URL, {"name": "laptop"})
    # then the page shows the token once, uncached
    assert page.status_code == 200
    assert "no-store" in page["Cache-Control"].split(", ")
    html = page.content.decode()
    start = html.index('<code class="personal-token">') + len('<code class="personal-token">')
    raw = html[start : html.index("</code>", start)]
    assert raw.startswith("mcp_")
    # and only its hash is stored, for that user
    token = PersonalToken.objects.get()
    assert (token.user_id, token.name, token.token_hash) == (staff.pk, "laptop", hash_token(raw))
    assert not any(raw in str(value) for row in _token_columns() for value in row)
    # and it authenticates as that person on the API, without a session or CSRF
    listing = bearer(raw).get("/api/v1/tokens/")
    assert listing.status_code == 200
    assert [t["name"] for t in listing.json()] == ["laptop"]
    # and no later page shows it
    assert raw not in client.get(ISSUE_URL).content.decode()


@pytest.mark.django_db
def test_a_token_without_a_name_is_refused_and_nothing_is_stored() -> None:
    staff = make_user("stella")
    client = Client()
    client.force_login(staff)
    page = client.post(ISSUE_URL, {"name": ""})
    assert page.status_code == 200
    assert "This field is required." in page.content.decode()
    assert PersonalToken.objects.count() == 0


@pytest.mark.django_db
def test_people_outside_the_admin_cannot_issue_one() -> None:
    # given an anonymous visitor and a person who is not staff
    person = make_user("paul", is_staff=False)
    anonymous = Client()
    outsider = Client()
    outsider.force_login(person)
    # when they post to the issue page
    for client in (anonymous, outsider):
        response = client.post(ISSUE_URL, {"name": "sneaky"})
        # then they are sent to the admin login and nothing is issued
        assert response.status_code == 302
        assert response["Location"].startswith("/admin/login/")
    assert PersonalToken.objects.count() == 0


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_button_on_the_token_list_issues_one_in_the_browser(
    page: Page, admin_login, artifacts_dir: Path
) -> None:
    # given a staff user who may view the token list
    make_user("stella", perms=["cognition.view_personaltoken"])
    admin_login("stella", PASSWORD)
    # when they click the button on the list and issue a token named "laptop"
    page.goto("/admin/cognition/personaltoken/")
    page.click("#issue-personal-token")
    page.fill("#id_name", "laptop")
    page.screenshot(path=str(artifacts_dir / "admin-personal-token-form.png"))
    page.click("#issue-token")
    # then the token is on the page, once
    token = page.locator("code.personal-token")
    expect(token).to_have_count(1)
    raw = token.inner_text()
    assert raw.startswith("mcp_")
    page.screenshot(path=str(artifacts_dir / "admin-personal-token-issued.png"))
    assert PersonalToken.objects.get().token_hash == hash_token(raw)
    # and the list shows it by its prefix only
    page.goto("/admin/cognition/personaltoken/")
    expect(page.locator("#result_list")).to_contain_text(raw[:10])
    assert raw not in page.content()
