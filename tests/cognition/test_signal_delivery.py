"""Signal delivery through a real Celery worker process to a real HTTP receiver (a local
http.server in a thread that verifies every signature), and to brain hooks in the worker."""

from __future__ import annotations

import json
import os
import signal as os_signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.test import Client
from django.utils import timezone

from cognition.brain.services import BRAIN_HOOK_NAME
from cognition.cortex.hook import CORTEX_HOOK_NAME
from cognition.delivery import (
    ATTEMPT_HEADER,
    SIGNAL_ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    on_signal_committed,
    signal_data,
    signal_delivery_sweep,
    wakeup_redis,
)
from cognition.models import (
    Agent,
    AttemptOutcome,
    BrainWake,
    DeliveryAttempt,
    DeliveryState,
    DeliveryTarget,
    SignalDelivery,
)
from cognition.webhooks import agent_rotate_webhook_secret, agent_set_webhook, verify_signature
from config.celery import app as celery_app
from runs.models import Signal
from runs.outbox import signal_committed, signal_emit
from tests.skills.admin_support import PASSWORD, make_agent, make_user

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]
QUEUE = "h-test-delivery"
BASE_S, CAP_S, MAX_ATTEMPTS, TIMEOUT_S = 0.3, 2.0, 3, 1.0
WORKER_SETTINGS = {
    "MOTOR_SIGNAL_QUEUE": QUEUE,
    "MOTOR_SIGNAL_BACKOFF_BASE_SECONDS": str(BASE_S),
    "MOTOR_SIGNAL_BACKOFF_CAP_SECONDS": str(CAP_S),
    "MOTOR_SIGNAL_DELIVERY_MAX_ATTEMPTS": str(MAX_ATTEMPTS),
    "MOTOR_WEBHOOK_TIMEOUT_SECONDS": str(TIMEOUT_S),
    "MOTOR_SIGNAL_SWEEP_GRACE_SECONDS": "0",
    # the test receiver listens on loopback
    "MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES": "true",
}


# --- the receiver --------------------------------------------------------------------------------


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    verified: bool


@dataclass
class Receiver:
    """Answers per path: a list of statuses to play in order (the last one repeats)."""

    base_url: str = ""
    secrets: dict[str, str] = field(default_factory=dict)
    plans: dict[str, list[int]] = field(default_factory=dict)
    requests: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on(self, path: str) -> list[Received]:
        with self.lock:
            return [r for r in self.requests if r.path == path]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            secret = state.secrets.get(self.path, "")
            verified = bool(secret) and verify_signature(
                secret=secret,
                timestamp=self.headers.get(TIMESTAMP_HEADER, ""),
                signature=self.headers.get(SIGNATURE_HEADER, ""),
                body=body,
            )
            with state.lock:
                state.requests.append(Received(self.path, dict(self.headers), body, verified))
                plan = state.plans.get(self.path, [200])
                status = plan.pop(0) if len(plan) > 1 else plan[0]
            if self.path == "/slow":
                time.sleep(TIMEOUT_S * 3)
            if not verified:
                status = 401
            self.send_response(status)
            if status in (301, 302, 307, 308):
                self.send_header("Location", "/redirect-target")
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"receiver says %d" % status)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


# --- the worker ----------------------------------------------------------------------------------


def _database_url() -> str:
    params = connection.settings_dict
    user = params.get("USER") or "postgres"
    password = f":{params['PASSWORD']}" if params.get("PASSWORD") else ""
    host = params.get("HOST") or "127.0.0.1"
    port = params.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{params['NAME']}"


def _purge() -> None:
    """Empty the delivery queue, and the built-in brain's, whose wake-ups no worker reads here."""
    with celery_app.connection_for_write() as conn:
        conn.default_channel.queue_purge(QUEUE)
        conn.default_channel.queue_purge(django_settings.COGNITION_BRAIN_QUEUE or "celery")


@pytest.fixture(scope="module")
def worker(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One Celery worker process reading the delivery queue, with two brain hooks registered.
    Yields the directory of its log and of the hooks' log."""
    _purge()
    directory = tmp_path_factory.mktemp("delivery-worker")
    env = {
        **os.environ,
        **WORKER_SETTINGS,
        "DATABASE_URL": _database_url(),
        "CELERY_TASK_ALWAYS_EAGER": "false",
        "TEST_HOOK_LOG": str(directory / "hooks.log"),
        "LOG_LEVEL": "DEBUG",
    }
    log = (directory / "worker.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "--pool=threads",
            "--concurrency=4",
            "--queues",
            QUEUE,
            "--include",
            "tests.cognition.worker_brain_hooks",
            "--loglevel=DEBUG",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield directory
    finally:
        os.killpg(process.pid, os_signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, os_signal.SIGKILL)
            process.wait()
        log.close()
        _purge()


@pytest.fixture(autouse=True)
def same_settings_as_the_worker(settings) -> None:
    for name, value in WORKER_SETTINGS.items():
        current = getattr(settings, name)
        setattr(
            settings, name, value == "true" if isinstance(current, bool) else type(current)(value)
        )


def wait_for(predicate: Callable[[], Any], what: str, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def emit(agent: Agent, status: str = "completed") -> Signal:
    return signal_emit(agent_id=agent.pk, kind="motor_result", payload={"status": status})


def webhook_of(signal: Signal) -> SignalDelivery:
    return SignalDelivery.objects.get(signal=signal, target=DeliveryTarget.WEBHOOK)


def webhook_state(signal: Signal) -> str | None:
    """The state of the signal's webhook delivery; None before it is dispatched."""
    return (
        SignalDelivery.objects.filter(signal=signal, target=DeliveryTarget.WEBHOOK)
        .values_list("state", flat=True)
        .first()
    )


def settled(signal: Signal) -> bool:
    """Every delivery of the signal reached a final state."""
    states = list(SignalDelivery.objects.filter(signal=signal).values_list("state", flat=True))
    return bool(states) and all(
        s in (DeliveryState.DELIVERED, DeliveryState.FAILED, DeliveryState.SKIPPED) for s in states
    )


def attempts(delivery: SignalDelivery) -> list[DeliveryAttempt]:
    return list(DeliveryAttempt.objects.filter(delivery=delivery).order_by("number"))


def _redis_text() -> str:
    """Every key and value in this test run's Redis database (broker, results, wake-ups)."""
    client = wakeup_redis()
    parts: list[str] = []
    for key in client.scan_iter():
        kind = client.type(key).decode()
        if kind == "string":
            parts.append(repr(client.get(key)))
        elif kind == "list":
            parts.append(repr(client.lrange(key, 0, -1)))
        elif kind == "hash":
            parts.append(repr(client.hgetall(key)))
        elif kind == "set":
            parts.append(repr(client.smembers(key)))
        elif kind == "zset":
            parts.append(repr(client.zrange(key, 0, -1)))
        parts.append(repr(key))
    return "\n".join(parts)


def hook_log(worker: Path) -> list[str]:
    path = worker / "hooks.log"
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def alpha(receiver: Receiver) -> tuple[Agent, str]:
    agent = make_agent("alpha", owner=make_user("olivia"))
    issued = agent_set_webhook(agent=agent, url=f"{receiver.base_url}/alpha", actor="test")
    assert issued is not None
    receiver.secrets["/alpha"] = issued.raw
    return issued.agent, issued.raw


# --- tests ---------------------------------------------------------------------------------------


def test_a_signal_is_posted_once_signed_and_the_brain_hooks_are_called(
    worker: Path, receiver: Receiver, alpha: tuple[Agent, str]
) -> None:
    agent, secret = alpha
    # when a signal commits
    signal = emit(agent)
    wait_for(lambda: settled(signal), "the deliveries")

    # then the webhook got it once, signed with the agent's secret, as the documented JSON
    (request,) = receiver.on("/alpha")
    assert request.verified
    assert json.loads(request.body) == signal_data(Signal.objects.get(pk=signal.pk))
    assert set(json.loads(request.body)) == {
        "id",
        "seq",
        "kind",
        "run_id",
        "agent",
        "created_at",
        "payload",
    }
    assert request.headers[SIGNAL_ID_HEADER] == str(signal.pk)
    assert request.headers[ATTEMPT_HEADER] == "1"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers[SIGNATURE_HEADER].startswith("v1=")
    # a changed body or a stale timestamp does not verify
    assert not verify_signature(
        secret=secret,
        timestamp=request.headers[TIMESTAMP_HEADER],
        signature=request.headers[SIGNATURE_HEADER],
        body=request.body + b" ",
    )
    assert not verify_signature(
        secret=secret,
        timestamp=request.headers[TIMESTAMP_HEADER],
        signature=request.headers[SIGNATURE_HEADER],
        body=request.body,
        now=int(request.headers[TIMESTAMP_HEADER]) + 301,
    )
    [webhook_attempt] = attempts(webhook_of(signal))
    assert (webhook_attempt.outcome, webhook_attempt.status_code, webhook_attempt.url) == (
        AttemptOutcome.DELIVERED,
        200,
        f"{receiver.base_url}/alpha",
    )
    # and every brain hook was called; the failing one was retried without holding up the other
    deliveries = {
        d.name: d for d in SignalDelivery.objects.filter(signal=signal, target=DeliveryTarget.HOOK)
    }
    assert {name: d.state for name, d in deliveries.items()} == {
        BRAIN_HOOK_NAME: DeliveryState.DELIVERED,  # the built-in brain, registered everywhere
        CORTEX_HOOK_NAME: DeliveryState.DELIVERED,  # the skill cortex, registered everywhere
        "flaky": DeliveryState.DELIVERED,
        "recorder": DeliveryState.DELIVERED,
    }
    assert BrainWake.objects.filter(signal_id=signal.pk).exists()
    assert [(a.outcome, a.error) for a in attempts(deliveries["flaky"])] == [
        (AttemptOutcome.RETRY, f"RuntimeError: brain busy with signal {signal.pk}"),
        (AttemptOutcome.DELIVERED, ""),
    ]
    assert [a.outcome for a in attempts(deliveries["recorder"])] == [AttemptOutcome.DELIVERED]
    assert sorted(hook_log(worker)) == sorted([f"recorder {signal.pk}", f"flaky {signal.pk}"])
    # the secret is in no request, attempt row or worker log line
    assert secret not in request.body.decode() + json.dumps(request.headers)
    assert secret not in (worker / "worker.log").read_text()
    assert not DeliveryAttempt.objects.filter(error__contains=secret).exists()
    assert secret not in _redis_text()


def test_a_receiver_failing_twice_gets_exactly_three_attempts_with_growing_delays(
    worker: Path, receiver: Receiver
) -> None:
    agent = make_agent("flaky-brain", owner=make_user("fay"))
    issued = agent_set_webhook(agent=agent, url=f"{receiver.base_url}/flaky", actor="test")
    receiver.secrets["/flaky"] = issued.raw
    receiver.plans["/flaky"] = [500, 502, 200]

    signal = emit(agent)
    wait_for(lambda: webhook_state(signal) == DeliveryState.DELIVERED, "the third attempt")

    tries = attempts(webhook_of(signal))
    assert [(a.number, a.outcome, a.status_code) for a in tries] == [
        (1, AttemptOutcome.RETRY, 500),
        (2, AttemptOutcome.RETRY, 502),
        (3, AttemptOutcome.DELIVERED, 200),
    ]
    assert [a.error for a in tries] == [
        "HTTP 500: receiver says 500",
        "HTTP 502: receiver says 502",
        "",
    ]
    # the recorded waits double (base 0.3 s), and no attempt started before its due time
    assert [(a.next_retry_at - a.finished_at) for a in tries[:2]] == [
        timedelta(seconds=BASE_S),
        timedelta(seconds=2 * BASE_S),
    ]
    assert tries[1].started_at >= tries[0].next_retry_at
    assert tries[2].started_at >= tries[1].next_retry_at
    assert tries[2].next_retry_at is None
    # the receiver saw the same signal three times, with the same id and body
    requests = receiver.on("/flaky")
    assert [r.headers[ATTEMPT_HEADER] for r in requests] == ["1", "2", "3"]
    assert {r.headers[SIGNAL_ID_HEADER] for r in requests} == {str(signal.pk)}
    assert len({r.body for r in requests}) == 1
    assert all(r.verified for r in requests)
    delivery = webhook_of(signal)
    assert (delivery.attempts, delivery.last_error, delivery.next_attempt_at) == (3, "", None)


def test_after_the_last_attempt_the_delivery_is_failed_and_shown_in_the_admin(
    worker: Path, receiver: Receiver
) -> None:
    owner = make_user("root", superuser=True)
    agent = make_agent("down-brain", owner=owner)
    issued = agent_set_webhook(agent=agent, url=f"{receiver.base_url}/down", actor="test")
    receiver.secrets["/down"] = issued.raw
    receiver.plans["/down"] = [503]

    signal = emit(agent)
    wait_for(lambda: webhook_state(signal) == DeliveryState.FAILED, "the last attempt")

    tries = attempts(webhook_of(signal))
    assert [(a.outcome, a.status_code) for a in tries] == [
        (AttemptOutcome.RETRY, 503),
        (AttemptOutcome.RETRY, 503),
        (AttemptOutcome.FAILED, 503),
    ]
    assert len(receiver.on("/down")) == MAX_ATTEMPTS
    assert webhook_of(signal).last_error == "HTTP 503: receiver says 503"
    # no further attempt is queued: the sweeper finds nothing to re-queue for it
    assert webhook_of(signal).pk not in signal_delivery_sweep()["requeued"]

    client = Client()
    assert client.login(username="root", password=PASSWORD)
    page = client.get(f"/admin/runs/signal/{signal.pk}/change/").content.decode()
    assert "Delivery attempts (history)" in page
    # two webhook retries and the flaky brain hook's one; the webhook's final failure
    assert page.count("Failed, will retry") == 3
    assert page.count("Failed, final") == 1
    listing = client.get("/admin/runs/signal/", {"deliveries__state": "failed"}).content.decode()
    assert f"/admin/runs/signal/{signal.pk}/change/" in listing
    failed = client.get("/admin/cognition/deliveryattempt/", {"outcome": "failed"}).content.decode()
    assert "HTTP 503: receiver says 503" in failed
    deliveries = client.get("/admin/cognition/signaldelivery/", {"state": "failed"}).content
    assert b"down-brain" in deliveries
    for text in (page, listing, failed, deliveries.decode()):
        assert issued.raw not in text


def test_redirects_are_not_followed_and_a_slow_receiver_times_out(
    worker: Path, receiver: Receiver
) -> None:
    owner = make_user("rita")
    moved = make_agent("moved-brain", owner=owner)
    slow = make_agent("slow-brain", owner=owner)
    receiver.secrets["/redirect"] = agent_set_webhook(
        agent=moved, url=f"{receiver.base_url}/redirect", actor="t"
    ).raw
    receiver.secrets["/redirect-target"] = receiver.secrets["/redirect"]
    receiver.secrets["/slow"] = agent_set_webhook(
        agent=slow, url=f"{receiver.base_url}/slow", actor="t"
    ).raw
    receiver.plans["/redirect"] = [302]

    first, second = emit(moved), emit(slow)
    wait_for(lambda: webhook_state(first) == DeliveryState.FAILED, "the redirected one")
    wait_for(lambda: webhook_state(second) == DeliveryState.FAILED, "the slow one", 90)

    assert [a.status_code for a in attempts(webhook_of(first))] == [302, 302, 302]
    assert receiver.on("/redirect-target") == []
    assert [(a.status_code, a.error) for a in attempts(webhook_of(second))] == [
        (None, f"timed out after {TIMEOUT_S:g} s")
    ] * MAX_ATTEMPTS


def test_a_second_agent_never_receives_the_first_agents_signals(
    worker: Path, receiver: Receiver, alpha: tuple[Agent, str]
) -> None:
    agent, _ = alpha
    bravo = make_agent("bravo", owner=make_user("bob"))
    receiver.secrets["/bravo"] = agent_set_webhook(
        agent=bravo, url=f"{receiver.base_url}/bravo", actor="t"
    ).raw

    mine = [emit(agent), emit(agent)]
    theirs = [emit(bravo)]
    for signal in mine + theirs:
        wait_for(lambda s=signal: webhook_state(s) == DeliveryState.DELIVERED, "deliveries")

    def ids(path: str) -> list[int]:
        return sorted(json.loads(r.body)["id"] for r in receiver.on(path) if r.verified)

    assert ids("/alpha") == sorted(s.pk for s in mine)
    assert ids("/bravo") == [theirs[0].pk]
    assert len(receiver.requests) == 3


def test_the_sweeper_dispatches_a_signal_whose_queueing_was_lost(
    worker: Path, receiver: Receiver, alpha: tuple[Agent, str]
) -> None:
    agent, _ = alpha
    # given a signal committed while the process crashed before queueing its delivery
    signal_committed.disconnect(dispatch_uid="cognition.delivery")
    try:
        signal = emit(agent)
    finally:
        signal_committed.connect(on_signal_committed, dispatch_uid="cognition.delivery")
    assert not SignalDelivery.objects.filter(signal=signal).exists()

    # when the sweeper runs (grace 0 s here), then the signal is dispatched and delivered
    assert signal_delivery_sweep()["dispatched"] == [signal.pk]
    wait_for(lambda: settled(signal), "the swept signal")
    assert [a.outcome for a in attempts(webhook_of(signal))] == [AttemptOutcome.DELIVERED]
    assert len(receiver.on("/alpha")) == 1
    # and a second pass finds nothing left to do
    assert signal_delivery_sweep() == {"dispatched": [], "requeued": [], "lost": []}


def test_a_due_attempt_whose_task_message_was_lost_is_requeued_by_the_sweeper(
    worker: Path, receiver: Receiver, alpha: tuple[Agent, str]
) -> None:
    agent, _ = alpha
    signal_committed.disconnect(dispatch_uid="cognition.delivery")
    try:
        signal = emit(agent)
    finally:
        signal_committed.connect(on_signal_committed, dispatch_uid="cognition.delivery")
    # given a delivery waiting for its retry whose task message is gone (a broker restart)
    delivery = SignalDelivery.objects.create(
        signal=signal,
        agent=agent,
        target=DeliveryTarget.WEBHOOK,
        state=DeliveryState.RETRYING,
        attempts=0,
        next_attempt_at=timezone.now() - timedelta(minutes=1),
    )

    assert signal_delivery_sweep()["requeued"] == [delivery.pk]
    wait_for(lambda: webhook_state(signal) == DeliveryState.DELIVERED, "the requeued attempt")

    assert [(a.number, a.outcome) for a in attempts(delivery)] == [(1, AttemptOutcome.DELIVERED)]
    assert len(receiver.on("/alpha")) == 1


def test_an_attempt_whose_worker_died_is_recorded_as_lost_and_retried(
    worker: Path, receiver: Receiver, alpha: tuple[Agent, str]
) -> None:
    agent, _ = alpha
    signal_committed.disconnect(dispatch_uid="cognition.delivery")
    try:
        signal = emit(agent)
    finally:
        signal_committed.connect(on_signal_committed, dispatch_uid="cognition.delivery")
    # given an attempt that was claimed and never finished (its worker was killed mid-call)
    started = timezone.now() - timedelta(minutes=5)
    delivery = SignalDelivery.objects.create(
        signal=signal,
        agent=agent,
        target=DeliveryTarget.WEBHOOK,
        state=DeliveryState.DELIVERING,
        attempts=1,
        claimed_until=started + timedelta(seconds=61),
    )
    DeliveryAttempt.objects.create(
        delivery=delivery,
        signal=signal,
        number=1,
        target=DeliveryTarget.WEBHOOK,
        url=agent.webhook_url,
        started_at=started,
    )

    assert signal_delivery_sweep()["lost"] == [delivery.pk]
    wait_for(lambda: webhook_state(signal) == DeliveryState.DELIVERED, "the retry")

    assert [(a.number, a.outcome) for a in attempts(delivery)] == [
        (1, AttemptOutcome.LOST),
        (2, AttemptOutcome.DELIVERED),
    ]
    assert attempts(delivery)[0].error == "the worker making this attempt was lost"
    assert len(receiver.on("/alpha")) == 1


def test_a_rotated_secret_signs_the_next_delivery_and_the_old_one_no_longer_verifies(
    worker: Path, receiver: Receiver, alpha: tuple[Agent, str]
) -> None:
    agent, old = alpha
    new = agent_rotate_webhook_secret(agent=agent, actor="test").raw
    assert new != old
    receiver.secrets["/alpha"] = new

    signal = emit(agent)
    wait_for(lambda: webhook_state(signal) == DeliveryState.DELIVERED, "the delivery")

    (request,) = receiver.on("/alpha")
    assert request.verified
    assert not verify_signature(
        secret=old,
        timestamp=request.headers[TIMESTAMP_HEADER],
        signature=request.headers[SIGNATURE_HEADER],
        body=request.body,
    )
    stored = Agent.objects.get(pk=agent.pk).webhook_secret
    assert old not in stored and new not in stored
