"""Idempotency-Key replays of POST /api/v1/runs/: within the record's lifetime the same key
with the same request answers the first response (status and body); the same key with another
request is a 409 idempotency_conflict. Records are written in the transaction that creates the
run (cognition.api.runs), so only a created run is remembered."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta

from django.utils import timezone
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from cognition.errors import CognitionError
from cognition.models import IdempotencyRecord

IDEMPOTENCY_HEADER = "Idempotency-Key"
MAX_IDEMPOTENCY_KEY_CHARS = 255


class IdempotencyConflict(CognitionError):
    code = "idempotency_conflict"
    http_status = 409


class KeyTaken(Exception):
    """A concurrent request with the same Idempotency-Key committed its run first."""


def remembered_response(
    *, scope: str, key: str, fingerprint: str, ttl: timedelta
) -> Response | None:
    """The first response to `key` when it is still remembered; a conflict when it belongs to
    another request; None when the key is free (an expired record is removed)."""
    record = IdempotencyRecord.objects.filter(scope=scope, key=key).first()
    if record is None:
        return None
    if record.created_at < timezone.now() - ttl:
        IdempotencyRecord.objects.filter(pk=record.pk).delete()  # expired: the key is free again
        return None
    if record.fingerprint != fingerprint:
        raise IdempotencyConflict(
            f"Idempotency-Key {key!r} was used within the last 24 h for a different "
            "request; use a new key for a new request.",
            details={"rule": "idempotency_key_reuse", "key": key},
        )
    return Response(
        record.response_body,
        status=record.response_status,
        headers={"Idempotent-Replayed": "true"},
    )


def idempotency_key_check(key: str) -> None:
    """Raise a 400 ValidationError unless `key` is 1-255 printable ASCII characters without
    spaces."""
    if not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY_CHARS or not all(" " < c < "\x7f" for c in key):
        raise ValidationError(
            {IDEMPOTENCY_HEADER: ["1-255 printable ASCII characters without spaces."]}
        )


def request_fingerprint(request: Request, *, agent_id: int, trigger: str) -> str:
    """What makes two requests with one key "the same request": path, agent, trigger and body
    (hashed; dict order does not matter)."""
    return hashlib.sha256(
        json.dumps(
            {"path": request.path, "agent": agent_id, "trigger": trigger, "body": request.data},
            sort_keys=True,
            default=str,
        ).encode()
    ).hexdigest()
