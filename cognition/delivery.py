"""Delivery of committed signals to the agent's brain, at least once, with a stable id.

How a signal travels:

1. `runs.outbox.signal_emit` commits the Signal and sends `signal_committed`;
   `on_signal_committed` (connected in CognitionConfig.ready) publishes a wake-up on Redis for
   long-polls and event streams (cognition.api.signals) and queues `signal_dispatch_task`.
2. `signal_dispatch` plans one `SignalDelivery` per receiver — the agent's webhook, if it has a
   URL, and every hook registered in cognition.brain_hooks — and queues one attempt for each.
3. `signal_delivery_attempt` claims the delivery in a short transaction, calls the receiver
   outside any transaction (a POST with an explicit timeout and no redirects, or the hook
   function), and records the outcome as a `DeliveryAttempt` row. A failure is retried after
   base * 2^(n-1) seconds (capped) until the last attempt, after which the delivery is failed.
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

import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

import httpx
import redis
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from runs.metrics import WEBHOOK_SECONDS
from runs.models import Signal, SignalPriority
from sandbox.egress.addresses import forbidden_reason, system_resolver
from skills.errors import CredentialsUnreadable

from .brain_hooks import brain_hooks
from .models import (
    Agent,
    AttemptOutcome,
    DeliveryAttempt,
    DeliveryState,
    DeliveryTarget,
    SignalDelivery,
)
from .webhooks import sign, webhook_secret

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Motor-Signature"
TIMESTAMP_HEADER = "X-Motor-Timestamp"
SIGNAL_ID_HEADER = "X-Motor-Signal-Id"
ATTEMPT_HEADER = "X-Motor-Delivery-Attempt"
USER_AGENT = "MotorCortex-Webhook/1"
#: characters of a receiver's answer kept in an attempt's error
RESPONSE_EXCERPT_CHARS = 200
#: seconds past the HTTP timeout after which an attempt still "delivering" is taken as lost
CLAIM_MARGIN_S = 60
SWEEP_BATCH = 500
ACTIVE_STATES = (DeliveryState.PENDING, DeliveryState.RETRYING)


# --- the signal as the brain sees it -------------------------------------------------------------


def signal_data(signal: Signal) -> dict[str, Any]:
    """The JSON shape of a signal, the same for webhooks, long-polls and event streams."""
    return {
        "id": signal.id,
        "seq": signal.seq,
        "kind": signal.kind,
        "run_id": signal.run_id,
        "agent": signal.agent_id,
        "created_at": signal.created_at.isoformat().replace("+00:00", "Z"),
        "payload": signal.payload,
    }


def signal_body(signal: Signal) -> bytes:
    """The exact bytes POSTed to a webhook (compact, sorted keys)."""
    return json.dumps(signal_data(signal), separators=(",", ":"), sort_keys=True).encode()


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


def signal_dispatch(*, signal_id: int) -> list[int]:
    """Plan the signal's deliveries (once) and queue their first attempts; returns the ids of
    the deliveries created. A signal already dispatched, or gone, is a no-op."""
    hook_names = sorted(brain_hooks())
    now = timezone.now()
    with transaction.atomic():
        # The signal's row lock serialises concurrent dispatches (the receiver and the sweeper).
        signal = (
            Signal.objects.select_for_update().select_related("agent").filter(pk=signal_id).first()
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
        created = [
            SignalDelivery.objects.create(
                signal=signal,
                agent=signal.agent,
                target=target,
                name=name,
                state=DeliveryState.PENDING,
                next_attempt_at=now,
            )
            for target, name in targets
        ]
        priority = _task_priority(signal.priority)
        for delivery in created:
            transaction.on_commit(
                lambda pk=delivery.pk: _enqueue_attempt(pk, priority=priority), robust=True
            )
    return [d.pk for d in created]


# --- one attempt ---------------------------------------------------------------------------------


def backoff_delay(attempt_number: int) -> float:
    """Seconds to wait after failed attempt `attempt_number` (1-based) before the next one."""
    base = float(settings.MOTOR_SIGNAL_BACKOFF_BASE_SECONDS)
    cap = float(settings.MOTOR_SIGNAL_BACKOFF_CAP_SECONDS)
    return min(cap, base * 2 ** max(0, attempt_number - 1))


@dataclass(frozen=True, slots=True)
class _Result:
    delivered: bool
    status_code: int | None = None
    error: str = ""
    #: no later attempt can succeed (e.g. the webhook URL was removed)
    final: bool = False


def _pin_addresses(url: str) -> tuple[list[str], str, str] | _Result:
    """(the URL once per address to try, with the host replaced by that address; the Host
    header; the TLS server name), or the failed result when the host may not be reached.

    Unless MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES, every address of the host must be public (the
    sandbox egress rules: no loopback, private, link-local, metadata or own-host address), and
    the request goes to an address that was checked, so a second DNS answer cannot redirect it.
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        addresses = system_resolver(host, port)
    except OSError as exc:
        return _Result(False, error=f"cannot resolve the webhook host: {type(exc).__name__}")
    if not addresses:
        return _Result(False, error="the webhook host has no address")
    if not settings.MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES:
        for address in addresses:
            why = forbidden_reason(address)
            if why:
                return _Result(
                    False,
                    error=(
                        f"the webhook host resolves to a {why} address ({address}); set "
                        "MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES=true to deliver to such receivers"
                    ),
                    final=True,
                )
    targets = []
    for address in addresses:
        literal = f"[{address}]" if ":" in address else address
        netloc = f"{literal}:{parts.port}" if parts.port else literal
        targets.append(parts._replace(netloc=netloc).geturl())
    return targets, parts.netloc.rsplit("@", 1)[-1], host


def _post_webhook(*, agent: Agent, signal: Signal, url: str, number: int) -> _Result:
    try:
        secret = webhook_secret(agent)
    except CredentialsUnreadable as exc:
        return _Result(False, error=f"signing secret unavailable: {exc.message}")
    pinned = _pin_addresses(url)
    if isinstance(pinned, _Result):
        return pinned
    targets, host_header, server_name = pinned
    body = signal_body(signal)
    timestamp = int(time.time())
    headers = {
        "Host": host_header,
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        SIGNAL_ID_HEADER: str(signal.id),
        ATTEMPT_HEADER: str(number),
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(secret=secret, timestamp=timestamp, body=body),
    }
    timeout = float(settings.MOTOR_WEBHOOK_TIMEOUT_SECONDS)
    code, excerpt = 0, b""
    for index, target in enumerate(targets):
        try:
            # Redirects are never followed: a 3xx is an answer, and not a success.
            with (
                httpx.Client(timeout=timeout, follow_redirects=False) as client,
                client.stream(
                    "POST",
                    target,
                    content=body,
                    headers=headers,
                    # Certificates are checked against the URL's host, not the pinned address.
                    extensions={"sni_hostname": server_name},
                ) as response,
            ):
                for chunk in response.iter_bytes():
                    excerpt += chunk
                    if len(excerpt) >= RESPONSE_EXCERPT_CHARS:
                        break
                code = response.status_code
            break
        except httpx.ConnectError as exc:
            # Nothing was sent: the next address of the host may answer (IPv6, then IPv4).
            if index + 1 < len(targets):
                continue
            return _Result(False, error=f"request failed: {type(exc).__name__}")
        except httpx.TimeoutException:
            return _Result(False, error=f"timed out after {timeout:g} s")
        except httpx.HTTPError as exc:
            # The exception's text may repeat the URL; the class name says what went wrong.
            return _Result(False, error=f"request failed: {type(exc).__name__}")
    if 200 <= code < 300:
        return _Result(True, status_code=code)
    text = excerpt[:RESPONSE_EXCERPT_CHARS].decode("utf-8", "replace")
    return _Result(False, status_code=code, error=f"HTTP {code}: {text}".strip())


def _call_hook(*, name: str, signal_id: int) -> _Result:
    hook = brain_hooks().get(name)
    if hook is None:
        return _Result(False, error=f"brain hook {name!r} is not registered in this worker")
    try:
        hook(signal_id)
    except Exception as exc:
        logger.warning(
            "signal %s: brain hook %r failed: %s", signal_id, name, type(exc).__name__, exc_info=exc
        )
        return _Result(False, error=f"{type(exc).__name__}: {exc}"[:500])
    return _Result(True)


def _finish(
    delivery: SignalDelivery, attempt: DeliveryAttempt, result: _Result, *, now: datetime
) -> str:
    """Record `result` on the attempt and move the (locked) delivery on; in a transaction."""
    started = attempt.started_at
    attempt.finished_at = now
    attempt.duration_ms = max(0, int((now - started).total_seconds() * 1000))
    attempt.status_code = result.status_code
    attempt.error = result.error[:500]
    delivery.claimed_until = None
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
        priority = _task_priority(delivery.signal.priority)
        transaction.on_commit(
            lambda: _enqueue_attempt(delivery.pk, countdown=delay, priority=priority), robust=True
        )
    attempt.save()
    delivery.save()
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
    return str(attempt.outcome)


def signal_delivery_attempt(*, delivery_id: int) -> str:
    """Make the next attempt of one delivery, if it is due; returns what happened.

    Duplicate or early task messages are harmless: the claim (a row lock and the state check)
    lets one attempt run at a time, and an early message re-queues itself for the due time.
    """
    now = timezone.now()
    with transaction.atomic():
        delivery = (
            SignalDelivery.objects.select_for_update()
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
        delivery.claimed_until = now + timedelta(
            seconds=float(settings.MOTOR_WEBHOOK_TIMEOUT_SECONDS) + CLAIM_MARGIN_S
        )
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
            result = _Result(False, error="the agent's webhook URL was removed", final=True)
        else:
            result = _post_webhook(
                agent=delivery.agent, signal=delivery.signal, url=url, number=attempt.number
            )
    else:
        result = _call_hook(name=delivery.name, signal_id=delivery.signal_id)

    with transaction.atomic():
        locked = (
            SignalDelivery.objects.select_for_update()
            .select_related("signal")
            .filter(pk=delivery_id)
            .first()
        )
        attempt = DeliveryAttempt.objects.select_for_update().get(pk=attempt.pk)
        if locked is None:
            return "missing"
        if locked.state != DeliveryState.DELIVERING or locked.attempts != attempt.number:
            # The sweeper took this attempt for lost and moved on; keep what really happened.
            attempt.finished_at = timezone.now()
            attempt.status_code = result.status_code
            attempt.error = result.error[:500]
            attempt.save(update_fields=["finished_at", "status_code", "error"])
            return "superseded"
        return _finish(locked, attempt, result, now=timezone.now())


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
                SignalDelivery.objects.select_for_update()
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
                _Result(False, error="the worker making this attempt was lost"),
                now=now,
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
