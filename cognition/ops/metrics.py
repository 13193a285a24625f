"""GET /metrics: the Prometheus exposition of every process of every host, and the database's.

Protected by a bearer token (MOTOR_METRICS_TOKEN); without one configured the endpoint does not
exist (404), so an instance never publishes its numbers by accident. Prometheus sends the token
with `authorization: {credentials: …}` (or `bearer_token_file`) in its scrape config.

The processes' own samples (runs.metrics, django-prometheus) are files under MOTOR_METRICS_DIR,
one directory per host; they are added up here as prometheus-client's multiprocess collector
does for one directory (counters and histograms summed, live gauges summed over live processes).
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Iterator
from pathlib import Path

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from .collectors import DatabaseCollector


class HostsFilesCollector(Collector):
    """The samples every process of every host wrote under `root` (root/<host>/*.db)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def files(self) -> list[str]:
        return sorted(str(p) for p in self.root.glob("*/*.db"))

    def collect(self) -> Iterator[object]:  # type: ignore[override]
        yield from MultiProcessCollector.merge(self.files(), accumulate=True)


def exposition(*, collectors: Iterable[Collector] = ()) -> bytes:
    """The text exposition of the process files and the database collector (and `collectors`)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HostsFilesCollector(Path(settings.MOTOR_METRICS_DIR)))
    registry.register(DatabaseCollector())
    for collector in collectors:
        registry.register(collector)
    return generate_latest(registry)


def _error(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message, "details": {}}}, status=status)


@require_safe
@never_cache
def metrics(request: HttpRequest) -> HttpResponse:
    token = str(getattr(settings, "MOTOR_METRICS_TOKEN", "") or "")
    if not token:
        return _error(404, "not_found", "Metrics are off: set MOTOR_METRICS_TOKEN to serve them.")
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        given.strip().encode(), token.encode()
    ):
        response = _error(
            401,
            "not_authenticated",
            "GET /metrics needs 'Authorization: Bearer <MOTOR_METRICS_TOKEN>'.",
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)
