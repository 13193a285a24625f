"""Encryption at rest of policy credential values (Fernet from `cryptography`).

`settings.MOTOR_CREDENTIALS_KEY` is a comma-separated list of Fernet keys used as a MultiFernet:
the first key encrypts, every key decrypts, so keys rotate by prepending a new one. The key never
touches the database. Without a key (allowed only with DEBUG, settings refuse to start otherwise)
values are stored as marked plaintext and a warning is logged on every write.
"""

from __future__ import annotations

import json
import logging
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from skills.errors import CredentialsUnreadable

logger = logging.getLogger(__name__)

PLAINTEXT_PREFIX = "plain:"


@lru_cache(maxsize=4)
def _fernet_for(keys: str) -> MultiFernet:
    try:
        return MultiFernet([Fernet(k.strip().encode()) for k in keys.split(",") if k.strip()])
    except (ValueError, TypeError) as exc:
        raise ImproperlyConfigured(
            "MOTOR_CREDENTIALS_KEY must be a comma-separated list of Fernet keys "
            "(32 url-safe base64-encoded bytes each)."
        ) from exc


def _fernet() -> MultiFernet | None:
    keys = (getattr(settings, "MOTOR_CREDENTIALS_KEY", "") or "").strip()
    if not keys:
        if not settings.DEBUG:
            raise ImproperlyConfigured("MOTOR_CREDENTIALS_KEY is required outside DEBUG.")
        return None
    return _fernet_for(keys)


def encrypt_json(value: dict[str, str]) -> str:
    """Serialise `value` as JSON and encrypt it; an empty dict becomes an empty string."""
    if not value:
        return ""
    payload = json.dumps(value, sort_keys=True, separators=(",", ":"))
    fernet = _fernet()
    if fernet is None:
        logger.warning(
            "MOTOR_CREDENTIALS_KEY is not set (DEBUG): credential values are stored unencrypted"
        )
        return PLAINTEXT_PREFIX + payload
    return fernet.encrypt(payload.encode()).decode()


def decrypt_json(token: str) -> dict[str, str]:
    """Inverse of `encrypt_json`. Raises `CredentialsUnreadable` when no configured key fits."""
    if not token:
        return {}
    if token.startswith(PLAINTEXT_PREFIX):
        # Written by a DEBUG instance without a key; re-encrypted on the next write.
        data = json.loads(token[len(PLAINTEXT_PREFIX) :])
    else:
        fernet = _fernet()
        if fernet is None:
            raise CredentialsUnreadable(
                "Credential values are encrypted but MOTOR_CREDENTIALS_KEY is not set."
            )
        try:
            data = json.loads(fernet.decrypt(token.encode()))
        except InvalidToken as exc:
            raise CredentialsUnreadable(
                "Credential values cannot be decrypted with any key in MOTOR_CREDENTIALS_KEY "
                "(was the key rotated without keeping the old one?)."
            ) from exc
    if not isinstance(data, dict):
        raise CredentialsUnreadable("Stored credential values are not a JSON object.")
    return {str(k): str(v) for k, v in data.items()}
