"""LLM access through the `openai` client: model roles, timeouts, retries, replay.

Roles follow seed 001: `motor` falls back to `fast`, and `fast`/`smart` fall back to the default
model. Transient failures (connection errors, 408, 409, 429, 5xx) are retried by the openai client
itself with exponential backoff and jitter (0.5 s doubling up to 8 s); the retry count is set
explicitly from LLM_MAX_RETRIES so it is visible and tunable.
"""

from __future__ import annotations

import enum
import json
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
from django.conf import settings

from runs.accounting import usage_of
from runs.errors import LLMUnavailable
from runs.llm_http import LeanTransport
from runs.metrics import llm_timer, llm_usage_record

logger = logging.getLogger(__name__)


class ModelRole(enum.StrEnum):
    FAST = "fast"
    SMART = "smart"
    MOTOR = "motor"


def model_for_role(role: ModelRole) -> str:
    """The configured model for `role`, following motor → fast → default."""
    default = settings.LLM_DEFAULT_MODEL
    fast = settings.LLM_FAST_MODEL or default
    if role is ModelRole.FAST:
        return fast
    if role is ModelRole.SMART:
        return settings.LLM_SMART_MODEL or default
    return settings.LLM_MOTOR_MODEL or fast


def llm_timeout() -> httpx.Timeout:
    """Whole-request timeout from LLM_TIMEOUT_SECONDS; connecting gets at most 10 s of it."""
    total = float(settings.LLM_TIMEOUT_SECONDS)
    return httpx.Timeout(total, connect=min(10.0, total))


# The `on_sent` callback of the `llm_chat` call in progress on this thread.
_sending = threading.local()


def _traced(request: httpx.Request) -> None:
    """httpx request hook: ask the connection to report when the request has been written, so
    `llm_chat` can tell its caller the model is now at work (httpcore's `trace` extension)."""
    callback = getattr(_sending, "callback", None)
    if callback is None:
        return
    earlier = request.extensions.get("trace")

    def trace(event: str, info: dict[str, Any]) -> None:
        if earlier is not None:
            earlier(event, info)
        if event.endswith("send_request_body.complete"):
            callback()

    request.extensions["trace"] = trace


def report_sent(http_client: httpx.Client) -> httpx.Client:
    """`http_client` with the request hook that tells `llm_chat`'s `on_sent` when a request has
    been written (clients from `llm_client` have it; a transport that is not httpcore's must
    call the request's `trace` extension itself, as the scripted test transport does)."""
    hooks = http_client.event_hooks
    if _traced not in hooks["request"]:
        http_client.event_hooks = {**hooks, "request": [*hooks["request"], _traced]}
    return http_client


def llm_client(*, http_client: httpx.Client | None = None) -> openai.OpenAI:
    """An OpenAI-compatible client configured from settings.

    `http_client` lets callers supply a transport (the scripted and replay providers do); it
    gets the request hook that reports when a request has been sent (see `llm_chat`'s
    `on_sent`). Without one, the client's connections are `runs.llm_http.LeanTransport`'s
    (one keep-alive connection per thread), or the default pool's when a proxy applies.
    """
    if http_client is None:
        http_client = openai.DefaultHttpxClient(transport=LeanTransport())
    return openai.OpenAI(
        base_url=settings.LLM_BASE_URL or None,
        # Local OpenAI-compatible servers accept any key; the client refuses an empty one.
        api_key=settings.LLM_API_KEY or "unset",
        timeout=llm_timeout(),
        max_retries=int(getattr(settings, "LLM_MAX_RETRIES", 2)),
        http_client=report_sent(http_client),
    )


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # the raw JSON text the model produced


@dataclass(frozen=True, slots=True)
class LLMReply:
    content: str
    tool_calls: tuple[ToolCall, ...]
    model: str
    # what the answer's `usage` reported (0 when it reported nothing)
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def as_message(self) -> dict[str, Any]:
        """The assistant message as it is stored in the attempt and sent back later."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in self.tool_calls
            ]
        return message


def llm_chat(
    *,
    client: openai.OpenAI,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] = (),
    role: ModelRole = ModelRole.MOTOR,
    on_sent: Callable[[], None] | None = None,
    max_tokens: int | None = None,
) -> LLMReply:
    """One chat completion. Raises LLMUnavailable once the client's retries are spent.

    `max_tokens` caps the answer's length (the model's default when None).

    `on_sent` is called once, in this thread: as soon as the request has been written to the
    server when the client comes from `llm_client` (its first try), otherwise — or when the
    request never went out — when the call returns or fails. Work meant for the model's
    thinking time starts there, so it does not hold up the request itself.
    """
    model = model_for_role(role)
    kwargs: dict[str, Any] = {"model": model, "messages": list(messages)}
    if tools:
        kwargs["tools"] = list(tools)
    if max_tokens is not None:
        kwargs["max_tokens"] = max_tokens
    if on_sent is None:
        return _chat(client, kwargs, model)
    fired = False

    def once() -> None:
        nonlocal fired
        if not fired:
            fired = True
            try:
                on_sent()
            except Exception:  # the request must not fail for it: it may run inside the send
                logger.exception("the LLM request's on_sent callback failed")

    _sending.callback = once
    try:
        return _chat(client, kwargs, model)
    finally:
        _sending.callback = None
        once()


def _chat(client: openai.OpenAI, kwargs: dict[str, Any], model: str) -> LLMReply:
    with llm_timer(model):
        raw = _post(client, kwargs, model)
    return _parse_reply(raw, model)


def _post(client: openai.OpenAI, kwargs: dict[str, Any], model: str) -> bytes:
    try:
        # The plain POST of `chat.completions.create`, with the body serialized here and the
        # answer read here: the typed path walks every message through the request schema,
        # copies the body for each attempt and builds a pydantic model of the answer
        # (milliseconds per call, growing with the history); our messages are already in wire
        # format. Retries, backoff, timeouts and error mapping stay the client's own.
        raw = client.post("/chat/completions", content=json.dumps(kwargs).encode(), cast_to=bytes)
    except openai.APIError as exc:
        # The message of an APIError carries no request body, so no prompt text leaks here.
        raise LLMUnavailable(
            f"LLM call to model {model!r} failed: {exc.__class__.__name__}: {exc}"
        ) from exc
    return raw


def _arguments_text(arguments: Any) -> str:
    """A call's arguments as the JSON text the protocol specifies (some servers send an object)."""
    if isinstance(arguments, str):
        return arguments or "{}"
    return json.dumps(arguments) if arguments else "{}"


def _parse_reply(raw: bytes, model: str) -> LLMReply:
    """The first choice of a chat-completions answer; LLMUnavailable when it is not one."""
    try:
        data = json.loads(raw)
        choices = data.get("choices") or []
        if not choices:
            raise LLMUnavailable(f"LLM call to model {model!r} returned no choices")
        message = choices[0]["message"]
        llm_usage_record(model, data.get("usage"))
        calls = tuple(
            ToolCall(
                id=str(call.get("id") or ""),
                name=str(call["function"].get("name") or ""),
                arguments=_arguments_text(call["function"].get("arguments")),
            )
            for call in (message.get("tool_calls") or [])
            if isinstance(call, dict) and isinstance(call.get("function"), dict)
        )
        prompt_tokens, completion_tokens = usage_of(data.get("usage"))
        return LLMReply(
            content=message.get("content") or "",
            tool_calls=calls,
            model=str(data.get("model") or model),
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )
    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        raise LLMUnavailable(
            f"LLM call to model {model!r} returned an answer that is not a chat completion "
            f"({exc.__class__.__name__})"
        ) from None


# --- canned responses: the replay provider (and the test fixtures) ------------------------------


def chat_completion_body(
    *,
    content: str | None = None,
    tool_calls: Iterable[dict[str, Any]] = (),
    model: str = "scripted",
    completion_id: str = "chatcmpl-scripted",
) -> dict[str, Any]:
    """A chat-completions response body with one assistant message."""
    calls = list(tool_calls)
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls" if calls else "stop",
                "message": message,
            }
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


@dataclass
class ReplayTransport(httpx.BaseTransport):
    """Answers chat-completion requests with recorded assistant messages, in order.

    Requests are kept in `requests` (parsed JSON bodies). When the recording runs out the
    transport answers 500, which the client surfaces as an error rather than inventing text.
    """

    responses: list[dict[str, Any]]
    requests: list[dict[str, Any]] = field(default_factory=list)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(json.loads(request.content or b"{}"))
        if not self.responses:
            return httpx.Response(500, json={"error": {"message": "replay exhausted"}})
        return httpx.Response(200, json=self.responses.pop(0))


def recorded_responses(messages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Response bodies that reproduce every assistant message of a stored conversation."""
    return [
        chat_completion_body(
            content=message.get("content"),
            tool_calls=message.get("tool_calls") or (),
            model="replay",
            completion_id=f"chatcmpl-replay-{index}",
        )
        for index, message in enumerate(messages)
        if message.get("role") == "assistant"
    ]


def replay_client(*, run_id: str) -> openai.OpenAI:
    """A client that re-plays the LLM side of a recorded run, attempt by attempt."""
    from runs.models import Attempt

    responses: list[dict[str, Any]] = []
    for attempt in Attempt.objects.filter(run_id=run_id).order_by("index"):
        responses.extend(recorded_responses(attempt.messages))
    transport = ReplayTransport(responses=responses)
    return openai.OpenAI(
        base_url="http://replay.invalid/v1",
        api_key="replay",
        max_retries=0,
        timeout=llm_timeout(),
        http_client=httpx.Client(transport=transport),
    )
