"""The periodic purge of expired Idempotency-Key records and old finished signal deliveries."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from cognition.delivery import signal_delivery_purge
from cognition.models import (
    Agent,
    AttemptOutcome,
    DeliveryAttempt,
    DeliveryState,
    DeliveryTarget,
    IdempotencyRecord,
    SignalDelivery,
)
from cognition.services import idempotency_purge
from cognition.tasks import records_purge_task
from config.celery import app as celery_app
from runs.models import Signal, SignalKind
from runs.outbox import signal_emit
from tests.skills.admin_support import make_agent

pytestmark = pytest.mark.django_db

DAY = timedelta(days=1)


def _record(key: str, age: timedelta) -> IdempotencyRecord:
    record = IdempotencyRecord.objects.create(
        scope="agent:1", key=key, fingerprint="f" * 64, response_status=201, response_body={}
    )
    IdempotencyRecord.objects.filter(pk=record.pk).update(created_at=timezone.now() - age)
    return record


def test_records_older_than_24_hours_are_purged_and_younger_ones_kept() -> None:
    # given records just past, and just within, the 24 h replay window
    _record("old", DAY + timedelta(seconds=1))
    _record("older", 3 * DAY)
    _record("fresh", DAY - timedelta(minutes=1))
    _record("new", timedelta(0))

    # when the purge runs
    deleted = idempotency_purge()

    # then exactly the expired ones are gone
    assert deleted == 2
    assert sorted(IdempotencyRecord.objects.values_list("key", flat=True)) == ["fresh", "new"]


def test_the_replay_window_follows_the_setting(settings) -> None:
    # given a one-hour window
    settings.MOTOR_IDEMPOTENCY_TTL_SECONDS = 3600
    _record("two-hours", timedelta(hours=2))
    _record("half-hour", timedelta(minutes=30))

    assert idempotency_purge() == 1
    assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == ["half-hour"]


def test_a_purge_with_nothing_expired_deletes_nothing() -> None:
    _record("new", timedelta(minutes=5))
    assert idempotency_purge() == 0
    assert IdempotencyRecord.objects.count() == 1


def _delivery(agent: Agent, *, state: str, age: timedelta, signal_age: timedelta) -> SignalDelivery:
    signal = signal_emit(agent_id=agent.pk, kind=SignalKind.MOTOR_RESULT, payload={"n": 1})
    Signal.objects.filter(pk=signal.pk).update(created_at=timezone.now() - signal_age)
    delivery = SignalDelivery.objects.create(
        signal=signal, agent=agent, target=DeliveryTarget.WEBHOOK, state=state, attempts=1
    )
    DeliveryAttempt.objects.create(
        delivery=delivery,
        signal=signal,
        number=1,
        target=DeliveryTarget.WEBHOOK,
        outcome=AttemptOutcome.DELIVERED,
        started_at=timezone.now() - age,
    )
    SignalDelivery.objects.filter(pk=delivery.pk).update(updated_at=timezone.now() - age)
    return delivery


def test_finished_deliveries_past_the_retention_are_purged_with_their_attempts() -> None:
    # given deliveries of every kind, old and recent
    agent = make_agent("scout")
    old = 31 * DAY
    gone = [
        _delivery(agent, state=DeliveryState.DELIVERED, age=old, signal_age=old),
        _delivery(agent, state=DeliveryState.FAILED, age=old, signal_age=old),
        _delivery(agent, state=DeliveryState.SKIPPED, age=old, signal_age=old),
    ]
    kept = [
        # recent
        _delivery(agent, state=DeliveryState.DELIVERED, age=DAY, signal_age=DAY),
        # still being retried: never purged, however old
        _delivery(agent, state=DeliveryState.RETRYING, age=old, signal_age=old),
        _delivery(agent, state=DeliveryState.PENDING, age=old, signal_age=old),
    ]
    signals = Signal.objects.count()

    # when the purge runs
    deleted = signal_delivery_purge()

    # then only the old finished ones and their attempts are gone; every signal stays
    assert deleted == 3
    assert sorted(SignalDelivery.objects.values_list("id", flat=True)) == sorted(d.pk for d in kept)
    assert not DeliveryAttempt.objects.filter(delivery_id__in=[d.pk for d in gone]).exists()
    assert DeliveryAttempt.objects.count() == 3
    assert Signal.objects.count() == signals


def test_a_delivery_whose_signal_is_within_the_sweeper_horizon_is_kept(settings) -> None:
    # given a short retention but a signal the sweeper still looks at: purging its delivery
    # would make the sweeper dispatch the signal again
    settings.MOTOR_SIGNAL_DELIVERY_RETENTION_SECONDS = 60
    agent = make_agent("scout")
    delivery = _delivery(
        agent, state=DeliveryState.DELIVERED, age=timedelta(hours=2), signal_age=timedelta(hours=2)
    )

    assert signal_delivery_purge() == 0
    assert SignalDelivery.objects.filter(pk=delivery.pk).exists()


def test_the_purge_task_is_registered_on_celery_beat_and_purges_both() -> None:
    # given an expired record and an old finished delivery
    _record("old", 2 * DAY)
    _delivery(make_agent("scout"), state=DeliveryState.DELIVERED, age=40 * DAY, signal_age=40 * DAY)

    # then beat runs the task every MOTOR_PURGE_INTERVAL_SECONDS (default one hour)
    entry = django_settings.CELERY_BEAT_SCHEDULE["records-purge"]
    assert entry == {"task": "cognition.records_purge", "schedule": 3600.0}
    task = celery_app.tasks[entry["task"]]
    assert task.name == records_purge_task.name

    # and the task, run as a worker would, purges both
    assert task.apply().get() == {"idempotency_records": 1, "signal_deliveries": 1}
    assert (IdempotencyRecord.objects.count(), SignalDelivery.objects.count()) == (0, 0)
