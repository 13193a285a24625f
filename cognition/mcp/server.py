"""The MCP server of core.*, over streamable HTTP (the `mcp` SDK's low-level server).

One source of truth: the tools are `cognition.tools.core_tool_schemas()` — the list
/api/v1/tools/ serves — and a call goes through `cognition.tools.core_dispatch`, the dispatcher
the built-in brain and the REST face use, with the same consent gate (X-Motor-Trigger header) and
the same errors as data. Added for MCP clients, which cannot hold an event stream of their own:

- the tool `core_signals` (a long-poll of the agent's signals after a cursor, as
  GET /api/v1/signals/), through which `motor_result` reaches the brain;
- the resource `motor://signals` (the newest signals), which a client can poll.

Stateless: every HTTP request is authenticated on its own (cognition.mcp.auth) and carries no
session, so any web process can answer any request.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from cognition.api.signals import signals_wait
from cognition.consent import TRIGGER_HEADER
from cognition.delivery import signal_data
from cognition.errors import CognitionError
from cognition.principals import Principal
from cognition.selectors import agent_for_human
from cognition.tools import core_dispatch, core_tool_schemas
from runs.models import Trigger

from .auth import Refusal, authenticate

PRINCIPAL_SCOPE_KEY = "motor.principal"
SIGNALS_TOOL = "core_signals"
SIGNALS_URI = "motor://signals"
#: the longest long-poll of core_signals, seconds (GET /api/v1/signals/ has the same cap)
SIGNALS_MAX_WAIT_S = 30

_SIGNALS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "after": {
            "type": "integer",
            "minimum": 0,
            "description": "Cursor: signals with seq greater than this (0 = from the start).",
        },
        "wait": {
            "type": "integer",
            "minimum": 0,
            "maximum": SIGNALS_MAX_WAIT_S,
            "description": "Seconds to wait for a signal when none is there yet (long-poll).",
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": 100},
    },
    "additionalProperties": False,
}


def mcp_tools() -> list[types.Tool]:
    """The core.* tools of /api/v1/tools/, as MCP tools, and core_signals."""
    tools = [
        types.Tool(
            name=schema["function"]["name"],
            description=schema["function"]["description"],
            input_schema=schema["function"]["parameters"],
        )
        for schema in core_tool_schemas()
    ]
    tools.append(
        types.Tool(
            name=SIGNALS_TOOL,
            description="The agent's signals (motor_result: a run completed, failed or needs "
            "input; schedule_skipped) after a cursor, oldest first, with an optional long-poll. "
            "Keep the returned `next` as the next `after`.",
            input_schema=_SIGNALS_SCHEMA,
        )
    )
    return tools


def _principal(ctx: ServerRequestContext[Any, Any]) -> Principal:
    request = ctx.request
    principal = request.scope.get(PRINCIPAL_SCOPE_KEY) if request is not None else None
    if not isinstance(principal, Principal):  # the auth middleware lets nothing else through
        raise RuntimeError("an MCP request reached a handler without a principal")
    return principal


def _trigger(ctx: ServerRequestContext[Any, Any]) -> str:
    request = ctx.request
    value = request.headers.get(TRIGGER_HEADER) if request is not None else None
    return value or Trigger.API


def _signals(principal: Principal, arguments: dict[str, Any]) -> dict[str, Any]:
    args = dict(arguments)
    ref = args.pop("agent", None)
    try:
        unknown = sorted(set(args) - set(_SIGNALS_SCHEMA["properties"]))
        if unknown:
            raise CognitionError(
                f"{SIGNALS_TOOL}: unknown argument(s) {', '.join(unknown)}.",
                details={"unknown": unknown},
            )
        after, wait, limit = args.get("after", 0), args.get("wait", 0), args.get("limit", 100)
        for name, value, high in (
            ("after", after, 2**63 - 1),
            ("wait", wait, SIGNALS_MAX_WAIT_S),
            ("limit", limit, 100),
        ):
            low = 1 if name == "limit" else 0
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise CognitionError(
                    f"{SIGNALS_TOOL}: {name} must be an integer from {low} to {high}.",
                    details={"parameter": name},
                )
        if principal.agent is not None:
            agent = principal.agent
        else:
            if ref is None:
                raise CognitionError(
                    "A human calling a core tool must name the agent in 'agent'.",
                    details={"parameter": "agent", "rule": "required"},
                )
            agent = agent_for_human(user=principal.user, ref=str(ref))
    except CognitionError as exc:
        return {"ok": False, "error": exc.as_dict()}
    wait_s = min(float(wait), float(settings.MOTOR_SIGNAL_LONG_POLL_MAX_SECONDS))
    signals = signals_wait(agent_id=agent.pk, after=after, limit=limit, wait_s=wait_s)
    return {
        "ok": True,
        "result": {
            "results": [signal_data(s) for s in signals],
            "next": signals[-1].seq if signals else after,
        },
    }


def _in_thread(function: Callable[..., dict[str, Any]]) -> Callable[..., Awaitable[Any]]:
    """Run Django ORM work in a worker thread, its connection given back afterwards."""

    def call(*args: Any, **kwargs: Any) -> Any:
        close_old_connections()
        try:
            return function(*args, **kwargs)
        finally:
            close_old_connections()

    return sync_to_async(call, thread_sensitive=False)


def _result(payload: dict[str, Any]) -> types.CallToolResult:
    text = json.dumps(payload, default=str)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=payload,
        is_error=not payload.get("ok", False),
    )


async def _list_tools(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=mcp_tools())


async def _call_tool(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    principal = _principal(ctx)
    arguments = dict(params.arguments or {})
    if params.name == SIGNALS_TOOL:
        payload = await _in_thread(_signals)(principal, arguments)
    else:
        payload = await _in_thread(core_dispatch)(
            principal=principal,
            tool_name=params.name,
            arguments=arguments,
            trigger=_trigger(ctx),
        )
    return _result(payload)


async def _list_resources(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListResourcesResult:
    return types.ListResourcesResult(
        resources=[
            types.Resource(
                uri=SIGNALS_URI,
                name="signals",
                description="The agent's newest signals (up to 100), oldest first, as JSON.",
                mime_type="application/json",
            )
        ]
    )


def _newest_signals(principal: Principal) -> dict[str, Any]:
    if principal.agent is None:
        return {
            "ok": False,
            "error": {
                "code": "agent_required",
                "message": "The signals "
                "resource is an agent's; a person reads it through GET /api/v1/signals/.",
                "details": {},
            },
        }
    from runs.models import Signal

    newest = list(Signal.objects.filter(agent=principal.agent).order_by("-seq")[:100])
    return {"ok": True, "result": [signal_data(s) for s in reversed(newest)]}


async def _read_resource(
    ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
) -> types.ReadResourceResult:
    if str(params.uri) != SIGNALS_URI:
        raise ValueError(f"unknown resource {params.uri}; the resource is {SIGNALS_URI}")
    payload = await _in_thread(_newest_signals)(_principal(ctx))
    return types.ReadResourceResult(
        contents=[
            types.TextResourceContents(
                uri=SIGNALS_URI, mime_type="application/json", text=json.dumps(payload)
            )
        ]
    )


def mcp_server() -> Server[Any]:
    return Server(
        "motor-cortex",
        version="1",
        instructions="Motor Cortex: sandboxed, durable, human-approved hands. Delegate with "
        "core_act, follow and answer runs with core_task, hear back through core_signals.",
        on_list_tools=_list_tools,
        on_call_tool=_call_tool,
        on_list_resources=_list_resources,
        on_read_resource=_read_resource,
    )


class BearerAuthMiddleware:
    """Authenticates every HTTP request to the MCP app as the REST API does."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = dict(scope.get("headers") or []).get(b"authorization")
        principal = await _in_thread(authenticate)(header)
        if isinstance(principal, Refusal):
            response = JSONResponse(principal.body, status_code=principal.status)
            for name, value in principal.headers.items():
                if name.lower() == "www-authenticate":
                    response.headers[name] = value
            await response(scope, receive, send)
            return
        scope[PRINCIPAL_SCOPE_KEY] = principal
        await self.app(scope, receive, send)


def mcp_app(*, host: str = "127.0.0.1", path: str = "/mcp") -> ASGIApp:
    """The ASGI application serving the MCP endpoint at `path`."""
    starlette: Starlette = mcp_server().streamable_http_app(
        streamable_http_path=path, stateless_http=True, json_response=True, host=host
    )
    return BearerAuthMiddleware(starlette)
