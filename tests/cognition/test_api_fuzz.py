"""Property-based calls generated from the OpenAPI schema (schemathesis): whatever an agent or a
human sends, the API answers without a server error and with the documented error shape."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings

from cognition.services import credential_set, personal_token_create
from skills.imports import skill_import_pasted
from skills.services import Actor
from tests.skills.admin_support import make_user

from .conftest import World, skill_md

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", get_wsgi_application())

FUZZ = settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(autouse=True)
def keep_the_test_connection(seeded: World) -> Iterator[None]:
    """Calls go through the WSGI handler, which closes the DB connection after each request (and
    with it the test's transaction); Django's own test client detaches the same receiver."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture(autouse=True)
def bounded_signal_waits(settings) -> None:
    """The long-poll and the event stream answer at once here: a generated `wait=30` or a stream
    must not hold each example for half a minute. Their waiting is tested in test_api_signals."""
    settings.MOTOR_SIGNAL_LONG_POLL_MAX_SECONDS = 0
    settings.MOTOR_SIGNAL_STREAM_MAX_SECONDS = 0


@pytest.fixture
def seeded(world: World) -> World:
    """Alpha with a skill and a vault credential, so generated names sometimes hit real rows."""
    skill_import_pasted(text=skill_md("mailer"), actor=Actor.system("test"), agent=world.alpha)
    credential_set(agent=world.alpha, name="TOKEN", value="x", actor=None)
    return world


@schema.parametrize()
@FUZZ
def test_no_generated_agent_call_is_a_server_error(case, seeded: World) -> None:
    response = case.call(headers={"Authorization": f"Bearer {seeded.alpha_token}"})
    assert response.status_code < 500, (case.method, case.formatted_path, response.text[:500])
    if response.status_code >= 400 and response.headers.get("Content-Type", "").startswith(
        "application/json"
    ):
        assert set(response.json()) == {"error"}
        assert set(response.json()["error"]) == {"code", "message", "details"}


@pytest.fixture
def superuser_token(seeded: World) -> str:
    root = make_user("root", superuser=True)
    return personal_token_create(user=root, name="fuzz", actor=root).raw


@schema.parametrize()
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_no_generated_superuser_call_is_a_server_error(case, superuser_token: str) -> None:
    response = case.call(headers={"Authorization": f"Bearer {superuser_token}"})
    assert response.status_code < 500, (case.method, case.formatted_path, response.text[:500])
