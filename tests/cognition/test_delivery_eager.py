"""Signal delivery with Celery in eager mode (development and debugging): a failing receiver gets
one attempt per dispatch or sweep instead of an endless chain of early retries."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from cognition.delivery import agent_set_webhook, signal_delivery_sweep
from cognition.models import AttemptOutcome, DeliveryAttempt, DeliveryState, SignalDelivery
from config.celery import app as celery_app
from runs.outbox import signal_emit
from tests.skills.admin_support import make_agent, make_user

from .test_signal_delivery import Receiver, receiver  # noqa: F401 - the HTTP receiver fixture

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def eager(settings) -> Iterator[None]:
    settings.MOTOR_SIGNAL_BACKOFF_BASE_SECONDS = 0.2
    settings.MOTOR_SIGNAL_DELIVERY_MAX_ATTEMPTS = 3
    settings.MOTOR_SIGNAL_SWEEP_GRACE_SECONDS = 0
    before = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = before


def test_a_failing_webhook_in_eager_mode_is_retried_by_the_sweeper_not_in_a_loop(
    eager: None,
    receiver: Receiver,  # noqa: F811
) -> None:
    agent = make_agent("scout", owner=make_user("olivia"))
    receiver.secrets["/down"] = agent_set_webhook(
        agent=agent, url=f"{receiver.base_url}/down", actor="t"
    ).raw
    receiver.plans["/down"] = [500]

    # when a signal commits, dispatch and the first attempt run in this process at once
    signal = signal_emit(agent_id=agent.pk, kind="motor_result", payload={"status": "completed"})
    delivery = SignalDelivery.objects.get(signal=signal, target="webhook")

    # then one attempt was made and the retry waits for the sweeper
    assert (delivery.state, delivery.attempts) == (DeliveryState.RETRYING, 1)
    assert len(receiver.on("/down")) == 1
    # when the sweeper runs after the retry is due, it makes the next attempt, and so on
    for expected in (2, 3):
        time.sleep(max(0.0, (delivery.next_attempt_at.timestamp() - time.time())) + 0.05)
        assert delivery.pk in signal_delivery_sweep()["requeued"]
        delivery.refresh_from_db()
        assert delivery.attempts == expected
    assert delivery.state == DeliveryState.FAILED
    assert list(
        DeliveryAttempt.objects.filter(delivery=delivery).order_by("number").values_list("outcome")
    ) == [(AttemptOutcome.RETRY,), (AttemptOutcome.RETRY,), (AttemptOutcome.FAILED,)]
    assert len(receiver.on("/down")) == 3
