"""Bounded HTTP for skill registries: a deadline for the whole exchange and a byte cap on every
body, so a registry that stalls, drips or answers without end costs at most
MOTOR_SKILL_SOURCE_TIMEOUT_SECONDS and the cap's bytes of memory.

httpx's timeouts bound each socket operation, not the exchange: a server sending one byte per
second would never trip them. The body is therefore read in chunks against a monotonic deadline
and a running byte count; the first chunk past either ends the read.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import httpx
from django.conf import settings

from .errors import SourceUnavailable

CHUNK_BYTES = 64 * 1024
USER_AGENT = "motor-cortex-skill-sources/1"


@dataclass(frozen=True)
class Fetched:
    """A successful answer: its body and content type."""

    body: bytes
    content_type: str


def fetch(
    *, source_name: str, url: str, params: Mapping[str, str], max_bytes: int, what: str
) -> Fetched:
    """GET `url` with `params`; the body when the answer is 2xx and within `max_bytes`.

    Raises `SourceUnavailable` naming `source_name`, `what` was asked and the rule broken:
    `source-timeout`, `source-unreachable`, `source-http-status`, `source-response-too-large`.
    Redirects are not followed (a registry answers from the URL it was configured with).
    """
    timeout_s = float(settings.MOTOR_SKILL_SOURCE_TIMEOUT_SECONDS)
    deadline = time.monotonic() + timeout_s
    details = {"source": source_name, "what": what}

    def refuse(rule: str, message: str, **extra: object) -> SourceUnavailable:
        return SourceUnavailable(
            f"Skill source {source_name!r}: {message}", details={**details, "rule": rule, **extra}
        )

    try:
        with (
            httpx.Client(
                timeout=httpx.Timeout(timeout_s),
                follow_redirects=False,
                headers={"User-Agent": USER_AGENT},
                trust_env=False,
            ) as client,
            client.stream("GET", url, params=dict(params)) as response,
        ):
            if not 200 <= response.status_code < 300:
                raise refuse(
                    "source-http-status",
                    f"{what} answered HTTP {response.status_code}.",
                    status=response.status_code,
                )
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise refuse(
                    "source-response-too-large",
                    f"{what} announced {int(declared)} bytes; at most {max_bytes} are read.",
                    max_bytes=max_bytes,
                )
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_bytes(CHUNK_BYTES):
                size += len(chunk)
                if size > max_bytes:
                    raise refuse(
                        "source-response-too-large",
                        f"{what} sent more than {max_bytes} bytes; the answer was not read.",
                        max_bytes=max_bytes,
                    )
                if time.monotonic() > deadline:
                    raise refuse(
                        "source-timeout",
                        f"{what} took longer than {timeout_s:g} s.",
                        timeout_s=timeout_s,
                    )
                chunks.append(chunk)
            return Fetched(
                body=b"".join(chunks), content_type=response.headers.get("content-type", "")
            )
    except httpx.TimeoutException as exc:
        raise refuse(
            "source-timeout", f"{what} took longer than {timeout_s:g} s.", timeout_s=timeout_s
        ) from exc
    except httpx.HTTPError as exc:
        raise refuse("source-unreachable", f"{what} failed ({type(exc).__name__}).") from exc
