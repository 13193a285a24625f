"""Schedules in the admin console: add and change through the services (crontab or interval),
errors naming field and rule with nothing written, actions, delete, outcome and next fire time."""
# ruff: noqa: F811 - pytest fixtures imported from core_support are parameters here

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

from cognition.models import Schedule
from cognition.schedule_firing import schedule_fire
from cognition.schedules import schedule_create
from tests.skills.admin_support import (
    APPROVER_PERMS,
    fast_password_hashing,  # noqa: F401 - autouse fixture
    make_agent,
    make_user,
)

from .core_support import _clean_mutex_keys, skill_in_status  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db


@pytest.fixture
def root():
    return make_user("root", superuser=True)


@pytest.fixture
def agent(root, tmp_path: Path):
    approver = make_user("approver", perms=APPROVER_PERMS)
    scout = make_agent("scout", owner=root)
    skill_in_status(tmp_path / "src", agent=scout, approver=approver, status="approved")
    return scout


@pytest.fixture
def client(root) -> Client:
    client = Client()
    client.force_login(root)
    return client


def _form(agent, **change) -> dict:
    data = {
        "agent": agent.pk,
        "skill_name": "weather-report",
        "task": "Report the weather",
        "inputs": '{"city": "Berlin"}',
        "crontab": "",
        "interval_seconds": "600",
        "timezone": "UTC",
        "enabled": "on",
    }
    data.update(change)
    return data


def _rows() -> tuple[int, int, int, int]:
    return (
        Schedule.objects.count(),
        PeriodicTask.objects.count(),
        CrontabSchedule.objects.count(),
        IntervalSchedule.objects.count(),
    )


def _existing(agent, root) -> Schedule:
    return schedule_create(
        agent=agent, skill="weather-report", task="Weather", interval_seconds=600, actor=root
    )


def test_adding_a_schedule_creates_it_with_its_beat_row(client, agent, root):
    response = client.post(reverse("admin:cognition_schedule_add"), _form(agent))
    assert response.status_code == 302
    schedule = Schedule.objects.get()
    task = PeriodicTask.objects.get()
    assert (schedule.inputs, schedule.interval_seconds, schedule.created_by) == (
        {"city": "Berlin"},
        600,
        root,
    )
    assert (schedule.periodic_task_id, task.interval.every, task.enabled) == (task.pk, 600, True)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"crontab": "61 * * * *", "interval_seconds": ""},
            "crontab: the minute field &#x27;61&#x27; is invalid: Invalid end range: 61 &gt; 59. "
            "(rule: crontab_syntax)",
        ),
        ({"interval_seconds": "0"}, "(rule: positive_integer)"),
        ({"crontab": "0 7 * * *"}, "give exactly one of crontab and interval_seconds"),
        ({"skill_name": "ghost"}, "agent &#x27;scout&#x27; has no skill named &#x27;ghost&#x27;"),
        ({"task": " "}, "This field is required."),
        ({"timezone": "Mars/Olympus"}, "(rule: known_timezone)"),
    ],
)
def test_bad_input_is_shown_on_the_form_and_nothing_is_written(client, agent, change, message):
    response = client.post(reverse("admin:cognition_schedule_add"), _form(agent, **change))
    assert response.status_code == 200
    assert message in response.content.decode()
    assert _rows() == (0, 0, 0, 0)


def test_changing_a_schedule_to_a_crontab_changes_its_beat_row(client, agent, root):
    schedule = _existing(agent, root)
    response = client.post(
        reverse("admin:cognition_schedule_change", args=[schedule.pk]),
        {
            **_form(agent, crontab="0 7 * * mon-fri", interval_seconds="", timezone="Asia/Tokyo"),
            "occurrences-TOTAL_FORMS": "0",
            "occurrences-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    cron = PeriodicTask.objects.get().crontab
    assert (cron.minute, cron.hour, cron.day_of_week, str(cron.timezone)) == (
        "0",
        "7",
        "mon-fri",
        "Asia/Tokyo",
    )
    assert PeriodicTask.objects.get().interval is None
    assert Schedule.objects.get().crontab == "0 7 * * mon-fri"


def test_the_change_page_shows_last_outcome_next_fire_time_and_occurrences(client, agent, root):
    schedule = _existing(agent, root)
    occurrence = schedule_fire(schedule_id=schedule.pk)  # no WEATHER_TOKEN: skipped
    page = client.get(reverse("admin:cognition_schedule_change", args=[schedule.pk]))
    html = page.content.decode()
    assert f"skipped at {occurrence.fired_at:%Y-%m-%d %H:%M:%S}" in html
    assert "(credentials_missing)" in html
    assert "No value is set for credential(s) WEATHER_TOKEN" in html
    assert f"motor-schedule-{schedule.pk}" in html
    assert "Next fire time" in html
    listing = client.get(reverse("admin:cognition_schedule_changelist")).content.decode()
    assert "every 600 s" in listing
    assert "(credentials_missing)" in listing


def test_disable_and_enable_actions_go_through_the_services(client, agent, root):
    schedule = _existing(agent, root)
    url = reverse("admin:cognition_schedule_changelist")
    client.post(url, {"action": "disable_schedules", "_selected_action": [schedule.pk]})
    assert (Schedule.objects.get().enabled, PeriodicTask.objects.get().enabled) == (False, False)
    client.post(url, {"action": "enable_schedules", "_selected_action": [schedule.pk]})
    assert (Schedule.objects.get().enabled, PeriodicTask.objects.get().enabled) == (True, True)


def test_deleting_in_the_admin_removes_the_beat_row(client, agent, root):
    schedule = _existing(agent, root)
    response = client.post(
        reverse("admin:cognition_schedule_delete", args=[schedule.pk]), {"post": "yes"}
    )
    assert response.status_code == 302
    assert _rows()[:2] == (0, 0)


def test_a_staff_user_sees_only_schedules_of_agents_they_own(agent, root, tmp_path):
    _existing(agent, root)
    other = make_user("other", is_staff=True, perms=["cognition.view_schedule"])
    client = Client()
    client.force_login(other)
    listing = client.get(reverse("admin:cognition_schedule_changelist")).content.decode()
    assert "weather-report" not in listing
    assert "0 schedules" in listing


def test_editing_a_schedule_that_has_occurrences_keeps_them(client, agent, root):
    # given a schedule that fired once, and its change form as the browser would submit it
    schedule = _existing(agent, root)
    occurrence = schedule_fire(schedule_id=schedule.pk)
    url = reverse("admin:cognition_schedule_change", args=[schedule.pk])
    html = client.get(url).content.decode()
    hidden = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', html))
    assert hidden["occurrences-INITIAL_FORMS"] == "1"
    # when only the task is changed
    response = client.post(url, {**hidden, **_form(agent, task="Weather for Hamburg")})
    # then the schedule changed and the occurrence is untouched
    assert response.status_code == 302, response.content.decode()[:3000]
    assert Schedule.objects.get().task == "Weather for Hamburg"
    assert list(schedule.occurrences.values_list("id", "reason")) == [
        (occurrence.pk, "credentials_missing")
    ]


def _changelist_with_queries(client) -> tuple[str, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("admin:cognition_schedule_changelist"))
    assert response.status_code == 200
    return response.content.decode(), len(queries.captured_queries)


def test_the_list_shows_each_rows_last_outcome_without_a_query_per_row(client, agent, root):
    # given one fired interval schedule and one cron schedule that never fired
    fired = _existing(agent, root)
    occurrence = schedule_fire(schedule_id=fired.pk)
    schedule_create(agent=agent, skill="weather-report", task="t", crontab="0 7 * * *", actor=root)
    listing, few = _changelist_with_queries(client)
    assert listing.count("never fired") == 1
    assert listing.count(f"skipped at {occurrence.fired_at:%Y-%m-%d %H:%M:%S}") == 1
    # when three more cron schedules, fired, are added
    for hour in (8, 9, 10):
        added = schedule_create(
            agent=agent, skill="weather-report", task="t", crontab=f"0 {hour} * * *", actor=root
        )
        schedule_fire(schedule_id=added.pk)
    listing, many = _changelist_with_queries(client)
    # then the page costs the same number of queries and shows every row's own outcome
    assert many == few
    assert listing.count("never fired") == 1
    assert listing.count("(credentials_missing)") == 4


def test_an_occurrences_run_link_opens_that_run_whatever_its_id(client, agent, root):
    # given an occurrence whose run's id holds "_40", which the admin's URL unquoting would read
    # as "@" unless the link quotes the id
    from runs.models import MotorRun

    schedule = _existing(agent, root)
    occurrence = schedule_fire(schedule_id=schedule.pk)
    run = MotorRun.objects.create(id="run_40aa22bb26cc", agent=agent, task="Weather")
    type(occurrence).objects.filter(pk=occurrence.pk).update(run=run)
    # when the schedule's page is shown and its run link followed
    html = client.get(reverse("admin:cognition_schedule_change", args=[schedule.pk])).content
    hrefs = re.findall(r'href="([^"]*/runs/motorrun/[^"]*)"', html.decode())
    assert len(hrefs) == 1
    console = client.get(hrefs[0])
    # then it is that run's console
    assert console.status_code == 200
    assert "Run run_40aa22bb26cc" in console.content.decode()
