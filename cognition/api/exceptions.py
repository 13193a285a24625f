"""One error body for the whole API: `{"error": {"code", "message", "details"}}`.

Domain errors (skills.errors.DomainError: SkillError, CognitionError) carry their own code and
HTTP status; DRF's errors are mapped to stable codes; anything else is a 500 that names nothing of
the internals (the traceback goes to the log only).
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response

from runs.errors import (
    CredentialsStillMissing,
    InvalidRunParams,
    InvalidTransition,
    LeaseLost,
    LLMUnavailable,
    MotorBusy,
    RunError,
    RunNotFound,
)
from skills.errors import DomainError

logger = logging.getLogger(__name__)

_DRF_CODES: dict[type[exceptions.APIException], str] = {
    exceptions.ValidationError: "invalid",
    exceptions.ParseError: "malformed_request",
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "authentication_failed",
    exceptions.PermissionDenied: "permission_denied",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.Throttled: "throttled",
}


# The runtime's errors carry no HTTP status (runs knows nothing of the API).
_RUN_STATUS: dict[type[RunError], int] = {
    MotorBusy: 409,
    InvalidRunParams: 400,
    RunNotFound: 404,
    InvalidTransition: 409,
    CredentialsStillMissing: 409,
    LeaseLost: 409,
    LLMUnavailable: 503,
}


# Django refuses request bodies over its limits while DRF parses them; each names its setting.
_TOO_LARGE: dict[type[Exception], tuple[str, str]] = {
    RequestDataTooBig: ("DATA_UPLOAD_MAX_MEMORY_SIZE", "bytes"),
    TooManyFieldsSent: ("DATA_UPLOAD_MAX_NUMBER_FIELDS", "fields"),
    TooManyFilesSent: ("DATA_UPLOAD_MAX_NUMBER_FILES", "files"),
}


def _too_large(exc: Exception) -> Response:
    setting, unit = _TOO_LARGE[type(exc)]
    limit = getattr(settings, setting)
    return Response(
        error_body(
            "request_too_large",
            f"The request body is over this server's limit of {limit} {unit} ({setting}).",
            {"rule": setting, f"limit_{unit}": limit},
        ),
        status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
    )


#: seconds a refused start suggests waiting before it is sent again (Retry-After); a run's slice
#: is a few seconds of model and tool time, so a client polling at this pace is not left waiting
BUSY_RETRY_AFTER_S = 10


def _motor_busy(exc: MotorBusy) -> Response:
    """409 for a start refused by the one-active-run rule, written for a client of the REST API:
    which run holds the agent, in what status, where to watch or cancel it, when to retry. (The
    core.* tools keep the runtime's own message, written for a brain.)"""
    from runs.models import MotorRun

    holder = MotorRun.objects.select_related("agent").filter(pk=exc.run_id).first()
    details: dict[str, Any] = {"run_id": exc.run_id}
    if holder is None:
        # the holder finished between the refusal and this answer: retrying now will work
        message = (
            "The agent's previous run was finishing as this request arrived; an agent runs one "
            "task at a time. Send this request again."
        )
    else:
        url = f"/api/v1/runs/{holder.pk}/"
        message = (
            f"Agent {holder.agent.name} already has an active run, {holder.pk} ({holder.status}); "
            f"an agent runs one task at a time. Wait for it to finish (GET {url} shows its "
            f"status) or cancel it (POST {url}cancel/), then send this request again."
        )
        details.update(run_status=holder.status, run_url=url)
    details["retry_after_s"] = BUSY_RETRY_AFTER_S
    return Response(
        error_body(MotorBusy.code, message, details),
        status=status.HTTP_409_CONFLICT,
        headers={"Retry-After": str(BUSY_RETRY_AFTER_S)},
    )


def _json_safe(details: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v if isinstance(v, str | int | float | bool | None) else str(v)
        for k, v in details.items()
    }


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def _drf_code(exc: exceptions.APIException) -> str:
    for cls in type(exc).__mro__:
        if cls in _DRF_CODES:
            return _DRF_CODES[cls]  # type: ignore[index]
    return "error"


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF's EXCEPTION_HANDLER."""
    if isinstance(exc, DomainError):
        if exc.http_status >= 500:
            logger.error("domain error %s: %s", exc.code, exc.message)
        return Response(error_body(exc.code, exc.message, exc.details), status=exc.http_status)
    if isinstance(exc, MotorBusy):
        return _motor_busy(exc)
    if isinstance(exc, RunError):
        code = _RUN_STATUS.get(type(exc), 400)
        return Response(error_body(exc.code, exc.message, _json_safe(exc.details)), status=code)
    if type(exc) in _TOO_LARGE:
        return _too_large(exc)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, DjangoValidationError):
        detail = (
            exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        )
        exc = exceptions.ValidationError(detail)
    if isinstance(exc, exceptions.APIException):
        code = _drf_code(exc)
        if isinstance(exc, exceptions.ValidationError):
            details: Any = {"fields": exc.detail}
            message = "The request is invalid: " + _first_problem(exc.detail)
        else:
            # An API error of ours may carry structured details (the rule, the limit).
            details = dict(getattr(exc, "details", None) or {})
            message = str(exc.detail)
        headers: dict[str, str] = {}
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header  # type: ignore[attr-defined]
        if getattr(exc, "wait", None):
            headers["Retry-After"] = str(int(exc.wait))  # type: ignore[attr-defined]
        return Response(error_body(code, message, details), status=exc.status_code, headers=headers)
    logger.exception("unhandled error in %s", type(context.get("view")).__name__)
    return Response(
        error_body("internal_error", "The server failed to handle this request."),
        status=status.HTTP_500_INTERNAL_SERVER_ERROR,
    )


def _first_problem(detail: Any, path: str = "") -> str:
    """'field: message' of the first validation problem, for a one-line message."""
    if isinstance(detail, dict):
        for key, value in detail.items():
            where = f"{path}.{key}" if path else str(key)
            return _first_problem(value, where)
    if isinstance(detail, list) and detail:
        return _first_problem(detail[0], path)
    return f"{path}: {detail}" if path and path != "non_field_errors" else str(detail)
