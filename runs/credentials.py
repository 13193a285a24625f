"""Credential values inside the runtime: the run's saved values and redaction by placeholder.

A value saved by the model with `save_credential` is kept encrypted on the run
(`MotorRun.saved_credentials`, Fernet via `skills.crypto`) and otherwise only in the memory of
one slice. Everything the runtime stores or sends to the model goes through `redact`, which
swaps every known value for its ``<credential:NAME>`` placeholder.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from runs.models import MotorRun
from skills.crypto import decrypt_json, encrypt_json


def placeholder(name: str) -> str:
    return f"<credential:{name}>"


def saved_values(run: MotorRun) -> dict[str, str]:
    """The values this run saved so far (decrypted, in memory only)."""
    return decrypt_json(run.saved_credentials) if run.saved_credentials else {}


def store_saved(run: MotorRun, values: Mapping[str, str]) -> None:
    """Merge `values` into the run's encrypted store (in memory; the caller saves the row)."""
    merged = {**saved_values(run), **values}
    run.saved_credentials = encrypt_json(merged)


def redact(value: Any, secrets: Mapping[str, str]) -> Any:
    """`value` (str, list, dict, nested) with every secret value replaced by its placeholder.

    Longer values are replaced first, so a value that contains another is hidden whole.
    """
    ordered = sorted(
        ((name, secret) for name, secret in secrets.items() if secret),
        key=lambda item: len(item[1]),
        reverse=True,
    )
    if not ordered:
        return value
    return _redact(value, ordered)


def _redact(value: Any, ordered: list[tuple[str, str]]) -> Any:
    if isinstance(value, str):
        for name, secret in ordered:
            if secret in value:
                value = value.replace(secret, placeholder(name))
        return value
    if isinstance(value, list):
        return [_redact(item, ordered) for item in value]
    if isinstance(value, dict):
        return {key: _redact(item, ordered) for key, item in value.items()}
    return value


def intercept_save_call(arguments_json: str) -> tuple[str, str, str] | None:
    """Split a save_credential call's JSON arguments into (name, value, redacted JSON).

    The redacted JSON carries ``<credential:NAME>`` where the value was. None when the arguments
    are not an object with a string `name` and a non-empty string `value` (the call then fails
    with invalid_args, and nothing of it is kept but a redacted copy).
    """
    try:
        arguments = json.loads(arguments_json or "{}")
    except json.JSONDecodeError:
        return None
    if not isinstance(arguments, dict):
        return None
    name, value = arguments.get("name"), arguments.get("value")
    if not isinstance(name, str) or not isinstance(value, str) or not value:
        return None
    redacted = {**arguments, "value": placeholder(name)}
    return name, value, json.dumps(redacted)


def scrub_unparsable_save_call(arguments_json: str) -> str:
    """Arguments of a malformed save_credential call as they may be stored: without any value."""
    try:
        arguments = json.loads(arguments_json or "{}")
    except json.JSONDecodeError:
        return json.dumps({"_unparsable": True})
    if not isinstance(arguments, dict):
        return json.dumps({"_unparsable": True})
    if "value" in arguments:
        arguments = {**arguments, "value": "<redacted>"}
    return json.dumps(arguments)
