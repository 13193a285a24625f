"""One webhook POST of a signal: the body, the signed headers, the receiver's addresses checked
and pinned, and the answer read as an attempt's result. Retries, claims and records are
`cognition.delivery`'s job.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings

from runs.models import Signal
from sandbox.egress.addresses import forbidden_reason, system_resolver
from skills.errors import CredentialsUnreadable

from .models import Agent
from .webhooks import sign, webhook_secret

SIGNATURE_HEADER = "X-Motor-Signature"
TIMESTAMP_HEADER = "X-Motor-Timestamp"
SIGNAL_ID_HEADER = "X-Motor-Signal-Id"
ATTEMPT_HEADER = "X-Motor-Delivery-Attempt"
USER_AGENT = "MotorCortex-Webhook/1"
#: characters of a receiver's answer kept in an attempt's error
RESPONSE_EXCERPT_CHARS = 200

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


@dataclass(frozen=True, slots=True)
class AttemptResult:
    delivered: bool
    status_code: int | None = None
    error: str = ""
    #: no later attempt can succeed (e.g. the webhook URL was removed)
    final: bool = False


def pin_addresses(url: str) -> tuple[list[str], str, str] | AttemptResult:
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
        return AttemptResult(False, error=f"cannot resolve the webhook host: {type(exc).__name__}")
    if not addresses:
        return AttemptResult(False, error="the webhook host has no address")
    if not settings.MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES:
        for address in addresses:
            why = forbidden_reason(address)
            if why:
                return AttemptResult(
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


def post_webhook(*, agent: Agent, signal: Signal, url: str, number: int) -> AttemptResult:
    try:
        secret = webhook_secret(agent)
    except CredentialsUnreadable as exc:
        return AttemptResult(False, error=f"signing secret unavailable: {exc.message}")
    pinned = pin_addresses(url)
    if isinstance(pinned, AttemptResult):
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
            return AttemptResult(False, error=f"request failed: {type(exc).__name__}")
        except httpx.TimeoutException:
            return AttemptResult(False, error=f"timed out after {timeout:g} s")
        except httpx.HTTPError as exc:
            # The exception's text may repeat the URL; the class name says what went wrong.
            return AttemptResult(False, error=f"request failed: {type(exc).__name__}")
    if 200 <= code < 300:
        return AttemptResult(True, status_code=code)
    text = excerpt[:RESPONSE_EXCERPT_CHARS].decode("utf-8", "replace")
    return AttemptResult(False, status_code=code, error=f"HTTP {code}: {text}".strip())
