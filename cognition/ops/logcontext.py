"""Each request's log context: a request id (the client's X-Request-ID when it is a plain token,
a new one otherwise, echoed in the response) and the run a URL names."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse

from runs.logcontext import log_context_bind, log_context_clear

REQUEST_ID_HEADER = "X-Request-ID"
_CLIENT_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


class RequestLogContextMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        given = request.headers.get(REQUEST_ID_HEADER, "")
        request_id = given if _CLIENT_ID.fullmatch(given) else uuid.uuid4().hex
        log_context_clear()
        log_context_bind(request_id=request_id, method=request.method, path=request.path[:200])
        # Not cleared on the way out: Django logs the response's status (django.request) after
        # the middleware returns; the next request on this thread starts with a clear context.
        response = self.get_response(request)
        response[REQUEST_ID_HEADER] = request_id
        return response

    def process_view(
        self, request: HttpRequest, view: Any, args: Any, kwargs: dict[str, Any]
    ) -> None:
        run_id = kwargs.get("run_id")
        if isinstance(run_id, str):
            log_context_bind(run_id=run_id[:40])
