"""Everything under /api/ answers with the JSON error body, including what Django answers itself
(no route, a path converter that does not match, a method no view takes, a crash outside a DRF
view), in production and in DEBUG; an invalid pagination cursor is a documented 400."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import path
from django.views.decorators.http import require_POST

from cognition.models import Conversation
from config.urls import urlpatterns as project_urls

from .conftest import World, bearer

pytestmark = pytest.mark.django_db

ERROR_KEYS = {"code", "message", "details"}


def crash(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("password=hunter2 at /srv/secret")


@require_POST
def post_only(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


# The project's routes plus two plain Django views under /api/ (a crash, a POST-only view).
urlpatterns = [
    path("api/test-crash/", crash),
    path("api/test-post-only/", post_only),
    *project_urls,
]


@pytest.fixture(params=[False, True], ids=["production", "debug"])
def debug(request, settings) -> bool:
    settings.DEBUG = request.param
    return request.param


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/schedules/abc/",
        "/api/v1/schedules/1.5/enable/",
        "/api/v1/tokens/-5/",
        "/api/v1/conversations/x/messages/",
        "/api/v1/nope/",
        "/api/v2/skills/",
        "/api/nope",
    ],
)
def test_a_path_no_route_matches_is_a_json_404(world: World, debug: bool, url: str) -> None:
    for client in (bearer(world.alpha_token), Client()):
        response = client.get(url)

        assert response.status_code == 404
        assert response.headers["Content-Type"] == "application/json"
        assert response.json() == {
            "error": {
                "code": "not_found",
                "message": f"No API endpoint at {url}: see /api/docs/ for the routes.",
                "details": {"path": url},
            }
        }


def test_outside_the_api_the_404_stays_a_page(debug: bool) -> None:
    response = Client().get("/nope/")
    assert response.status_code == 404
    assert response.headers["Content-Type"].startswith("text/html")


def test_a_missing_trailing_slash_still_redirects(world: World) -> None:
    response = bearer(world.alpha_token).get("/api/v1/skills")
    assert response.status_code == 301
    assert response.headers["Location"] == "/api/v1/skills/"


@pytest.mark.urls(__name__)
def test_a_method_no_view_takes_is_a_json_405(world: World, debug: bool) -> None:
    for url in ("/api/test-post-only/", "/api/v1/agents/me/", "/api/schema/"):
        response = bearer(world.alpha_token).delete(url)

        assert response.status_code == 405, url
        assert response.headers["Content-Type"] == "application/json"
        error = response.json()["error"]
        assert set(error) == ERROR_KEYS
        assert error["code"] == "method_not_allowed"


@pytest.mark.urls(__name__)
def test_a_crash_outside_a_drf_view_is_a_json_500_naming_nothing(debug: bool) -> None:
    response = Client(raise_request_exception=False).get("/api/test-crash/")

    assert response.status_code == 500
    assert response.headers["Content-Type"] == "application/json"
    assert response.json() == {
        "error": {
            "code": "internal_error",
            "message": "The server failed to handle this request.",
            "details": {},
        }
    }


NAME_ORDERED = ["/api/v1/skills/", "/api/v1/credentials/", "/api/v1/agents/"]
ID_OR_TIME_ORDERED = [
    "/api/v1/runs/",
    "/api/v1/schedules/",
    "/api/v1/conversations/",
    "/api/v1/conversations/{conversation}/messages/",
    "/api/v1/audit/",
]
GARBLED = [
    "zzz",  # not base64
    "%00",  # a NUL
    "cD1h%00",  # base64 with a NUL inside
    "bz1hYmM=",  # o=abc: an offset that is not a number
    "cj14",  # r=x: a direction that is not 0 or 1
    "cD0lMDA=",  # p=%00: a position holding a NUL
]
NOT_A_POSITION_OF_THE_FIELD = [
    "cD1hYmM=",  # p=abc
    "cD05OTk5OTk5OTk5OTk5OTk5OTk5OTk5",  # p=9999999999999999999999
]


@pytest.mark.parametrize(
    ("url", "cursor"),
    [(url, c) for url in NAME_ORDERED + ID_OR_TIME_ORDERED for c in GARBLED]
    + [(url, c) for url in ID_OR_TIME_ORDERED for c in NOT_A_POSITION_OF_THE_FIELD],
)
def test_an_invalid_cursor_is_a_400_naming_the_parameter(
    world: World, url: str, cursor: str
) -> None:
    conversation = Conversation.objects.create(agent=world.alpha, user=world.olivia)
    url = url.format(conversation=conversation.pk)

    response = bearer(world.alpha_token).get(f"{url}?cursor={cursor}")

    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"] == {
        "code": "invalid",
        "message": "The request is invalid: cursor: Invalid cursor: pass the `next` or "
        "`previous` link of a page as it was given.",
        "details": {
            "fields": {
                "cursor": [
                    "Invalid cursor: pass the `next` or `previous` link of a page as it was given."
                ]
            }
        },
    }


def test_the_cursors_a_list_hands_out_page_through_it(world: World) -> None:
    for n in range(3):
        Conversation.objects.create(agent=world.alpha, user=world.olivia, title=f"c{n}")
    client = bearer(world.alpha_token)
    seen: list[str] = []
    url = "/api/v1/conversations/?page_size=1"
    while url:
        page = client.get(url).json()
        seen += [c["title"] for c in page["results"]]
        url = page["next"]
    assert seen == ["c2", "c1", "c0"]


def test_the_schema_documents_the_400_of_every_cursor(tmp_path: Path) -> None:
    target = tmp_path / "schema.yaml"
    call_command("spectacular", "--file", str(target))
    paths = yaml.safe_load(target.read_text())["paths"]
    paginated = [
        (url, op)
        for url, operations in paths.items()
        for op in operations.values()
        if any(p["name"] == "cursor" for p in op.get("parameters", []))
    ]
    assert len(paginated) == 9  # the lists above and a schedule's occurrences
    for url, operation in paginated:
        assert "400" in operation["responses"], url
        cursor = next(p for p in operation["parameters"] if p["name"] == "cursor")
        assert "an invalid cursor is a 400" in cursor["description"], url


def test_a_host_header_the_server_refuses_is_a_json_400(world: World) -> None:
    # given a request under /api/ whose Host header names no allowed host (Django refuses it
    # before any view, in CommonMiddleware)
    response = bearer(world.alpha_token).post(
        "/api/v1/runs/nope/respond/", {"answer": "x"}, format="json", HTTP_HOST="!?"
    )
    # then the answer is the API's JSON error body, not Django's HTML page
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == "malformed_request"
