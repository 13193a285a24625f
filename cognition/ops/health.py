"""Liveness and readiness.

`/healthz` answers while the process serves requests; it touches nothing else, so a database or
Redis outage never makes an orchestrator restart a web process that would recover by itself.
`/readyz` says whether this instance can do its work now: the database answers, every migration
is applied, the Redis broker and the Redis of the run mutex answer, and (`?role=worker`, and in
`manage.py worker_health`) the configured sandbox backend can run on this host. Each check is
reported with its outcome, a short detail and its duration; any failure answers 503.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import redis
from django.conf import settings
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from sandbox.probe import backend_probe

#: seconds a Redis check may take to connect and answer
REDIS_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    ok: bool
    detail: str
    duration_ms: float

    def as_dict(self) -> dict[str, object]:
        return {"ok": self.ok, "detail": self.detail, "duration_ms": round(self.duration_ms, 1)}


def _failure(exc: BaseException) -> str:
    # The class and the first line only: driver messages name hosts, never passwords, and the
    # first line is what an operator needs.
    text = str(exc).strip().splitlines()
    return f"{exc.__class__.__name__}: {text[0][:200]}" if text else exc.__class__.__name__


def check_database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return f"{connection.vendor} answers"


def check_migrations() -> str:
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if plan:
        pending = [f"{migration.app_label}.{migration.name}" for migration, _ in plan]
        raise RuntimeError(
            f"{len(pending)} migration(s) not applied: {', '.join(pending[:5])}"
            + (" …" if len(pending) > 5 else "")
        )
    return "all migrations applied"


def _redis_ping(url: str) -> str:
    client = redis.Redis.from_url(
        url, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S
    )
    try:
        client.ping()
    finally:
        client.close()
    return "redis answers"


def check_broker() -> str:
    url = settings.CELERY_BROKER_URL
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise RuntimeError("the broker is not Redis; only a Redis broker is supported")
    return _redis_ping(url)


def check_mutex() -> str:
    return _redis_ping(getattr(settings, "MOTOR_MUTEX_REDIS_URL", "") or settings.REDIS_URL)


def check_sandbox() -> str:
    result = backend_probe(
        settings.SANDBOX_BACKEND,
        allow_local=settings.SANDBOX_ALLOW_LOCAL,
        docker_image=settings.SANDBOX_DOCKER_IMAGE,
    )
    if not result.ok:
        raise RuntimeError(result.detail)
    return result.detail


CHECKS: dict[str, Callable[[], str]] = {
    "database": check_database,
    "migrations": check_migrations,
    "broker": check_broker,
    "mutex": check_mutex,
}
WORKER_CHECKS: dict[str, Callable[[], str]] = {**CHECKS, "sandbox": check_sandbox}


def readiness(*, worker: bool = False) -> list[CheckResult]:
    """Run every readiness check (and the sandbox's for a worker); never raises."""
    results = []
    for name, check in (WORKER_CHECKS if worker else CHECKS).items():
        started = time.monotonic()
        try:
            ok, detail = True, check()
        except Exception as exc:  # a failing check is a result, whatever it raised
            ok, detail = False, _failure(exc)
        results.append(CheckResult(name, ok, detail, (time.monotonic() - started) * 1000))
    return results


def readiness_body(results: list[CheckResult]) -> dict[str, object]:
    ok = all(r.ok for r in results)
    return {"status": "ok" if ok else "fail", "checks": {r.name: r.as_dict() for r in results}}


@require_safe
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    """The process is alive and serves requests."""
    return JsonResponse({"status": "ok"})


@require_safe
@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness with the detail of every check; 503 when any fails. `?role=worker` adds the
    sandbox backend's check (for a probe on a worker's host)."""
    role = request.GET.get("role", "web")
    if role not in ("web", "worker"):
        return JsonResponse(
            {
                "error": {
                    "code": "invalid_parameter",
                    "message": "role must be 'web' or 'worker'.",
                    "details": {"parameter": "role", "value": role[:50]},
                }
            },
            status=400,
        )
    results = readiness(worker=role == "worker")
    body = readiness_body(results)
    return JsonResponse(body, status=200 if body["status"] == "ok" else 503)
