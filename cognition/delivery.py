"""Delivery of committed signals to the agent's brain, at least once, with a stable id.

How a signal travels:

1. `runs.outbox.signal_emit` commits the Signal and sends `signal_committed`;
   `on_signal_committed` (connected in CognitionConfig.ready) publishes a wake-up on Redis for
   long-polls and event streams (cognition.api.signals) and queues `signal_dispatch_task`.
2. `signal_dispatch` plans one `SignalDelivery` per receiver — the agent's webhook, if it has a
   URL, and every hook registered in cognition.brain_hooks. The hooks' first attempts are made
   by the dispatching task itself right after the plan commits (claimed in the plan's
   transaction, their outcomes recorded together); the webhook's is queued as its own task.
3. `signal_delivery_attempt` (the webhook's attempts, and every retry) claims the delivery in a
   short transaction, calls the receiver outside any transaction (a POST with an explicit
   timeout and no redirects, or the hook function), and records the outcome as a
   `DeliveryAttempt` row. A failure is retried after base * 2^(n-1) seconds (capped) until the
   last attempt, after which the delivery is failed.
4. `signal_delivery_sweep` (celery-beat) re-queues what a crash lost: signals committed but never
   dispatched, due attempts whose task vanished, and attempts whose worker died mid-call.

A receiver may therefore see a signal more than once: `id` (and `X-Motor-Signal-Id`) is stable
and is what a receiver de-duplicates on.

Webhook requests are signed: `X-Motor-Signature: v1=<hex>` is HMAC-SHA256, keyed with the agent's
signing secret, over `"<X-Motor-Timestamp>.<raw body>"` (the timestamp in Unix seconds). A
receiver recomputes it over the bytes it received, compares in constant time, and refuses
timestamps older than a few minutes (`cognition.webhooks.verify_signature` does exactly that).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

import redis
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from runs.metrics import WEBHOOK_SECONDS
from runs.models import Signal, SignalPriority

from .brain_hooks import brain_hooks

# The webhook's names stay importable from here (`name as name` marks a re-export).
from .delivery_webhook import ATTEMPT_HEADER as ATTEMPT_HEADER
from .delivery_webhook import SIGNAL_ID_HEADER as SIGNAL_ID_HEADER
from .delivery_webhook import SIGNATURE_HEADER as SIGNATURE_HEADER
from .delivery_webhook import TIMESTAMP_HEADER as TIMESTAMP_HEADER
from .delivery_webhook import USER_AGENT as USER_AGENT
from .delivery_webhook import AttemptResult, post_webhook
from .delivery_webhook import signal_body as signal_body
from .delivery_webhook import signal_data as signal_data
from .models import (
    AttemptOutcome,
    DeliveryAttempt,
    DeliveryState,
    DeliveryTarget,
    SignalDelivery,
)

logger = logging.getLogger(__name__)

#: seconds past the HTTP timeout after which an attempt still "delivering" is taken as lost
CLAIM_MARGIN_S = 60
SWEEP_BATCH = 500
ACTIVE_STATES = (DeliveryState.PENDING, DeliveryState.RETRYING)


# --- wake-ups for long-polls and event streams ---------------------------------------------------


@lru_cache(maxsize=4)
def _redis_for(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)


def wakeup_redis() -> redis.Redis:
    return _redis_for(settings.REDIS_URL)


def wakeup_channel(agent_id: int) -> str:
    """The pub/sub channel announcing the agent's new signals.

    Redis channels are shared by every database number, so the name carries the database name:
    two deployments (or test runs) on one Redis never wake each other's readers.
    """
    return f"motor:signals:{connection.settings_dict['NAME']}:{agent_id}"


# --- dispatch ------------------------------------------------------------------------------------


def _task_priority(priority: int) -> int:
    # Celery on Redis: 0 is the highest of its priority steps.
    return 0 if priority == SignalPriority.HIGH else 3


def _queue() -> str | None:
    return getattr(settings, "MOTOR_SIGNAL_QUEUE", "") or None


def _enqueue_dispatch(signal_id: int) -> None:
    from .tasks import signal_dispatch_task

    signal_dispatch_task.apply_async(args=[signal_id], priority=0, queue=_queue())


def _enqueue_attempt(delivery_id: int, *, countdown: float = 0.0, priority: int = 0) -> None:
    from .tasks import signal_delivery_attempt_task

    if countdown > 0 and signal_delivery_attempt_task.app.conf.task_always_eager:
        # Eager mode (tests, debugging) ignores countdowns: a delayed retry would run at once,
        # find itself early and re-queue itself forever. The sweeper picks it up when it is due.
        return
    signal_delivery_attempt_task.apply_async(
        args=[delivery_id], countdown=max(0.0, countdown) or None, priority=priority, queue=_queue()
    )


def on_signal_committed(
    sender: Any, *, signal_id: int, agent_id: int, seq: int, kind: str, **kwargs: Any
) -> None:
    """Receiver of runs.outbox.signal_committed: wake readers, queue the dispatch. Never raises:
    what fails here is caught up by the readers' database re-check and by the sweeper."""
    try:
        wakeup_redis().publish(wakeup_channel(agent_id), str(seq))
    except redis.RedisError as exc:
        logger.warning("signal %s: wake-up not published (%s)", signal_id, type(exc).__name__)
    try:
        _enqueue_dispatch(signal_id)
    except Exception as exc:  # the broker is down: the sweeper dispatches it later
        logger.error("signal %s: dispatch not queued (%s)", signal_id, type(exc).__name__)


def _claim_until(now: datetime) -> datetime:
    """When an attempt claimed at `now` counts as lost (its worker died mid-call)."""
    return now + timedelta(seconds=float(settings.MOTOR_WEBHOOK_TIMEOUT_SECONDS) + CLAIM_MARGIN_S)


def signal_dispatch(*, signal_id: int) -> list[int]:
    """Plan the signal's deliveries (once), make the first attempt of each brain hook in this
    process once the plan has committed, and queue the webhook's first attempt; returns the ids
    of the deliveries created. A signal already dispatched, or gone, is a no-op.

    The hooks' deliveries are created claimed for their first attempt, with its attempt row, in
    the plan's transaction: the hooks run without a task message of their own, and a worker that
    dies before it records their outcome leaves claims that expire, which the sweeper records as
    lost and retries (as for any attempt whose worker died).
    """
    hook_names = sorted(brain_hooks())
    now = timezone.now()
    with transaction.atomic():
        # The signal's row lock serialises concurrent dispatches (the receiver and the sweeper).
        signal = (
            Signal.objects.select_for_update(of=("self",), no_key=True)
            .select_related("agent")
            .filter(pk=signal_id)
            .first()
        )
        if signal is None or SignalDelivery.objects.filter(signal=signal).exists():
            return []
        targets = [(DeliveryTarget.HOOK, name) for name in hook_names]
        if signal.agent.webhook_url:
            targets.insert(0, (DeliveryTarget.WEBHOOK, ""))
        if not targets:
            SignalDelivery.objects.create(
                signal=signal,
                agent=signal.agent,
                target=DeliveryTarget.NONE,
                state=DeliveryState.SKIPPED,
                last_error="The agent has no webhook URL and no brain hook is registered.",
                finished_at=now,
            )
            return []
        claimed_until = _claim_until(now)
        created = SignalDelivery.objects.bulk_create(
            [
                SignalDelivery(
                    signal=signal,
                    agent=signal.agent,
                    target=target,
                    name=name,
                    next_attempt_at=now,
                    **(
                        {
                            "state": DeliveryState.DELIVERING,
                            "attempts": 1,
                            "claimed_until": claimed_until,
                        }
                        if target == DeliveryTarget.HOOK
                        else {"state": DeliveryState.PENDING}
                    ),
                )
                for target, name in targets
            ]
        )
        hooks = [d for d in created if d.target == DeliveryTarget.HOOK]
        attempts = DeliveryAttempt.objects.bulk_create(
            [
                DeliveryAttempt(
                    delivery=delivery,
                    signal=signal,
                    number=1,
                    target=DeliveryTarget.HOOK,
                    started_at=now,
                )
                for delivery in hooks
            ]
        )
        priority = _task_priority(signal.priority)
        for delivery in created:
            if delivery.target == DeliveryTarget.WEBHOOK:
                transaction.on_commit(
                    lambda pk=delivery.pk: _enqueue_attempt(pk, priority=priority), robust=True
                )
        if hooks:
            claims = list(zip(hooks, attempts, strict=True))
            # After the commit, and so outside any transaction: a slow hook holds no lock.
            transaction.on_commit(lambda: _hooks_first_attempts(claims, priority), robust=True)
    return [d.pk for d in created]


def _hooks_first_attempts(
    claims: list[tuple[SignalDelivery, DeliveryAttempt]], priority: int
) -> list[str]:
    """Call each claimed hook once and record the outcomes together."""
    results = [
        (delivery, attempt, _call_hook(name=delivery.name, signal_id=delivery.signal_id))
        for delivery, attempt in claims
    ]
    return _conclude(results, priority=priority)


# --- one attempt ---------------------------------------------------------------------------------


def backoff_delay(attempt_number: int) -> float:
    """Seconds to wait after failed attempt `attempt_number` (1-based) before the next one."""
    base = float(settings.MOTOR_SIGNAL_BACKOFF_BASE_SECONDS)
    cap = float(settings.MOTOR_SIGNAL_BACKOFF_CAP_SECONDS)
    return min(cap, base * 2 ** max(0, attempt_number - 1))


def _call_hook(*, name: str, signal_id: int) -> AttemptResult:
    hook = brain_hooks().get(name)
    if hook is None:
        return AttemptResult(False, error=f"brain hook {name!r} is not registered in this worker")
    try:
        hook(signal_id)
    except Exception as exc:
        logger.warning(
            "signal %s: brain hook %r failed: %s", signal_id, name, type(exc).__name__, exc_info=exc
        )
        return AttemptResult(False, error=f"{type(exc).__name__}: {exc}"[:500])
    return AttemptResult(True)


#: what settling an attempt changes, on the attempt and on its delivery
_ATTEMPT_FIELDS = ["finished_at", "duration_ms", "status_code", "error", "outcome", "next_retry_at"]
_DELIVERY_FIELDS = [
    "claimed_until",
    "state",
    "last_error",
    "finished_at",
    "next_attempt_at",
    "updated_at",
]


def _settle(
    delivery: SignalDelivery,
    attempt: DeliveryAttempt,
    result: AttemptResult,
    *,
    now: datetime,
    priority: int,
) -> None:
    """Set `result` on the attempt and move the (locked) delivery on, in memory; a retry is
    queued when the caller's transaction commits. The caller saves both rows."""
    started = attempt.started_at
    attempt.finished_at = now
    attempt.duration_ms = max(0, int((now - started).total_seconds() * 1000))
    attempt.status_code = result.status_code
    attempt.error = result.error[:500]
    delivery.claimed_until = None
    delivery.updated_at = now
    if result.delivered:
        attempt.outcome = AttemptOutcome.DELIVERED
        delivery.state = DeliveryState.DELIVERED
        delivery.last_error = ""
        delivery.finished_at = now
        delivery.next_attempt_at = None
    elif result.final or attempt.number >= settings.MOTOR_SIGNAL_DELIVERY_MAX_ATTEMPTS:
        attempt.outcome = AttemptOutcome.FAILED
        delivery.state = DeliveryState.FAILED
        delivery.last_error = result.error[:500]
        delivery.finished_at = now
        delivery.next_attempt_at = None
    else:
        delay = backoff_delay(attempt.number)
        attempt.outcome = AttemptOutcome.RETRY
        attempt.next_retry_at = now + timedelta(seconds=delay)
        delivery.state = DeliveryState.RETRYING
        delivery.last_error = result.error[:500]
        delivery.next_attempt_at = attempt.next_retry_at
        pk = delivery.pk
        transaction.on_commit(
            lambda: _enqueue_attempt(pk, countdown=delay, priority=priority), robust=True
        )


def _report(delivery: SignalDelivery, attempt: DeliveryAttempt) -> None:
    """The metrics and the log line of a settled attempt."""
    if delivery.target == DeliveryTarget.WEBHOOK:
        WEBHOOK_SECONDS.labels(outcome=attempt.outcome).observe(attempt.duration_ms / 1000)
    if attempt.outcome != AttemptOutcome.DELIVERED:
        logger.warning(
            "signal %s: %s delivery attempt %s %s: %s",
            delivery.signal_id,
            delivery.target,
            attempt.number,
            attempt.outcome,
            attempt.error,
        )


def _finish(
    delivery: SignalDelivery,
    attempt: DeliveryAttempt,
    result: AttemptResult,
    *,
    now: datetime,
    priority: int,
) -> str:
    """Record `result` on the attempt and move the (locked) delivery on; in a transaction."""
    _settle(delivery, attempt, result, now=now, priority=priority)
    attempt.save(update_fields=_ATTEMPT_FIELDS)
    delivery.save(update_fields=_DELIVERY_FIELDS)
    _report(delivery, attempt)
    return str(attempt.outcome)


def _save_alike(model: Any, rows: list[Any], fields: list[str]) -> None:
    """Write `fields` of `rows` with one UPDATE per set of equal values. Attempts recorded
    together mostly end alike (claimed at the same time, delivered), so this is usually one
    statement, and far cheaper to build than `bulk_update`'s CASE per row."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for row in rows:
        groups.setdefault(tuple(getattr(row, name) for name in fields), []).append(row.pk)
    for values, pks in groups.items():
        model.objects.filter(pk__in=pks).update(**dict(zip(fields, values, strict=True)))


def _conclude(
    results: list[tuple[SignalDelivery, DeliveryAttempt, AttemptResult]], *, priority: int
) -> list[str]:
    """Record the results of attempts this process claimed, in one transaction; returns what
    happened to each ("delivered", "retry", "failed", "superseded" or "missing").

    Under the deliveries' row locks, a delivery still DELIVERING with this attempt's number is
    still this process's claim: the sweeper settles an expired claim under the same lock and
    moves the delivery on, so the attempt rows held in memory are current and need no re-read.
    """
    ids = [delivery.pk for delivery, _, _ in results]
    with transaction.atomic():
        current = {
            pk: (state, number)
            for pk, state, number in SignalDelivery.objects.select_for_update()
            .filter(pk__in=ids)
            .order_by("pk")
            .values_list("pk", "state", "attempts")
        }
        now = timezone.now()
        outcomes: list[str] = []
        settled: list[tuple[SignalDelivery, DeliveryAttempt]] = []
        for delivery, attempt, result in results:
            if delivery.pk not in current:
                outcomes.append("missing")
            elif current[delivery.pk] != (DeliveryState.DELIVERING, attempt.number):
                # The sweeper took this attempt for lost and moved on; keep what really happened.
                DeliveryAttempt.objects.filter(pk=attempt.pk).update(
                    finished_at=now, status_code=result.status_code, error=result.error[:500]
                )
                outcomes.append("superseded")
            else:
                _settle(delivery, attempt, result, now=now, priority=priority)
                settled.append((delivery, attempt))
                outcomes.append(str(attempt.outcome))
        _save_alike(DeliveryAttempt, [a for _, a in settled], _ATTEMPT_FIELDS)
        _save_alike(SignalDelivery, [d for d, _ in settled], _DELIVERY_FIELDS)
    for delivery, attempt in settled:
        _report(delivery, attempt)
    return outcomes


def signal_delivery_attempt(*, delivery_id: int) -> str:
    """Make the next attempt of one delivery, if it is due; returns what happened.

    Duplicate or early task messages are harmless: the claim (a row lock and the state check)
    lets one attempt run at a time, and an early message re-queues itself for the due time.
    """
    now = timezone.now()
    with transaction.atomic():
        delivery = (
            SignalDelivery.objects.select_for_update(of=("self",), no_key=True)
            .select_related("agent", "signal")
            .filter(pk=delivery_id)
            .first()
        )
        if delivery is None:
            return "missing"
        if delivery.state not in ACTIVE_STATES:
            return str(delivery.state)
        if delivery.next_attempt_at and delivery.next_attempt_at > now:
            wait = (delivery.next_attempt_at - now).total_seconds()
            priority = _task_priority(delivery.signal.priority)
            transaction.on_commit(
                lambda: _enqueue_attempt(delivery.pk, countdown=wait, priority=priority),
                robust=True,
            )
            return "not_due"
        delivery.attempts += 1
        delivery.state = DeliveryState.DELIVERING
        delivery.claimed_until = _claim_until(now)
        delivery.save(update_fields=["attempts", "state", "claimed_until", "updated_at"])
        url = delivery.agent.webhook_url if delivery.target == DeliveryTarget.WEBHOOK else ""
        attempt = DeliveryAttempt.objects.create(
            delivery=delivery,
            signal_id=delivery.signal_id,
            number=delivery.attempts,
            target=delivery.target,
            url=url,
            started_at=now,
        )

    # The call happens outside any transaction: a slow receiver holds no lock.
    if delivery.target == DeliveryTarget.WEBHOOK:
        if not url:
            result = AttemptResult(False, error="the agent's webhook URL was removed", final=True)
        else:
            result = post_webhook(
                agent=delivery.agent, signal=delivery.signal, url=url, number=attempt.number
            )
    else:
        result = _call_hook(name=delivery.name, signal_id=delivery.signal_id)

    [outcome] = _conclude(
        [(delivery, attempt, result)], priority=_task_priority(delivery.signal.priority)
    )
    return outcome


# --- the sweeper ---------------------------------------------------------------------------------


def signal_delivery_sweep() -> dict[str, list[int]]:
    """Re-queue what a crash lost (celery-beat): signals never dispatched, due attempts whose
    task is gone, and attempts whose worker died mid-call (recorded as lost, then retried)."""
    now = timezone.now()
    grace = timedelta(seconds=settings.MOTOR_SIGNAL_SWEEP_GRACE_SECONDS)
    horizon = timedelta(seconds=settings.MOTOR_SIGNAL_SWEEP_HORIZON_SECONDS)
    undispatched = list(
        Signal.objects.filter(created_at__lte=now - grace, created_at__gte=now - horizon)
        .filter(~Exists(SignalDelivery.objects.filter(signal=OuterRef("pk"))))
        .order_by("id")
        .values_list("id", flat=True)[:SWEEP_BATCH]
    )
    for signal_id in undispatched:
        _enqueue_dispatch(signal_id)

    stalled = list(
        SignalDelivery.objects.filter(state__in=ACTIVE_STATES, next_attempt_at__lte=now - grace)
        .order_by("id")
        .values_list("id", flat=True)[:SWEEP_BATCH]
    )
    for delivery_id in stalled:
        _enqueue_attempt(delivery_id)

    lost: list[int] = []
    for delivery_id in SignalDelivery.objects.filter(
        state=DeliveryState.DELIVERING, claimed_until__lt=now
    ).values_list("id", flat=True)[:SWEEP_BATCH]:
        with transaction.atomic():
            delivery = (
                SignalDelivery.objects.select_for_update(of=("self",), no_key=True)
                .select_related("signal")
                .filter(pk=delivery_id, state=DeliveryState.DELIVERING, claimed_until__lt=now)
                .first()
            )
            if delivery is None:
                continue
            attempt = DeliveryAttempt.objects.select_for_update().get(
                delivery=delivery, number=delivery.attempts
            )
            _finish(
                delivery,
                attempt,
                AttemptResult(False, error="the worker making this attempt was lost"),
                now=now,
                priority=_task_priority(delivery.signal.priority),
            )
            # `_finish` marks it as a retry or a final failure; keep "lost" visible on the row
            # when another attempt follows.
            if attempt.outcome == AttemptOutcome.RETRY:
                attempt.outcome = AttemptOutcome.LOST
                attempt.save(update_fields=["outcome"])
            lost.append(delivery_id)
    return {"dispatched": undispatched, "requeued": stalled, "lost": lost}


def signal_delivery_purge(*, now: datetime | None = None) -> int:
    """Delete finished deliveries (delivered, failed, skipped) and their attempt history once
    they are older than MOTOR_SIGNAL_DELIVERY_RETENTION_SECONDS.

    A delivery is kept while its signal is within the sweeper's horizon, so the sweeper never
    mistakes a purged signal for one that was never dispatched. The signals themselves are the
    runtime's and stay. Returns how many deliveries were deleted (with their attempts).
    """
    now = now or timezone.now()
    retention = timedelta(seconds=settings.MOTOR_SIGNAL_DELIVERY_RETENTION_SECONDS)
    horizon = timedelta(seconds=settings.MOTOR_SIGNAL_SWEEP_HORIZON_SECONDS)
    old = SignalDelivery.objects.filter(
        state__in=(DeliveryState.DELIVERED, DeliveryState.FAILED, DeliveryState.SKIPPED),
        updated_at__lt=now - retention,
        signal__created_at__lt=now - horizon,
    )
    deleted = 0
    while True:
        batch = list(old.order_by("id").values_list("id", flat=True)[:SWEEP_BATCH])
        if not batch:
            break
        with transaction.atomic():
            DeliveryAttempt.objects.filter(delivery_id__in=batch).delete()
            deleted += (
                SignalDelivery.objects.filter(id__in=batch)
                .delete()[1]
                .get(SignalDelivery._meta.label, 0)
            )
    if deleted:
        logger.info("signal deliveries purged: %d finished before %s", deleted, now - retention)
    return deleted
