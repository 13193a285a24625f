"""The agent's signals over HTTP: a long-poll page and a server-sent-events stream.

The cursor is the per-agent `seq` (1, 2, 3, …). It is handed out under a per-agent lock held to
commit (runs.outbox), so signals become visible in `seq` order and a reader that asks for
"everything after the last seq I processed" never skips one, however many transactions commit
concurrently.

Waking up. A waiting request subscribes to the agent's Redis pub/sub channel (published by
cognition.delivery.on_signal_committed after each commit), then reads the database, then sleeps
on the channel. Pub/sub rather than polling the database because a waiter then costs one idle
socket instead of a query every fraction of a second, and it answers as soon as the signal
commits. The database stays the only source of truth: a message only says "read again", the read
after subscribing closes the gap between the first read and the subscription, and a re-read every
`RECHECK_S` seconds covers a wake-up lost to a Redis hiccup (or a publisher that crashed between
commit and publish). If Redis is unreachable the wait degrades to polling the database every
`FALLBACK_POLL_S` seconds.

Deployment. A long-poll holds its web worker for up to 30 s and a stream for up to
MOTOR_SIGNAL_STREAM_MAX_SECONDS (then it ends and the client reconnects with Last-Event-ID).
With gunicorn's sync workers each open wait occupies a whole process; run the web service with
threads (`--worker-class gthread --threads N`, as docker-compose.yml does) or gevent, sized for
the number of brains that wait at once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import redis
from django.conf import settings
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from cognition.delivery import signal_data, wakeup_channel, wakeup_redis
from runs.db import release_db_connection
from runs.models import SignalKind
from runs.selectors import signal_list

from . import fields
from .views import AGENT_PARAM, MAX_BIGINT, PrincipalAPIView, _errors

#: seconds between database re-reads while waiting on the pub/sub channel
RECHECK_S = 5.0
#: seconds between database reads when Redis cannot be reached
FALLBACK_POLL_S = 0.5
#: signals per page and per stream read
MAX_LIMIT = 1000
STREAM_BATCH = 100
LAST_EVENT_ID = "Last-Event-ID"


class SignalSerializer(serializers.Serializer):
    id = serializers.IntegerField(help_text="Stable id: de-duplicate on it.")
    seq = serializers.IntegerField(help_text="Position in the agent's stream; the cursor.")
    kind = serializers.ChoiceField(choices=SignalKind.values)
    run_id = serializers.CharField(allow_null=True)
    agent = serializers.IntegerField(help_text="The agent's id.")
    created_at = serializers.DateTimeField()
    payload = serializers.DictField()


class SignalPageSerializer(serializers.Serializer):
    results = SignalSerializer(many=True)
    next = serializers.IntegerField(
        help_text="Cursor for the next call (?after=next): the last seq returned, or `after`."
    )


class SignalQuerySerializer(serializers.Serializer):
    after = fields.QueryInteger(min_value=0, max_value=MAX_BIGINT, default=0)
    wait = fields.QueryInteger(min_value=0, max_value=MAX_BIGINT, default=0)
    limit = fields.QueryInteger(min_value=1, max_value=MAX_LIMIT, default=100)


class EventStreamRenderer(BaseRenderer):
    """Lets clients ask for text/event-stream; error bodies are still the JSON error shape."""

    media_type = "text/event-stream"
    format = "event-stream"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None
    ) -> Any:
        if isinstance(data, str | bytes):
            return data
        return json.dumps(data)


AFTER_PARAM = OpenApiParameter(
    "after",
    {"type": "integer", "minimum": 0, "maximum": MAX_BIGINT},
    OpenApiParameter.QUERY,
    description="Cursor: return signals with seq greater than this (0 = from the start).",
)
LIMIT_PARAM = OpenApiParameter(
    "limit",
    {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
    OpenApiParameter.QUERY,
    description="1-1000 signals (default 100).",
)
WAIT_PARAM = OpenApiParameter(
    "wait",
    {"type": "integer", "minimum": 0, "maximum": MAX_BIGINT},
    OpenApiParameter.QUERY,
    description=(
        "Long-poll: seconds to wait for a signal when none is there yet (default 0, capped at "
        "30). Returns as soon as one commits."
    ),
)
LAST_EVENT_ID_PARAM = OpenApiParameter(
    LAST_EVENT_ID,
    {"type": "string", "pattern": "^[0-9]{1,18}$"},
    OpenApiParameter.HEADER,
    description="Resume after this seq (sent by EventSource on reconnect); overrides ?after.",
)


def _query(request: Request) -> dict[str, int]:
    query = SignalQuerySerializer(data=request.query_params)
    query.is_valid(raise_exception=True)
    return dict(query.validated_data)


class _Waiter:
    """Sleeps until the agent's channel announces a signal (or a timeout); see the module doc."""

    def __init__(self, agent_id: int) -> None:
        self.pubsub: Any = None
        try:
            self.pubsub = wakeup_redis().pubsub(ignore_subscribe_messages=True)
            self.pubsub.subscribe(wakeup_channel(agent_id))
        except redis.RedisError:
            self._drop()

    def _drop(self) -> None:
        if self.pubsub is not None:
            try:
                self.pubsub.close()
            except redis.RedisError:
                pass
        self.pubsub = None

    def sleep(self, seconds: float) -> None:
        """Return after `seconds` at most, earlier when a signal may have committed."""
        if seconds <= 0:
            return
        # A waiting request holds no pooled database connection (the next read takes one again),
        # so more requests can wait at once than a process has connections.
        release_db_connection()
        if self.pubsub is None:
            time.sleep(min(seconds, FALLBACK_POLL_S))
            return
        try:
            self.pubsub.get_message(timeout=min(seconds, RECHECK_S))
        except redis.RedisError:
            self._drop()

    def close(self) -> None:
        self._drop()


def signals_wait(*, agent_id: int, after: int, limit: int, wait_s: float) -> list[Any]:
    """The agent's signals after `after`; when there are none, wait up to `wait_s` seconds for
    one to commit. An empty list means the wait ended with nothing new."""
    signals = signal_list(agent_id=agent_id, after_seq=after, limit=limit)
    if signals or wait_s <= 0:
        return signals
    deadline = time.monotonic() + wait_s
    waiter = _Waiter(agent_id)
    try:
        while True:
            # Read after subscribing: nothing committed before the subscription is missed.
            signals = signal_list(agent_id=agent_id, after_seq=after, limit=limit)
            remaining = deadline - time.monotonic()
            if signals or remaining <= 0:
                return signals
            waiter.sleep(remaining)
    finally:
        waiter.close()


@extend_schema(tags=["signals"])
class SignalListView(PrincipalAPIView):
    renderer_classes = [JSONRenderer]

    @extend_schema(
        operation_id="signals_list",
        summary="The agent's signals after a cursor, with optional long-polling",
        description=(
            "Returns the scope agent's signals with seq > `after`, oldest first. With `wait`, "
            "an empty result waits up to that many seconds (capped at 30) and returns as soon as "
            "a signal commits; after the wait it returns no results and `next` = `after`. "
            "Delivery is at least once per receiver: de-duplicate on `id`."
        ),
        parameters=[AFTER_PARAM, WAIT_PARAM, LIMIT_PARAM, AGENT_PARAM],
        responses={200: SignalPageSerializer, **_errors(400, 401, 404)},
    )
    def get(self, request: Request) -> Response:
        query = _query(request)
        agent = self.scope_agent(request)
        wait_s = min(query["wait"], int(settings.MOTOR_SIGNAL_LONG_POLL_MAX_SECONDS))
        signals = signals_wait(
            agent_id=agent.pk, after=query["after"], limit=query["limit"], wait_s=wait_s
        )
        return Response(
            {
                "results": [signal_data(s) for s in signals],
                "next": signals[-1].seq if signals else query["after"],
            }
        )


def _event(signal: Any) -> str:
    data = json.dumps(signal_data(signal), separators=(",", ":"), sort_keys=True)
    return f"id: {signal.seq}\ndata: {data}\n\n"


def signal_events(*, agent_id: int, after: int, max_s: float, heartbeat_s: float) -> Iterator[str]:
    """The event stream: every signal after `after` once, in seq order, then new ones as they
    commit; a heartbeat comment when idle; ends after `max_s` seconds."""
    deadline = time.monotonic() + max_s
    cursor = after
    # Reconnect quickly when the stream ends (EventSource resends the last id).
    yield "retry: 1000\n\n"
    waiter = _Waiter(agent_id)
    last_write = time.monotonic()
    try:
        while True:
            while True:
                batch = signal_list(agent_id=agent_id, after_seq=cursor, limit=STREAM_BATCH)
                for signal in batch:
                    yield _event(signal)
                    cursor = signal.seq
                    last_write = time.monotonic()
                if len(batch) < STREAM_BATCH:
                    break
            now = time.monotonic()
            if now >= deadline:
                break
            if now - last_write >= heartbeat_s:
                yield ": heartbeat\n\n"
                last_write = now
            waiter.sleep(min(deadline - now, heartbeat_s - (now - last_write)))
    finally:
        waiter.close()
    yield f": stream ends after {max_s:g} s; reconnect with Last-Event-ID: {cursor}\n\n"


@extend_schema(tags=["signals"])
class SignalStreamView(PrincipalAPIView):
    renderer_classes = [JSONRenderer, EventStreamRenderer]

    @extend_schema(
        operation_id="signals_stream",
        summary="Server-sent events: the agent's signals as they commit",
        description=(
            "A text/event-stream of the scope agent's signals with seq > `after` (or > the "
            "Last-Event-ID header), each once, in seq order; the event id is the seq and the "
            "data the signal as JSON. Idle streams get heartbeat comments. The stream ends after "
            "a bounded time (MOTOR_SIGNAL_STREAM_MAX_SECONDS); reconnect with Last-Event-ID."
        ),
        parameters=[AFTER_PARAM, LAST_EVENT_ID_PARAM, AGENT_PARAM],
        responses={
            (200, "text/event-stream"): OpenApiResponse(
                OpenApiTypes.STR,
                description=(
                    "Server-sent events (text/event-stream, UTF-8). First `retry: 1000`; then per "
                    "signal, in seq order: `id: <seq>` and `data: <the signal as one line of JSON, "
                    "the Signal schema>`, then a blank line; while idle a comment line "
                    "`: heartbeat`; at the end a comment naming the seq to resume after."
                ),
                examples=[
                    OpenApiExample(
                        "one signal",
                        value='retry: 1000\n\nid: 7\ndata: {"agent":1,"created_at":"…",'
                        '"id":42,"kind":"motor_result","payload":{},"run_id":"r_1","seq":7}\n\n'
                        ": heartbeat\n\n",
                    )
                ],
            ),
            **_errors(400, 401, 404),
        },
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        after = _query(request)["after"]
        last_event_id = request.headers.get(LAST_EVENT_ID)
        if last_event_id is not None:
            value = last_event_id.strip()
            if not (value.isascii() and value.isdigit() and len(value) <= 18):
                raise ValidationError(
                    {LAST_EVENT_ID: ["Must be the seq of the last event received (an integer)."]}
                )
            after = int(value)
        agent = self.scope_agent(request)
        response = StreamingHttpResponse(
            signal_events(
                agent_id=agent.pk,
                after=after,
                max_s=float(settings.MOTOR_SIGNAL_STREAM_MAX_SECONDS),
                heartbeat_s=float(settings.MOTOR_SIGNAL_STREAM_HEARTBEAT_SECONDS),
            ),
            content_type="text/event-stream; charset=utf-8",
        )
        response["Cache-Control"] = "no-cache"
        # Proxies (nginx) must pass events through as they are written.
        response["X-Accel-Buffering"] = "no"
        return response
