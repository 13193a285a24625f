"""Credential values inside the runtime: the run's saved values and redaction by placeholder.

A value saved by the model with `save_credential` is kept encrypted on the run
(`MotorRun.saved_credentials`, Fernet via `skills.crypto`) and otherwise only in the memory of
one slice. Everything the runtime stores or sends to the model goes through `redact`, which
swaps every known value for its ``<credential:NAME>`` placeholder.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils.module_loading import import_string

from runs.db_outage import DATABASE_UNAVAILABLE
from runs.errors import CredentialResolverFailed
from runs.lease import (
    Lease,
    lease_fence,
    lease_release,
)
from runs.models import (
    Attempt,
    MotorRun,
    RunStatus,
)
from runs.records import SliceOutcome, event_record, motor_result_emit
from runs.tools import SAVE_CREDENTIAL
from skills.crypto import decrypt_json, encrypt_json

logger = logging.getLogger(__name__)


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


def run_credentials_read(run: MotorRun) -> dict[str, str]:
    """Values of the run's credential names, from the resolver named in settings.

    The runtime knows no vault: the brain side registers a callable
    ``resolver(*, agent_id: int, run_id: str, names: list[str]) -> dict[str, str]`` as
    MOTOR_CREDENTIAL_RESOLVER (a dotted path). A name it has no value for is left out (the run
    then waits for it, see `run_credentials_missing`). Values live only in this process's memory
    for the one call; they are never stored, logged or sent to the model.

    Raises CredentialResolverFailed (naming the resolver and the error type, never a value)
    when the resolver cannot be imported, raises, or returns something else than a mapping of
    strings.
    """
    path = getattr(settings, "MOTOR_CREDENTIAL_RESOLVER", "")
    if not run.credential_names or not path:
        return {}
    try:
        resolver = import_string(path)
        values = resolver(agent_id=run.agent_id, run_id=run.id, names=list(run.credential_names))
        values = dict(values)
    except DATABASE_UNAVAILABLE:
        raise  # the database, not the resolver, failed: the slice ends and the run goes on
    except Exception as exc:
        # The exception's text could quote what the resolver read; log and report its type only.
        logger.warning("run %s: credential resolver %s raised %s", run.id, path, type(exc).__name__)
        raise CredentialResolverFailed(
            f"the credential resolver {path} failed ({type(exc).__name__}); the run's "
            f"credentials ({', '.join(run.credential_names)}) could not be read",
            run_id=run.id,
        ) from None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in values.items()):
        raise CredentialResolverFailed(
            f"the credential resolver {path} returned something else than names and string values",
            run_id=run.id,
        )
    return values


def run_credentials_once(
    resolve: Callable[[MotorRun], dict[str, str]],
) -> Callable[[MotorRun], dict[str, str]]:
    """`resolve`, asked at most once per run (a failure is not remembered)."""
    known: dict[str, dict[str, str]] = {}

    def resolved(run: MotorRun) -> dict[str, str]:
        if run.id not in known:
            known[run.id] = resolve(run)
        return known[run.id]

    return resolved


def run_credentials_missing(
    run: MotorRun, credentials: Callable[[MotorRun], dict[str, str]] | None = None
) -> list[str]:
    """The run's credential names that have no value (nobody has set them)."""
    values = (credentials or run_credentials_read)(run)
    return [name for name in run.credential_names if not values.get(name)]


def _credentials_question(missing: Sequence[str]) -> str:
    names = ", ".join(missing)
    plural = len(missing) > 1
    return (
        f"This run needs the credential{'s' if plural else ''} {names}, which nobody has set. "
        f"Set {'them' if plural else 'it'} in the admin (Credentials) or through the API "
        f"(PUT /api/v1/credentials/<name>/); never send a credential's value in a chat or as "
        f"the answer to this question. The run resumes by itself once "
        f"{'they are' if plural else 'it is'} set."
    )


def pause_for_credentials(
    run: MotorRun, attempt: Attempt, lease: Lease, missing: list[str], *, actor: str
) -> SliceOutcome:
    """Pause the run in awaiting_input, asking for `missing` to be set. Caller holds locks."""
    question = _credentials_question(missing)
    previous = run.status
    attempt.await_input(question=question, tool_call_id="")
    attempt.save(update_fields=["status", "pending_question", "pending_tool_call_id"])
    run.await_input()
    run.missing_credentials = list(missing)
    run.save(update_fields=["status", "missing_credentials", "updated_at"])
    lease_release(lease, slice_done=True)
    event_record(run, from_status=previous, actor=actor, missing_credentials=list(missing))
    motor_result_emit(
        run,
        {
            "run_id": run.id,
            "status": RunStatus.AWAITING_INPUT,
            "question": question,
            "missing_credentials": list(missing),
        },
    )
    return SliceOutcome.PAUSED


#: names save_credential accepts: the skill store's credential-name rule (an env variable name)
_SAVED_CREDENTIAL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")


def save_offered(run: MotorRun) -> bool:
    """save_credential is offered to skill runs and to runs that may create a skill."""
    return not run.review and (run.skill_id is not None or bool(run.workspace))


def skill_policy(run: MotorRun) -> Any:
    """The stored policy of the run's skill for its agent, or None."""
    from skills.models import Policy

    return Policy.objects.filter(skill_id=run.skill_id, agent_id=run.agent_id).first()


def save_denial(run: MotorRun, name: str) -> str | None:
    """Why `name` may not be saved by this run (seed 001 scope rules), or None when it may."""
    if not _SAVED_CREDENTIAL_NAME.match(name):
        return (
            f"credential name {name!r} must be an environment variable name "
            f"({_SAVED_CREDENTIAL_NAME.pattern})"
        )
    if run.skill_id is None:
        return None  # a new skill: kept as pending until extraction
    policy = skill_policy(run)
    required = list(policy.required_credentials) if policy is not None else []
    if not required:
        return "this skill declares no required credentials, so it may not save any"
    if name not in required:
        return f"{name!r} is not among this skill's required credentials ({', '.join(required)})"
    return None


def reply_take_saved(
    run: MotorRun, message: dict[str, Any], known: dict[str, str]
) -> dict[str, str]:
    """Take the values out of the save_credential calls of the assistant `message` (in place:
    each call keeps its arguments with the value replaced by its placeholder, or scrubbed when
    they do not parse). Returns the values the run may save (`save_denial`); a value out of scope
    is dropped, but added to `known` so that it is redacted wherever the model repeated it."""
    intercepted: dict[str, str] = {}
    for call in message.get("tool_calls") or []:
        function = call["function"]
        if function["name"] != SAVE_CREDENTIAL:
            continue
        parsed = intercept_save_call(str(function.get("arguments") or ""))
        if parsed is None:
            function["arguments"] = scrub_unparsable_save_call(str(function.get("arguments") or ""))
            continue
        name, value, redacted = parsed
        function["arguments"] = redacted
        # Out of scope: the value is dropped here; the call is answered "denied" later.
        if save_offered(run) and save_denial(run, name) is None:
            intercepted[name] = value
        else:
            known.setdefault(name, value)
    return intercepted


def credentials_gate(
    lease: Lease,
    run: MotorRun,
    attempt: Attempt,
    credentials: Callable[[MotorRun], dict[str, str]],
    *,
    actor: str,
) -> SliceOutcome | None:
    """Before a slice's first LLM request: pause the run in awaiting_input (and return PAUSED)
    when a credential it names has no value; None when the slice may go on."""
    if not run.credential_names:
        return None
    missing = run_credentials_missing(run, credentials)
    if not missing:
        return None
    with transaction.atomic():
        lease_fence(lease)
        return pause_for_credentials(run, attempt, lease, missing, actor=actor)


def reply_secure(
    lease: Lease,
    run: MotorRun,
    attempt: Attempt,
    message: dict[str, Any],
    credentials: Callable[[MotorRun], dict[str, str]],
) -> dict[str, Any] | None:
    """The assistant `message` as it may be stored, with no credential value in it: every value
    the run knows is replaced by its placeholder wherever the model wrote it.

    A message carrying save_credential values is different: those values move into the run's
    encrypted store and the redacted message is appended to the attempt, in one fenced
    transaction, and None is returned — the message is written, the caller writes nothing."""
    known = {**credentials(run), **saved_values(run)}
    intercepted = reply_take_saved(run, message, known)
    if not intercepted:
        return redact(message, known)
    with transaction.atomic():
        lease_fence(lease)
        store_saved(run, intercepted)
        MotorRun.objects.filter(pk=run.pk).update(saved_credentials=run.saved_credentials)
        known.update(intercepted)
        attempt.iteration += 1
        attempt.messages = [*attempt.messages, redact(message, known)]
        attempt.save(update_fields=["iteration", "messages"])
    return None
