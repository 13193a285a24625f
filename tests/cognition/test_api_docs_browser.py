"""/api/docs/ in headless Chromium with no network beyond this server: Swagger UI is served by the
project itself (drf-spectacular-sidecar) and renders the API's operations."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Page, Route, expect
from pytest_django.live_server_helper import LiveServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_swagger_ui_renders_the_operations_offline(
    page: Page, live_server: LiveServer, artifacts_dir: Path
) -> None:
    # given a browser that reaches nothing but this server (every other request is refused)
    own = urlsplit(live_server.url).netloc
    elsewhere: list[str] = []

    def only_this_server(route: Route) -> None:
        if urlsplit(route.request.url).netloc == own:
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort("internetdisconnected")

    page.context.route("**/*", only_this_server)

    # when it opens the API docs
    page.goto("/api/docs/")

    # then Swagger UI shows the API's title and its operations, loaded from this server only
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Motor Cortex API")
    runs_list = page.locator(".opblock-get", has_text="/api/v1/runs/").first
    expect(runs_list).to_be_visible()
    assert page.locator(".opblock").count() > 20
    page.screenshot(path=str(artifacts_dir / "api-docs-offline.png"), full_page=False)
    assert elsewhere == []
