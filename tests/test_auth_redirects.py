"""Logging in and out lands on real pages: no redirect goes to Django's /accounts/ defaults."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.shortcuts import resolve_url
from django.test import Client

pytestmark = pytest.mark.django_db

PASSWORD = "correct-horse-battery-9"  # noqa: S105 - test login


@pytest.fixture
def person() -> User:
    return User.objects.create_user("nina", password=PASSWORD)


def _log_in(client: Client, url: str = "/chat/login/"):
    return client.post(url, {"username": "nina", "password": PASSWORD})


def test_login_without_next_lands_on_the_chat(client: Client, person: User) -> None:
    # when a person logs in on the chat's login page without ?next=
    response = _log_in(client)
    # then they are sent to the chat, which answers
    assert response.status_code == 302
    assert response["Location"] == "/chat/"
    assert client.get(response["Location"]).status_code == 200


def test_log_out_then_in_again_lands_on_the_chat(client: Client, person: User) -> None:
    # given a person logged in
    assert _log_in(client).status_code == 302
    # when they log out from the chat
    out = client.post("/chat/logout/")
    # then they see the login page again (no ?next= on it) ...
    assert out.status_code == 302
    assert out["Location"] == "/chat/login/"
    assert client.get(out["Location"]).status_code == 200
    # ... and logging in there takes them to the chat
    again = _log_in(client, out["Location"])
    assert again["Location"] == "/chat/"
    assert client.get("/chat/").status_code == 200


def test_an_anonymous_visitor_of_the_chat_is_sent_to_its_login(client: Client) -> None:
    response = client.get("/chat/")
    assert response.status_code == 302
    assert response["Location"] == "/chat/login/?next=%2Fchat%2F"


@pytest.mark.parametrize("name", ["LOGIN_URL", "LOGIN_REDIRECT_URL", "LOGOUT_REDIRECT_URL"])
def test_every_auth_redirect_setting_names_a_page_that_answers(
    client: Client, person: User, name: str
) -> None:
    # given the URL a Django auth setting resolves to
    url = resolve_url(getattr(settings, name))
    assert not url.startswith("/accounts/")
    # then the page answers with 200 the person who is sent there: logged in after a login,
    # anonymous for the login page and after a logout
    if name == "LOGIN_REDIRECT_URL":
        client.force_login(person)
    assert client.get(url).status_code == 200


def test_logging_out_of_the_admin_lands_on_the_landing_page(client: Client) -> None:
    # given a staff user in the admin
    staff = User.objects.create_user("sam", password=PASSWORD, is_staff=True)
    client.force_login(staff)
    # when they log out there
    out = client.post("/admin/logout/")
    # then they land on the landing page, which links the chat and the admin login
    assert (out.status_code, out["Location"]) == (302, "/")
    landing = client.get("/").content.decode()
    assert 'href="/chat/"' in landing and 'href="/admin/"' in landing
    assert "_auth_user_id" not in client.session


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_logging_in_on_the_chat_page_in_the_browser_opens_the_chat(page, artifacts_dir) -> None:
    # given a person and the chat's login page opened directly (no ?next=)
    from playwright.sync_api import expect

    User.objects.create_user("nina", password=PASSWORD)
    page.goto("/chat/login/")
    # when they log in
    page.fill("#id_username", "nina")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    # then the chat opens
    expect(page.locator("h1")).to_have_text("Talk to your agent")
    assert page.url.endswith("/chat/")
    page.screenshot(path=str(artifacts_dir / "chat-after-login.png"))
