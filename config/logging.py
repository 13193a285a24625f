"""Log records as one JSON object per line, or a readable console rendering (bin/dev).

Every record — ours, Django's, Celery's — goes through the same chain: the context bound for the
current task or request (run_id, agent, skill, attempt, iteration, step, request_id; see
runs.logcontext), timestamp, level, logger, the host, then the renderer, then the redaction of
secret values. Wiring only: settings.LOGGING names `formatter(...)`.
"""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Iterable
from typing import Any

import structlog

HOST = socket.gethostname()

#: agent tokens (mc_…) and personal tokens (mcp_…) as issued: a prefix and 32+ URL-safe chars
TOKEN_PATTERN = re.compile(r"\b(mcp?_)[A-Za-z0-9_\-]{20,}")
REDACTED = "[redacted]"


def add_host(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    event_dict.setdefault("host", HOST)
    return event_dict


class Redact:
    """The last step after rendering: every configured secret value, and anything shaped like an
    API token, replaced by [redacted]. A second line of defence; no code logs a secret."""

    def __init__(self, secrets: Iterable[str]) -> None:
        # Short values would redact ordinary words; the configured secrets are long.
        self.secrets = sorted({s for s in secrets if s and len(s) >= 8}, key=len, reverse=True)

    def __call__(self, _: Any, __: str, rendered: Any) -> Any:
        if not isinstance(rendered, str):
            return rendered
        for secret in self.secrets:
            if secret in rendered:
                rendered = rendered.replace(secret, REDACTED)
        return TOKEN_PATTERN.sub(lambda m: m.group(1) + REDACTED, rendered)


def shared_processors() -> list[Any]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        add_host,
    ]


def formatter(*, fmt: str = "json", secrets: Iterable[str] = ()) -> logging.Formatter:
    """The formatter of every handler: `fmt` is "json" (one object per line) or "console"."""
    renderer: Any
    if fmt == "console":
        renderer = structlog.dev.ConsoleRenderer(colors=False)
        tail: list[Any] = []
    else:
        renderer = structlog.processors.JSONRenderer(sort_keys=False, default=str)
        # Tracebacks as data, without the frames' local variables (they may hold anything).
        tail = [
            structlog.processors.ExceptionRenderer(
                structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
            )
        ]
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared_processors(),
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *tail,
            renderer,
            Redact(secrets),
        ],
    )


def configure_structlog() -> None:
    """structlog's own loggers hand their events to the stdlib handlers (one format for all)."""
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared_processors(),
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
