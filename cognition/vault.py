"""The per-agent credential vault (seed 001 "Credential Store"): names in the clear, values
encrypted at rest with the MultiFernet of `skills.crypto` (MOTOR_CREDENTIALS_KEY /
MOTOR_CREDENTIALS_KEY_FILE, comma-separated keys, first encrypts, all decrypt).

Each row's ciphertext is a JSON object `{name: value}`: binding the name into the ciphertext means
a value copied into another row (or another agent's row) decrypts to the wrong name and is refused.
Without a key (DEBUG only; settings refuse to start otherwise) `skills.crypto` stores marked
plaintext and logs a warning on every write.
"""

from __future__ import annotations

import re

from skills.crypto import decrypt_json, encrypt_json
from skills.errors import CredentialsUnreadable

from .errors import CredentialInvalid
from .models import CREDENTIAL_NAME_PATTERN

REDACTED = "[set]"
# The seeds' user credentials live in env vars named VAULT_<NAME>; the vault keeps <NAME>.
SEED_PREFIX = "VAULT_"
MAX_VALUE_CHARS = 8192  # characters; API keys and passwords, not files

_NAME_RE = re.compile(CREDENTIAL_NAME_PATTERN)


def normalize_name(name: str) -> str:
    """`VAULT_API_KEY` → `API_KEY`; validate against ^[A-Za-z_][A-Za-z0-9_]{0,63}$.

    The VAULT_ prefix (any case) is dropped only when what follows is a valid name: `vault_`
    and `VAULT_1X` are names of their own. So every name the API's documented pattern admits is
    accepted."""
    if not isinstance(name, str):
        raise CredentialInvalid(
            "A credential name must be a string.", details={"field": "name", "rule": "string"}
        )
    stripped = name
    if name.upper().startswith(SEED_PREFIX) and _NAME_RE.fullmatch(name[len(SEED_PREFIX) :]):
        stripped = name[len(SEED_PREFIX) :]
    if not _NAME_RE.fullmatch(stripped):
        raise CredentialInvalid(
            f"Credential name {name!r} is not allowed: names are 1-64 ASCII letters, digits and "
            "underscores, not starting with a digit (a VAULT_ prefix before a valid name is dropped).",
            details={"field": "name", "rule": "credential_name", "value": name[:80]},
        )
    return stripped


def validate_value(value: object, *, name: str) -> str:
    if not isinstance(value, str) or value == "":
        raise CredentialInvalid(
            f"Credential {name!r} needs a non-empty string value.",
            details={"field": "value", "rule": "non_empty_string", "name": name},
        )
    if len(value) > MAX_VALUE_CHARS:
        raise CredentialInvalid(
            f"Credential {name!r} is longer than {MAX_VALUE_CHARS} characters.",
            details={"field": "value", "rule": "max_length", "name": name},
        )
    return value


def seal(*, name: str, value: str) -> str:
    """Ciphertext of one credential, bound to its name."""
    return encrypt_json({name: value})


def unseal(*, name: str, token: str) -> str:
    """Inverse of `seal`; refuses ciphertext that was sealed for another name."""
    data = decrypt_json(token)
    if list(data) != [name]:
        raise CredentialsUnreadable(
            f"The stored value of credential {name!r} was sealed for another name; refusing it.",
            details={"name": name},
        )
    return data[name]
