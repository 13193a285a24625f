"""An agent's webhook: its URL, checked as delivery would check it, and its signing secret —
set, rotated and sealed to the agent — and the signature a receiver verifies.

Delivering signals to the webhook is `cognition.delivery`'s job.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import transaction
from django.utils import timezone

from sandbox.egress.addresses import forbidden_reason, system_resolver
from skills.crypto import decrypt_json, encrypt_json
from skills.errors import CredentialsUnreadable

from .errors import CognitionError
from .models import Agent

logger = logging.getLogger(__name__)

SIGNATURE_VERSION = "v1"
#: a receiver should refuse requests whose timestamp is further than this from its clock, seconds
SIGNATURE_TOLERANCE_S = 300
SECRET_PREFIX = "whsec_"  # noqa: S105 - a public marker, not a secret


class WebhookInvalid(CognitionError):
    """A webhook URL breaks a rule (`details`: field, rule)."""

    code = "webhook_invalid"


# --- signing -------------------------------------------------------------------------------------


def sign(*, secret: str, timestamp: int, body: bytes) -> str:
    """The `X-Motor-Signature` value for `body` sent at `timestamp` (Unix seconds)."""
    message = str(timestamp).encode() + b"." + body
    digest = hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()
    return f"{SIGNATURE_VERSION}={digest}"


def verify_signature(
    *,
    secret: str,
    timestamp: str,
    signature: str,
    body: bytes,
    now: float | None = None,
    tolerance_s: int = SIGNATURE_TOLERANCE_S,
) -> bool:
    """What a receiver does: the timestamp is recent and the signature matches the raw body."""
    try:
        sent_at = int(timestamp)
    except (TypeError, ValueError):
        return False
    current = time.time() if now is None else now
    if abs(current - sent_at) > tolerance_s:
        return False
    expected = sign(secret=secret, timestamp=sent_at, body=body)
    return hmac.compare_digest(expected.encode(), signature.encode())


def _seal_secret(agent_id: int, raw: str) -> str:
    # Bound to the agent: ciphertext copied to another agent's row is refused on read.
    return encrypt_json({"agent": str(agent_id), "webhook_secret": raw})


def webhook_secret(agent: Agent) -> str:
    """The agent's signing secret in the clear (for signing only; never log or render it)."""
    if not agent.webhook_secret:
        raise CredentialsUnreadable(f"Agent {agent.name!r} has no webhook signing secret.")
    data = decrypt_json(agent.webhook_secret)
    if data.get("agent") != str(agent.pk) or "webhook_secret" not in data:
        raise CredentialsUnreadable(
            f"The webhook signing secret of agent {agent.name!r} was sealed for another agent."
        )
    return data["webhook_secret"]


# --- configuring an agent's webhook (services) ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class IssuedWebhookSecret:
    """A new signing secret; `raw` is shown once and stored only encrypted."""

    agent: Agent
    raw: str


_url_validator = URLValidator(schemes=["http", "https"])


def _validate_webhook_url(url: str) -> str:
    url = (url or "").strip()
    if not url:
        return ""
    if len(url) > 500:
        raise WebhookInvalid(
            "A webhook URL is at most 500 characters.",
            details={"field": "webhook_url", "rule": "max_length"},
        )
    try:
        _url_validator(url)
    except ValidationError as exc:
        raise WebhookInvalid(
            "A webhook URL must be an absolute http:// or https:// URL.",
            details={"field": "webhook_url", "rule": "http_url"},
        ) from exc
    parts = urlsplit(url)
    if parts.username or parts.password:
        raise WebhookInvalid(
            "A webhook URL must not carry a user name or password: receivers authenticate "
            "requests by their signature.",
            details={"field": "webhook_url", "rule": "no_userinfo"},
        )
    _refuse_private_receiver(parts)
    return url


def _refuse_private_receiver(parts: Any) -> None:
    """Refuse a receiver that delivery would refuse: while MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES
    is off, a host that resolves to a loopback, private, link-local, metadata or own-host address.

    A host that does not resolve now is accepted (it may get its address later); delivery checks
    the addresses again on every attempt, since a name's answer may change after it was saved.
    """
    if settings.MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES:
        return
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        addresses = system_resolver(parts.hostname or "", port)
    except (OSError, UnicodeError):
        return
    for address in addresses:
        why = forbidden_reason(address)
        if why:
            raise WebhookInvalid(
                f"The webhook host resolves to a {why} address ({address}) and "
                "MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES is off, so no signal could be delivered "
                "to it. Set MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES=true for a receiver on this "
                "host or network.",
                details={
                    "field": "webhook_url",
                    "rule": "private_address",
                    "setting": "MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES",
                    "address": address,
                },
            )


def agent_set_webhook(
    *, agent: Agent, url: str, actor: AbstractBaseUser | str | None
) -> IssuedWebhookSecret | None:
    """Set (or clear, with "") the agent's webhook URL.

    An agent that gets a URL and has no signing secret yet gets one: it is returned (shown once)
    and stored encrypted. Returns None when no secret was generated.
    """
    url = _validate_webhook_url(url)
    raw = None
    with transaction.atomic():
        locked = Agent.objects.select_for_update().get(pk=agent.pk)
        locked.webhook_url = url
        fields = ["webhook_url"]
        if url and not locked.webhook_secret:
            raw = SECRET_PREFIX + secrets.token_urlsafe(32)
            locked.webhook_secret = _seal_secret(locked.pk, raw)
            locked.webhook_secret_created_at = timezone.now()
            fields += ["webhook_secret", "webhook_secret_created_at"]
        locked.save(update_fields=fields)
    logger.info(
        "webhook %s: agent=%s host=%s actor=%s",
        "set" if url else "cleared",
        locked.name,
        urlsplit(url).hostname or "-",
        _actor_label(actor),
    )
    return IssuedWebhookSecret(agent=locked, raw=raw) if raw else None


def agent_rotate_webhook_secret(
    *, agent: Agent, actor: AbstractBaseUser | str | None
) -> IssuedWebhookSecret:
    """Replace the agent's signing secret; the old one stops signing at once (shown once)."""
    raw = SECRET_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        locked = Agent.objects.select_for_update().get(pk=agent.pk)
        locked.webhook_secret = _seal_secret(locked.pk, raw)
        locked.webhook_secret_created_at = timezone.now()
        locked.save(update_fields=["webhook_secret", "webhook_secret_created_at"])
    logger.info("webhook secret rotated: agent=%s actor=%s", locked.name, _actor_label(actor))
    return IssuedWebhookSecret(agent=locked, raw=raw)


def _actor_label(actor: AbstractBaseUser | str | None) -> str:
    if actor is None:
        return "system"
    if isinstance(actor, str):
        return actor
    return actor.get_username()
