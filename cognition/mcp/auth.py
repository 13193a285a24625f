"""Who calls the MCP endpoint: the REST API's own bearer authentication, refused the same way.

The Authorization header goes through `cognition.api.authentication.BearerAuthentication` and a
refusal through the API's exception handler, so an MCP client without a token, with a malformed
header or with a revoked token gets exactly the status, body and WWW-Authenticate header the REST
API gives it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest
from rest_framework import exceptions

from cognition.api.authentication import BearerAuthentication
from cognition.api.exceptions import exception_handler
from cognition.principals import Principal


@dataclass(frozen=True)
class Refusal:
    status: int
    body: dict[str, Any]
    headers: dict[str, str]


def _request(authorization: bytes | None) -> HttpRequest:
    """A Django request carrying only the Authorization header (all BearerAuthentication reads)."""
    request = HttpRequest()
    if authorization:
        request.META["HTTP_AUTHORIZATION"] = authorization.decode("latin-1")
    return request


def authenticate(authorization: bytes | None) -> Principal | Refusal:
    """The principal of an `Authorization` header value, or the REST API's refusal of it."""
    backend = BearerAuthentication()
    try:
        result = backend.authenticate(_request(authorization))  # type: ignore[arg-type]
        if result is None:
            raise exceptions.NotAuthenticated()
    except exceptions.APIException as exc:
        # as DRF's APIView does for a 401: the scheme the client should use
        exc.auth_header = backend.authenticate_header(None)  # type: ignore[arg-type,attr-defined]
        response = exception_handler(exc, {})
        return Refusal(
            status=response.status_code,
            body=dict(response.data),
            headers={k: v for k, v in response.items()},
        )
    return result[1]
