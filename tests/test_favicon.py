"""Every page's browser asks for /favicon.ico; a 404 there is an error in every page's console."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_favicon_is_served_to_anyone_as_an_svg_icon(client: Client) -> None:
    # when a browser asks for the site's icon, logged in or not
    response = client.get("/favicon.ico")

    # then it gets an SVG image it may cache for a day
    assert response.status_code == 200
    assert response["Content-Type"] == "image/svg+xml"
    assert response.content.startswith(b"<svg ")
    assert response.content.rstrip().endswith(b"</svg>")
    assert "max-age=86400" in response["Cache-Control"]


def test_favicon_refuses_writes(client: Client) -> None:
    # when something posts to the icon's address, then it is refused without side effects
    assert client.post("/favicon.ico").status_code == 405
