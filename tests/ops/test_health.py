"""Liveness, readiness (real database, Redis and bwrap) and the worker's health check."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client

from tests.cognition.worker_support import wait_for
from tests.runs.test_worker_process import _database_url

REPO = Path(__file__).resolve().parents[2]
DEAD_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1


def test_healthz_answers_while_the_process_serves(client: Client) -> None:
    response = client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


@pytest.mark.django_db
def test_readyz_reports_every_check_ok(client: Client) -> None:
    response = client.get("/readyz")
    body = response.json()
    assert response.status_code == 200
    assert body["status"] == "ok"
    assert sorted(body["checks"]) == ["broker", "database", "migrations", "mutex"]
    assert {name: check["ok"] for name, check in body["checks"].items()} == dict.fromkeys(
        ["broker", "database", "migrations", "mutex"], True
    )
    assert body["checks"]["migrations"]["detail"] == "all migrations applied"
    assert body["checks"]["database"]["detail"] == f"{connection.vendor} answers"


@pytest.mark.django_db
def test_readyz_is_503_naming_the_broker_when_redis_does_not_answer(
    client: Client, settings
) -> None:
    settings.CELERY_BROKER_URL = DEAD_REDIS
    response = client.get("/readyz")
    body = response.json()
    assert (response.status_code, body["status"]) == (503, "fail")
    assert body["checks"]["broker"]["ok"] is False
    assert body["checks"]["broker"]["detail"].startswith("ConnectionError: ")
    # the other checks still ran and passed
    assert [n for n, c in body["checks"].items() if c["ok"]] == ["database", "migrations", "mutex"]


@pytest.mark.django_db
def test_readyz_is_503_naming_the_mutex_redis_when_it_does_not_answer(client: Client, settings):
    settings.MOTOR_MUTEX_REDIS_URL = DEAD_REDIS
    body = client.get("/readyz").json()
    assert (body["status"], body["checks"]["mutex"]["ok"], body["checks"]["broker"]["ok"]) == (
        "fail",
        False,
        True,
    )


@pytest.mark.django_db(transaction=True)
def test_readyz_is_503_naming_a_migration_not_applied(client: Client) -> None:
    # given one app's last migration rolled back (a deploy before `migrate`): the first leaf
    # whose rollback takes back nothing else
    executor = MigrationExecutor(connection)
    graph = executor.loader.graph
    for leaf in sorted(graph.leaf_nodes()):
        (parent,) = graph.node_map[leaf].parents
        if len(executor.migration_plan([parent.key])) == 1:
            break
    app_label = leaf[0]
    call_command("migrate", app_label, parent.key[1], verbosity=0)
    try:
        response = client.get("/readyz")
        body = response.json()
        assert response.status_code == 503
        assert body["checks"]["migrations"] == {
            "ok": False,
            "detail": f"RuntimeError: 1 migration(s) not applied: {app_label}.{leaf[1]}",
            "duration_ms": body["checks"]["migrations"]["duration_ms"],
        }
        assert body["checks"]["database"]["ok"] is True
    finally:
        call_command("migrate", app_label, verbosity=0)
    assert client.get("/readyz").status_code == 200


@pytest.mark.django_db
def test_readyz_for_a_worker_checks_the_sandbox_backend(client: Client, settings) -> None:
    settings.SANDBOX_BACKEND = "bwrap"
    body = client.get("/readyz?role=worker").json()
    assert body["checks"]["sandbox"]["ok"] is True
    assert body["checks"]["sandbox"]["detail"].endswith("creates namespaces")
    # a backend this host cannot use fails the worker's readiness (never a fallback)
    settings.SANDBOX_BACKEND = "local"
    settings.SANDBOX_ALLOW_LOCAL = False
    response = client.get("/readyz?role=worker")
    assert response.status_code == 503
    assert response.json()["checks"]["sandbox"] == {
        "ok": False,
        "detail": "RuntimeError: the local backend is off (SANDBOX_ALLOW_LOCAL=false)",
        "duration_ms": response.json()["checks"]["sandbox"]["duration_ms"],
    }


def test_readyz_refuses_an_unknown_role(client: Client) -> None:
    response = client.get("/readyz?role=beat")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_parameter"


def _worker_health(*args: str) -> subprocess.CompletedProcess[str]:
    import os

    env = {**os.environ, "DATABASE_URL": _database_url()}
    return subprocess.run(
        [sys.executable, "manage.py", "worker_health", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_worker_health_passes_for_a_live_worker_and_fails_for_a_missing_one(start_worker):
    import socket

    start_worker(pool="threads", concurrency=2)
    name = f"celery@{socket.gethostname()}"
    # when the probe runs against the live worker (it may still be starting: retry a while)
    results: list[subprocess.CompletedProcess[str]] = []

    def healthy() -> bool:
        results.append(_worker_health("--timeout", "2"))
        return results[-1].returncode == 0

    wait_for(healthy, "the worker to answer its health check", timeout_s=60)
    body = json.loads(results[-1].stdout)
    assert body["status"] == "ok"
    assert body["checks"]["worker"]["detail"] == f"{name} answers"
    assert sorted(body["checks"]) == [
        "broker",
        "database",
        "migrations",
        "mutex",
        "sandbox",
        "worker",
    ]
    # and a node that does not exist fails it, with exit status 1
    missing = _worker_health("--name", "celery@no-such-node", "--timeout", "1")
    assert missing.returncode == 1
    assert json.loads(missing.stdout)["checks"]["worker"] == {
        "ok": False,
        "detail": "celery@no-such-node did not answer within 1 s",
        "duration_ms": json.loads(missing.stdout)["checks"]["worker"]["duration_ms"],
    }
