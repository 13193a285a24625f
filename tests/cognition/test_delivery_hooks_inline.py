"""The brain hooks' first attempts are made by the dispatching process itself, right after the
plan commits: claimed in the plan, recorded together, with no task message of their own."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from cognition.brain.models import BrainWake, WakeState
from cognition.brain_hooks import register_brain_hook, unregister_brain_hook
from cognition.delivery import signal_delivery_sweep, signal_dispatch
from cognition.models import AttemptOutcome, DeliveryAttempt, DeliveryState, SignalDelivery
from config.celery import app as celery_app
from runs.outbox import signal_emit
from tests.skills.admin_support import make_agent, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def eager() -> Iterator[None]:
    before = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = before


@pytest.fixture
def failing_hook():
    calls: list[int] = []

    def hook(signal_id: int) -> None:
        calls.append(signal_id)
        raise RuntimeError(f"busy with {signal_id}")

    register_brain_hook("zz_failing", hook)
    yield calls
    unregister_brain_hook("zz_failing")


def test_the_hooks_first_attempts_run_in_the_dispatch_without_task_messages(
    django_capture_on_commit_callbacks, failing_hook: list[int], eager: None, settings
) -> None:
    settings.MOTOR_SIGNAL_BACKOFF_BASE_SECONDS = 30
    agent = make_agent("scout", owner=make_user("olivia"))  # no webhook, no conversation
    with django_capture_on_commit_callbacks():  # the notification is not run: no dispatch task
        signal = signal_emit(agent_id=agent.pk, kind="motor_result", payload={"status": "done"})

    # when the signal is dispatched (its plan's on-commit work run here, as after a commit)
    with django_capture_on_commit_callbacks(execute=True) as after:
        planned = signal_dispatch(signal_id=signal.pk)

    # then one callback made every hook's first attempt, and the other one queues the failing
    # hook's retry (eager mode leaves a delayed retry to the sweeper): no attempt task otherwise
    assert [f.__qualname__ for f in after] == [
        "signal_dispatch.<locals>.<lambda>",
        "_settle.<locals>.<lambda>",
    ]
    deliveries = {d.name: d for d in SignalDelivery.objects.filter(signal=signal)}
    assert sorted(d.pk for d in deliveries.values()) == sorted(planned)
    assert {name: (d.state, d.attempts) for name, d in deliveries.items()} == {
        "builtin_cognition": (DeliveryState.DELIVERED, 1),
        "skill_cortex": (DeliveryState.DELIVERED, 1),
        "zz_failing": (DeliveryState.RETRYING, 1),
    }
    assert all(d.claimed_until is None for d in deliveries.values())
    assert failing_hook == [signal.pk]
    attempts = {a.delivery.name: a for a in DeliveryAttempt.objects.filter(signal=signal)}
    assert {name: (a.number, a.outcome, a.error) for name, a in attempts.items()} == {
        "builtin_cognition": (1, AttemptOutcome.DELIVERED, ""),
        "skill_cortex": (1, AttemptOutcome.DELIVERED, ""),
        "zz_failing": (1, AttemptOutcome.RETRY, f"RuntimeError: busy with {signal.pk}"),
    }
    assert all(a.finished_at is not None and a.duration_ms is not None for a in attempts.values())
    failed = deliveries["zz_failing"]
    assert failed.next_attempt_at == attempts["zz_failing"].next_retry_at
    assert failed.last_error == f"RuntimeError: busy with {signal.pk}"
    # the built-in brain recorded its wake (no conversation: done at once)
    assert BrainWake.objects.get(signal=signal).state == WakeState.DONE
    # and a second dispatch of the same signal does nothing
    assert signal_dispatch(signal_id=signal.pk) == []
    assert DeliveryAttempt.objects.filter(signal=signal).count() == 3


def test_a_hook_attempt_whose_worker_died_after_the_plan_is_found_lost_and_retried(
    django_capture_on_commit_callbacks,
) -> None:
    agent = make_agent("scout", owner=make_user("olivia"))
    with django_capture_on_commit_callbacks():
        signal = signal_emit(agent_id=agent.pk, kind="motor_result", payload={"status": "done"})
    # given a plan whose process died before the hooks ran (its on-commit work never runs)
    with django_capture_on_commit_callbacks() as after:
        planned = signal_dispatch(signal_id=signal.pk)
    assert len(after) == 1
    assert set(SignalDelivery.objects.values_list("state", "attempts")) == {
        (DeliveryState.DELIVERING, 1)
    }
    # the claims last the webhook timeout plus a margin; let that time pass
    limit = timezone.now() + timedelta(seconds=settings.MOTOR_WEBHOOK_TIMEOUT_SECONDS + 60)
    assert all(u <= limit for u in SignalDelivery.objects.values_list("claimed_until", flat=True))
    SignalDelivery.objects.update(claimed_until=timezone.now() - timedelta(seconds=1))

    # when the sweeper runs, then each claimed attempt is recorded lost, and retried
    with django_capture_on_commit_callbacks() as requeued:
        assert sorted(signal_delivery_sweep()["lost"]) == sorted(planned)
    assert len(requeued) == len(planned)  # one retry message each, on commit
    assert set(SignalDelivery.objects.values_list("state", "attempts")) == {
        (DeliveryState.RETRYING, 1)
    }
    assert set(DeliveryAttempt.objects.values_list("number", "outcome", "error")) == {
        (1, AttemptOutcome.LOST, "the worker making this attempt was lost")
    }
