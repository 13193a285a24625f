"""Property-based calls generated from the OpenAPI schema (schemathesis), with every check it has,
as an agent and as a person: no server error, every answer as documented (status, content type,
headers, body), every call the schema calls invalid refused and every call it calls valid
accepted, so that schema and validation say the same thing.

The example budget is bounded (a couple of minutes on two cores); a regression in either the
schema or the validation fails the suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
import schemathesis.specs.openapi.checks as openapi_checks
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import CHECKS

from cognition.services import credential_set, personal_token_create
from skills.imports import skill_import_pasted
from skills.services import Actor

from .conftest import World, skill_md

pytestmark = [pytest.mark.django_db, pytest.mark.slow, pytest.mark.one_process]

schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", get_wsgi_application())

ALL_CHECKS = CHECKS.get_all()

# Rules no JSON Schema can state, so a schema-valid value may still be refused with a 400 that
# names the rule; for these operations the "valid data is accepted" check cannot hold:
# - a pasted SKILL.md is judged by the bundle validator (frontmatter, name, description, …);
# - a run's tools, domains and skill are judged against the tool table, the egress policy's
#   parser and the agent's policies;
# - a schedule's crontab, time zone (IANA) and skill (one of the agent's) likewise.
RULES_BEYOND_THE_SCHEMA = {
    "POST /api/v1/skills/",
    "POST /api/v1/runs/",
    "POST /api/v1/schedules/",
    "PATCH /api/v1/schedules/{schedule_id}/",
}


def budget(examples: int) -> settings:
    # Derandomized: the same examples on every run, so a failure is a regression, never luck.
    return settings(
        max_examples=examples,
        derandomize=True,
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


def call_and_check(case, token: str) -> None:
    # A cursor is opaque: only the ones the server hands out are valid, which no schema can
    # say (test_api_error_pages covers invalid ones), so generated calls send none.
    if case.query:
        case.query.pop("cursor", None)
    excluded = []
    if f"{case.method} {case.path}" in RULES_BEYOND_THE_SCHEMA:
        excluded.append(openapi_checks.positive_data_acceptance)
    case.call_and_validate(
        headers={"Authorization": f"Bearer {token}"}, checks=ALL_CHECKS, excluded_checks=excluded
    )


@schema.parametrize()
@budget(4)
def test_generated_agent_calls_are_answered_as_documented(case, seeded: World) -> None:
    call_and_check(case, seeded.alpha_token)


@pytest.fixture
def person_token(seeded: World) -> str:
    """Olivia, who owns alpha and may approve skills: a person's personal access token."""
    return personal_token_create(user=seeded.olivia, name="fuzz", actor=seeded.olivia).raw


@schema.parametrize()
@budget(3)
def test_generated_person_calls_are_answered_as_documented(case, person_token: str) -> None:
    call_and_check(case, person_token)
