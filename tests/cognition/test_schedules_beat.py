"""Schedules fired by celery-beat's real DatabaseScheduler (the project's Celery app, the broker in
Redis) and run by a real Celery worker process, the LLM played by the local stub server."""
# ruff: noqa: F811 - pytest fixtures imported from other test modules are parameters here

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone
from django_celery_beat.models import PeriodicTask
from django_celery_beat.schedulers import DatabaseScheduler

from cognition.models import Schedule, ScheduleOccurrence
from cognition.schedule_firing import schedule_fire
from cognition.schedules import schedule_create, schedule_disable
from cognition.services import credential_set
from config.celery import app as celery_app
from runs.models import MotorRun, RunStatus, Signal
from tests.fixtures.llm import reply_text
from tests.runs.test_worker_process import start_worker  # noqa: F401 - fixture
from tests.skills.admin_support import APPROVER_PERMS, make_agent, make_user

from .core_support import _clean_mutex_keys, skill_in_status  # noqa: F401 - fixtures

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _empty_default_queue() -> Iterator[None]:
    """No message sent by another test (or left by a tick here) reaches this test's worker."""

    def purge() -> None:
        with celery_app.connection_for_write() as connection:
            connection.default_channel.queue_purge(celery_app.conf.task_default_queue)

    purge()
    yield
    purge()


def _wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _due_schedule(tmp_path: Path, *, status: str = "approved") -> Schedule:
    """An hourly schedule of an approved skill whose last run was two hours ago (due now)."""
    olivia = make_user("olivia", perms=APPROVER_PERMS)
    alpha = make_agent("alpha", owner=olivia)
    skill_in_status(tmp_path / "src", agent=alpha, approver=olivia, status=status)
    credential_set(agent=alpha, name="WEATHER_TOKEN", value="tok-12345678", actor="test")
    schedule = schedule_create(
        agent=alpha,
        skill="weather-report",
        task="Report the weather in Berlin",
        interval_seconds=3600,
        actor=olivia,
    )
    PeriodicTask.objects.filter(pk=schedule.periodic_task_id).update(
        last_run_at=timezone.now() - timedelta(hours=2)
    )
    return schedule


def _tick_until_sent(scheduler: DatabaseScheduler, name: str, ticks: int = 20) -> int:
    """Tick beat until it has sent `name` (or `ticks` ran out); return how often it sent it."""
    for _ in range(ticks):
        scheduler.tick()
        scheduler.sync()
        count = PeriodicTask.objects.get(name=name).total_run_count
        if count:
            return count
    return 0


def test_beat_fires_a_due_schedule_and_a_worker_starts_the_run(
    tmp_path, llm_stub_server, start_worker
):
    # given a due schedule of an approved skill, a worker, and a model that answers at once
    schedule = _due_schedule(tmp_path)
    llm_stub_server.add(reply_text("Sunny, 21 degrees."))
    start_worker()
    # when beat's database scheduler ticks
    scheduler = DatabaseScheduler(app=celery_app)
    sent = _tick_until_sent(scheduler, schedule.periodic_task.name)
    # then it sent the fire task once, and the worker started the skill's run with trigger=schedule
    assert sent == 1
    _wait_for(lambda: ScheduleOccurrence.objects.exists(), "the occurrence")
    occurrence = ScheduleOccurrence.objects.get()
    assert (occurrence.schedule_id, occurrence.outcome, occurrence.reason) == (
        schedule.pk,
        "started",
        "",
    )
    run = MotorRun.objects.get(pk=occurrence.run_id)
    assert (run.trigger, run.skill.name, run.agent_id) == (
        "schedule",
        "weather-report",
        schedule.agent_id,
    )
    _wait_for(
        lambda: MotorRun.objects.get(pk=run.pk).status == RunStatus.COMPLETED, "the run to finish"
    )
    run.refresh_from_db()
    assert run.result["summary"] == "Sunny, 21 degrees."
    assert Signal.objects.filter(kind="schedule_skipped").count() == 0
    # and the beat row now counts from this run: the next fire is an hour after it
    task = PeriodicTask.objects.get(pk=schedule.periodic_task_id)
    assert timezone.now() - task.last_run_at < timedelta(minutes=5)


def test_beat_fires_an_unapproved_skill_into_a_recorded_skip(
    tmp_path, llm_stub_server, start_worker
):
    schedule = _due_schedule(tmp_path, status="reviewed")
    start_worker()
    assert _tick_until_sent(DatabaseScheduler(app=celery_app), schedule.periodic_task.name) == 1
    _wait_for(lambda: ScheduleOccurrence.objects.exists(), "the occurrence")
    occurrence = ScheduleOccurrence.objects.get()
    assert (occurrence.outcome, occurrence.reason, occurrence.run_id) == (
        "skipped",
        "not_approved",
        None,
    )
    (signal,) = Signal.objects.filter(kind="schedule_skipped")
    assert signal.payload["reason"] == "not_approved"
    assert (MotorRun.objects.count(), llm_stub_server.requests) == (0, [])


def test_a_disabled_schedule_is_not_sent_by_beat(tmp_path):
    schedule = _due_schedule(tmp_path)
    name = schedule.periodic_task.name
    schedule_disable(schedule=schedule, actor="test")
    scheduler = DatabaseScheduler(app=celery_app)
    assert _tick_until_sent(scheduler, name) == 0
    assert name not in scheduler.schedule
    # (django-celery-beat clears last_run_at of a disabled row; it never ran)
    task = PeriodicTask.objects.get(name=name)
    assert (task.total_run_count, task.last_run_at) == (0, None)
    assert ScheduleOccurrence.objects.count() == 0


def test_two_fires_at_once_start_one_run_and_record_the_other_as_busy(tmp_path):
    # given a schedule whose fire message arrived twice (two beats, or a redelivery)
    schedule = _due_schedule(tmp_path)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def fire() -> None:
        try:
            barrier.wait(timeout=30)
            schedule_fire(schedule_id=schedule.pk)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=fire) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    # then exactly one run started and the other fire is on record as busy, with its signal
    assert errors == []
    outcomes = sorted(ScheduleOccurrence.objects.values_list("outcome", "reason"))
    assert outcomes == [("skipped", "agent_busy"), ("started", "")]
    assert MotorRun.objects.count() == 1
    assert Signal.objects.filter(kind="schedule_skipped").count() == 1
