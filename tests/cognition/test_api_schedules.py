"""/api/v1/schedules/: CRUD with agent tokens and humans, the consent gate both ways, per-agent
isolation, bad input naming field and rule with nothing written, and the occurrences list."""
# ruff: noqa: F811 - pytest fixtures imported from core_support are parameters here

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

from cognition.models import Agent, Schedule, ScheduleOccurrence
from cognition.schedule_firing import schedule_fire
from cognition.schedules import schedule_create
from runs.models import Signal

from .conftest import World, bearer
from .core_support import _clean_mutex_keys, skill_in_status  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db

USER_MESSAGE = {"HTTP_X_MOTOR_TRIGGER": "user_message"}
BODY = {"skill": "weather-report", "task": "Report the weather", "interval_seconds": 3600}


@pytest.fixture
def skill(world: World, tmp_path: Path):
    return skill_in_status(
        tmp_path / "src", agent=world.alpha, approver=world.olivia, status="approved"
    )


def _trust(agent: Agent) -> None:
    Agent.objects.filter(pk=agent.pk).update(trusted_for_relayed_consent=True)


def _rows() -> tuple[int, int, int, int]:
    return (
        Schedule.objects.count(),
        PeriodicTask.objects.count(),
        CrontabSchedule.objects.count(),
        IntervalSchedule.objects.count(),
    )


def _beat_state() -> list[tuple]:
    return sorted(
        PeriodicTask.objects.values_list("name", "enabled", "interval_id", "crontab_id", "args")
    )


def _schedule_state() -> list[dict]:
    return list(Schedule.objects.order_by("id").values())


def _existing(world: World) -> Schedule:
    return schedule_create(
        agent=world.alpha,
        skill="weather-report",
        task="Report the weather",
        interval_seconds=3600,
        actor=world.olivia,
    )


def test_an_agent_without_relayed_consent_cannot_create_a_schedule(world, skill):
    for headers in ({}, USER_MESSAGE, {"HTTP_X_MOTOR_TRIGGER": "schedule"}):
        response = bearer(world.alpha_token).post(
            "/api/v1/schedules/", BODY, format="json", **headers
        )
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "consent_required"
        assert response.json()["error"]["details"]["action"] == "schedule.create"
    assert _rows() == (0, 0, 0, 0)


def test_a_trusted_agent_relaying_a_user_message_creates_one(world, skill):
    _trust(world.alpha)
    response = bearer(world.alpha_token).post(
        "/api/v1/schedules/",
        {**BODY, "inputs": {"city": "Berlin"}},
        format="json",
        **USER_MESSAGE,
    )
    assert response.status_code == 201, response.json()
    data = response.json()
    schedule = Schedule.objects.get()
    assert data == {
        "id": schedule.pk,
        "agent": "alpha",
        "skill": "weather-report",
        "task": "Report the weather",
        "inputs": {"city": "Berlin"},
        "crontab": None,
        "interval_seconds": 3600,
        "timezone": "UTC",
        "enabled": True,
        "periodic_task": f"motor-schedule-{schedule.pk}",
        "created_by": "agent:alpha",
        "created_at": schedule.created_at.isoformat(),
        "updated_at": schedule.updated_at.isoformat(),
        "last_occurrence": None,
        "next_fire_at": data["next_fire_at"],
    }
    assert data["next_fire_at"] is not None
    assert schedule.created_by is None
    assert PeriodicTask.objects.get().enabled is True


def test_a_human_creates_a_crontab_schedule_without_a_trigger(
    world, skill, session_client: Callable
):
    response = session_client(world.olivia).post(
        "/api/v1/schedules/?agent=alpha",
        {
            "skill": "weather-report",
            "task": "Morning weather",
            "crontab": "0 7 * * mon-fri",
            "timezone": "Europe/Berlin",
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert (response.json()["crontab"], response.json()["timezone"]) == (
        "0 7 * * mon-fri",
        "Europe/Berlin",
    )
    schedule = Schedule.objects.get()
    assert (schedule.created_by, schedule.created_by_label) == (world.olivia, "api:olivia")
    assert str(PeriodicTask.objects.get().crontab.timezone) == "Europe/Berlin"


@pytest.mark.parametrize(
    ("change", "field", "rule"),
    [
        ({"interval_seconds": None, "crontab": "99 * * * *"}, "crontab", "crontab_syntax"),
        ({"interval_seconds": 0}, "interval_seconds", "positive_integer"),
        ({"interval_seconds": -1}, "interval_seconds", "positive_integer"),
        ({"skill": "unknown-skill"}, "skill", "known_skill"),
        ({"task": ""}, "task", "not_empty"),
        ({"task": "   "}, "task", "not_empty"),
        ({"timezone": "Nowhere/City"}, "timezone", "known_timezone"),
    ],
)
def test_bad_input_is_a_400_naming_field_and_rule_and_writes_nothing(
    world, skill, session_client: Callable, change, field, rule
):
    response = session_client(world.olivia).post(
        "/api/v1/schedules/", {**BODY, **change}, format="json"
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "schedule_invalid"
    assert (error["details"]["field"], error["details"]["rule"]) == (field, rule)
    assert error["message"].startswith(f"{field}: ")
    assert _rows() == (0, 0, 0, 0)


def test_a_missing_field_is_a_400_naming_it(world, skill, session_client: Callable):
    response = session_client(world.olivia).post(
        "/api/v1/schedules/", {"task": "Report the weather", "interval_seconds": 60}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"
    assert list(response.json()["error"]["details"]["fields"]) == ["skill"]
    assert _rows() == (0, 0, 0, 0)


def test_an_unknown_agent_is_a_404_and_writes_nothing(world, skill, session_client: Callable):
    response = session_client(world.olivia).post(
        "/api/v1/schedules/?agent=nobody", BODY, format="json"
    )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "agent_not_found"
    assert response.json()["error"]["details"] == {"agent": "nobody"}
    assert _rows() == (0, 0, 0, 0)


def test_another_agent_sees_nothing_and_changes_nothing(world, skill):
    schedule = _existing(world)
    before = (_schedule_state(), _beat_state())
    other = bearer(world.bravo_token)
    _trust(world.bravo)
    base = f"/api/v1/schedules/{schedule.pk}/"
    calls = [
        other.get(base),
        other.patch(base, {"task": "mine now"}, format="json", **USER_MESSAGE),
        other.delete(base),
        other.post(base + "disable/"),
        other.post(base + "enable/", **USER_MESSAGE),
        other.get(base + "occurrences/"),
    ]
    for response in calls:
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "schedule_not_found"
    assert other.get("/api/v1/schedules/").json()["results"] == []
    assert (_schedule_state(), _beat_state()) == before


def test_update_is_gated_and_a_denied_update_changes_nothing(world, skill):
    schedule = _existing(world)
    before = (_schedule_state(), _beat_state())
    response = bearer(world.alpha_token).patch(
        f"/api/v1/schedules/{schedule.pk}/", {"crontab": "0 9 * * *"}, format="json"
    )
    assert response.status_code == 403
    assert response.json()["error"]["details"]["action"] == "schedule.update"
    assert (_schedule_state(), _beat_state()) == before


def test_a_human_switches_a_schedule_to_a_crontab(world, skill, session_client: Callable):
    schedule = _existing(world)
    response = session_client(world.olivia).patch(
        f"/api/v1/schedules/{schedule.pk}/?agent=alpha",
        {"crontab": "15 9 * * *", "inputs": {"city": "Paris"}},
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert (
        response.json()["crontab"],
        response.json()["interval_seconds"],
        response.json()["inputs"],
    ) == ("15 9 * * *", None, {"city": "Paris"})
    task = PeriodicTask.objects.get()
    assert (task.interval, task.crontab.minute, task.crontab.hour) == (None, "15", "9")


def test_an_agent_may_disable_and_delete_but_enabling_is_gated(world, skill):
    schedule = _existing(world)
    client = bearer(world.alpha_token)
    base = f"/api/v1/schedules/{schedule.pk}/"
    # disabling needs no consent
    disabled = client.post(base + "disable/")
    assert disabled.status_code == 200
    assert (disabled.json()["enabled"], disabled.json()["next_fire_at"]) == (False, None)
    assert PeriodicTask.objects.get().enabled is False
    # enabling does
    refused = client.post(base + "enable/")
    assert refused.status_code == 403
    assert refused.json()["error"]["details"]["action"] == "schedule.enable"
    assert (Schedule.objects.get().enabled, PeriodicTask.objects.get().enabled) == (False, False)
    _trust(world.alpha)
    assert client.post(base + "enable/", **USER_MESSAGE).json()["enabled"] is True
    assert PeriodicTask.objects.get().enabled is True
    # deleting needs no consent and removes the beat row
    assert client.delete(base).status_code == 204
    assert _rows()[:2] == (0, 0)


def test_occurrences_list_the_skips_with_their_reason_newest_first(world, skill):
    # given no WEATHER_TOKEN anywhere, so each fire is skipped
    schedule = _existing(world)
    schedule_fire(schedule_id=schedule.pk)
    schedule_fire(schedule_id=schedule.pk)
    client = bearer(world.alpha_token)
    page = client.get(f"/api/v1/schedules/{schedule.pk}/occurrences/").json()
    occurrences = list(ScheduleOccurrence.objects.order_by("-id"))
    assert [(o["outcome"], o["reason"], o["run_id"]) for o in page["results"]] == [
        ("skipped", "credentials_missing", None),
        ("skipped", "credentials_missing", None),
    ]
    assert [o["id"] for o in page["results"]] == [o.pk for o in occurrences]
    assert [o["signal_id"] for o in page["results"]] == list(
        Signal.objects.filter(kind="schedule_skipped").order_by("-id").values_list("id", flat=True)
    )
    detail = client.get(f"/api/v1/schedules/{schedule.pk}/").json()
    assert detail["last_occurrence"]["id"] == occurrences[0].pk
    assert detail["last_occurrence"]["reason"] == "credentials_missing"
    listed = client.get("/api/v1/schedules/").json()["results"]
    assert [s["id"] for s in listed] == [schedule.pk]


def test_a_human_gets_404_for_schedules_of_agents_they_do_not_own(
    world, skill, session_client: Callable
):
    schedule = _existing(world)
    bob = session_client(world.bob)
    response = bob.get(f"/api/v1/schedules/{schedule.pk}/?agent=alpha")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "agent_not_found"
    response = bob.get(f"/api/v1/schedules/{schedule.pk}/?agent=bravo")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "schedule_not_found"


def test_the_schema_documents_the_gate_on_gated_schedule_calls(tmp_path):
    target = tmp_path / "schema.yaml"
    call_command("spectacular", "--file", str(target))
    paths = yaml.safe_load(target.read_text())["paths"]

    def headers(path: str, method: str) -> list[str]:
        return [p["name"] for p in paths[path][method]["parameters"] if p["in"] == "header"]

    assert headers("/api/v1/schedules/", "post") == ["X-Motor-Trigger"]
    assert headers("/api/v1/schedules/{schedule_id}/", "patch") == ["X-Motor-Trigger"]
    assert headers("/api/v1/schedules/{schedule_id}/enable/", "post") == ["X-Motor-Trigger"]
    assert headers("/api/v1/schedules/{schedule_id}/disable/", "post") == []
    assert set(paths["/api/v1/schedules/"]["post"]["responses"]) == {
        "201",
        "400",
        "401",
        "403",
        "404",
    }


def _listed_with_queries(client) -> tuple[list[dict], int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        response = client.get("/api/v1/schedules/")
    assert response.status_code == 200
    return response.json()["results"], len(queries.captured_queries)


def test_the_schedule_list_shows_each_last_occurrence_at_a_cost_that_does_not_grow_per_row(
    world, skill
):
    # given two schedules, one cron and one interval, each fired (skipped: no credential)
    client = bearer(world.alpha_token)
    first = _existing(world)
    schedule_create(
        agent=world.alpha, skill="weather-report", task="t", crontab="0 7 * * *", actor=world.olivia
    )
    for schedule in Schedule.objects.all():
        schedule_fire(schedule_id=schedule.pk)
    schedule_fire(schedule_id=first.pk)
    listed, few = _listed_with_queries(client)
    # when three more fired schedules are added
    for hour in (8, 9, 10):
        added = schedule_create(
            agent=world.alpha,
            skill="weather-report",
            task="t",
            crontab=f"0 {hour} * * *",
            actor=world.olivia,
        )
        schedule_fire(schedule_id=added.pk)
    more, many = _listed_with_queries(client)
    # then the list costs the same number of queries, and each row has its own latest occurrence
    assert (len(listed), len(more)) == (2, 5)
    assert many == few
    latest = {
        s.pk: s.occurrences.order_by("-fired_at", "-id").first().pk for s in Schedule.objects.all()
    }
    assert {row["id"]: row["last_occurrence"]["id"] for row in more} == latest
    assert {row["last_occurrence"]["reason"] for row in more} == {"credentials_missing"}


def _with_input_schema(policy) -> None:
    from skills.policy_edits import policy_update
    from skills.services import Actor

    policy_update(
        policy=policy,
        actor=Actor.system("test"),
        inputs={
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"],
        },
    )


def test_inputs_that_fail_the_skills_schema_are_a_400_naming_each_field_at_create(
    world, skill, session_client: Callable
):
    # given a skill whose input schema needs a city (text) and days (an integer)
    _with_input_schema(skill)
    energy = Agent.objects.get(pk=world.alpha.pk).energy
    # when a schedule is created with days of the wrong type and no city
    response = session_client(world.olivia).post(
        "/api/v1/schedules/", {**BODY, "inputs": {"days": "three"}}, format="json"
    )
    # then a 400 names both fields and their rules; nothing was written or drained
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["details"]["field"], error["details"]["rule"]) == (
        "schedule_invalid",
        "inputs",
        "input_schema",
    )
    assert [(e["field"], e["rule"]) for e in error["details"]["errors"]] == [
        ("$.city", "required"),
        ("$.days", "type"),
    ]
    assert error["message"] == (
        "inputs: do not match the input schema of skill 'weather-report': $.city (required), "
        "$.days (type)"
    )
    assert _rows() == (0, 0, 0, 0)
    assert Agent.objects.get(pk=world.alpha.pk).energy == energy
    # and valid inputs are accepted
    ok = session_client(world.olivia).post(
        "/api/v1/schedules/", {**BODY, "inputs": {"city": "Berlin", "days": 3}}, format="json"
    )
    assert ok.status_code == 201, ok.json()


def test_inputs_that_fail_the_skills_schema_are_refused_at_update_too(
    world, skill, session_client: Callable
):
    # given a schedule stored with valid inputs
    _with_input_schema(skill)
    client = session_client(world.olivia)
    created = client.post(
        "/api/v1/schedules/", {**BODY, "inputs": {"city": "Berlin", "days": 3}}, format="json"
    )
    base = f"/api/v1/schedules/{created.json()['id']}/"
    before, beat = _schedule_state(), _beat_state()
    # when an update gives days as text
    response = client.patch(base, {"inputs": {"city": "Berlin", "days": "3"}}, format="json")
    # then it is refused naming the field, and the schedule and its beat row are unchanged
    assert response.status_code == 400
    assert [(e["field"], e["rule"]) for e in response.json()["error"]["details"]["errors"]] == [
        ("$.days", "type")
    ]
    assert (_schedule_state(), _beat_state()) == (before, beat)
