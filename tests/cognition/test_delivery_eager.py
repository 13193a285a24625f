"""Signal delivery with Celery in eager mode (development and debugging): a failing receiver gets
one attempt per dispatch or sweep instead of an endless chain of early retries."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from cognition.delivery import signal_delivery_sweep
from cognition.models import AttemptOutcome, DeliveryAttempt, DeliveryState, SignalDelivery
from cognition.webhooks import agent_set_webhook
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
    settings.MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True  # the receiver is on loopback
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


def test_a_receiver_on_a_private_address_is_refused_unless_allowed(
    eager: None,
    receiver: Receiver,  # noqa: F811
    settings,
) -> None:
    # given a receiver saved while private addresses were allowed (saving one is refused while
    # they are not; delivery checks again, for a setting or a DNS answer changed since)
    agent = make_agent("scout", owner=make_user("olivia"))
    receiver.secrets["/alpha"] = agent_set_webhook(
        agent=agent, url=f"{receiver.base_url}/alpha", actor="t"
    ).raw
    settings.MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False

    signal = signal_emit(agent_id=agent.pk, kind="motor_result", payload={"status": "completed"})

    # then the one attempt is a final failure naming why, and nothing reached the receiver
    delivery = SignalDelivery.objects.get(signal=signal, target="webhook")
    assert (delivery.state, delivery.attempts) == (DeliveryState.FAILED, 1)
    (attempt,) = DeliveryAttempt.objects.filter(delivery=delivery)
    assert attempt.outcome == AttemptOutcome.FAILED
    assert attempt.error == (
        "the webhook host resolves to a loopback address (127.0.0.1); set "
        "MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES=true to deliver to such receivers"
    )
    assert receiver.requests == []


def _self_signed(directory) -> tuple[str, str]:
    """A certificate for the name localhost (not for its address) and its key, as PEM files."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            # the name only: a check against the dialled address would fail
            x509.SubjectAlternativeName([x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_path), str(key_path)


def test_an_https_receiver_is_reached_by_name_with_its_certificate_checked(
    eager: None, tmp_path, monkeypatch
) -> None:
    import ssl
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    cert, key = _self_signed(tmp_path)
    seen: list[tuple[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            seen.append((self.path, self.headers["Host"]))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # the worker trusts the receiver's certificate (as a deployment trusts its CA)
    monkeypatch.setenv("SSL_CERT_FILE", cert)
    try:
        agent = make_agent("scout", owner=make_user("olivia"))
        agent_set_webhook(agent=agent, url=f"https://localhost:{port}/tls", actor="t")

        signal = signal_emit(
            agent_id=agent.pk, kind="motor_result", payload={"status": "completed"}
        )

        delivery = SignalDelivery.objects.get(signal=signal, target="webhook")
        assert (delivery.state, delivery.last_error) == (DeliveryState.DELIVERED, "")
        # the name was kept for Host and the certificate check, the checked address dialled
        assert seen == [("/tls", f"localhost:{port}")]
    finally:
        server.shutdown()
        server.server_close()
