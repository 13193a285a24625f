"""The API's error body for the answers Django gives itself under /api/.

DRF's views answer errors through cognition.api.exceptions. Some answers never reach a DRF view:
a path no route matches (an unknown endpoint, an id a path converter refuses such as
`schedules/abc/` or `tokens/-5/`), a method a plain Django view does not take, a crash outside a
DRF view. Django renders those as HTML pages (its debug pages under DEBUG). Under /api/ a client
expects JSON, so such a page is replaced by `{"error": {"code", "message", "details"}}` with the
same status, in production and under DEBUG alike. Elsewhere (the admin, the chat) pages stay.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse

from .exceptions import error_body

API_PREFIX = "/api/"

_CODES = {
    400: ("malformed_request", "The request is malformed."),
    403: ("permission_denied", "You do not have permission to perform this action."),
    405: ("method_not_allowed", "Method {method} is not allowed on {path}."),
    413: ("request_too_large", "The request body is over this server's limit."),
    500: ("internal_error", "The server failed to handle this request."),
}


def _is_json(response: HttpResponse) -> bool:
    return response.get("Content-Type", "").split(";")[0].strip() == "application/json"


class APIErrorBodyMiddleware:
    """Replaces a non-JSON error answer under /api/ by the API's error body (status kept)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            response.status_code < 400
            or not request.path_info.startswith(API_PREFIX)
            or _is_json(response)
        ):
            return response
        path = request.path
        if response.status_code == 404:
            code, message = (
                "not_found",
                f"No API endpoint at {path}: see /api/docs/ for the routes.",
            )
            details: dict[str, str] = {"path": path}
        else:
            code, template = _CODES.get(response.status_code, ("error", "The request failed."))
            message = template.format(method=request.method, path=path)
            details = {}
        replaced = JsonResponse(error_body(code, message, details), status=response.status_code)
        for header in ("Allow", "WWW-Authenticate", "Retry-After"):
            if header in response:
                replaced[header] = response[header]
        return replaced
