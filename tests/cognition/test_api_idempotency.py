"""Idempotency-Key on POST /api/v1/runs/ under concurrency, on either database: requests that
race with one key create one run, and every one of them answers its response."""
# ruff: noqa: F811 - pytest fixtures imported from core_support are parameters here

from __future__ import annotations

import threading

import pytest
from django.db import connection

from cognition.models import Agent, IdempotencyRecord
from runs.models import MotorRun

from .conftest import World, bearer
from .core_support import _clean_mutex_keys, workspaces  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db(transaction=True)

BODY = {"task": "List the workspace", "tools": ["read"], "domains": []}


def test_concurrent_requests_with_one_key_create_one_run_and_all_answer_it(
    world: World, workspaces
) -> None:
    # given several clients that send the same request with the same key at the same moment
    racers = 4
    start = threading.Barrier(racers)
    responses: list = []
    errors: list[BaseException] = []

    def post() -> None:
        try:
            client = bearer(world.alpha_token)
            start.wait()
            responses.append(
                client.post("/api/v1/runs/", BODY, format="json", HTTP_IDEMPOTENCY_KEY="same")
            )
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=post) for _ in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # then one run exists, charged once, remembered once
    assert errors == []
    (run,) = MotorRun.objects.all()
    assert Agent.objects.get(pk=world.alpha.pk).energy == pytest.approx(0.90)
    assert IdempotencyRecord.objects.count() == 1
    # and every client got the first response; all but one as a replay
    assert [(r.status_code, r.json()["run_id"]) for r in responses] == [(201, run.pk)] * racers
    replayed = [r.headers.get("Idempotent-Replayed") for r in responses]
    assert sorted(replayed, key=str) == [None] + ["true"] * (racers - 1)


def test_a_key_reused_for_another_request_in_a_race_is_a_conflict(world: World, workspaces) -> None:
    # given two different requests racing with one key
    start = threading.Barrier(2)
    statuses: dict[str, int] = {}

    def post(task: str) -> None:
        try:
            client = bearer(world.alpha_token)
            start.wait()
            response = client.post(
                "/api/v1/runs/", {**BODY, "task": task}, format="json", HTTP_IDEMPOTENCY_KEY="k"
            )
            statuses[task] = response.status_code
            if response.status_code == 409:
                assert response.json()["error"]["code"] == "idempotency_conflict"
        finally:
            connection.close()

    threads = [threading.Thread(target=post, args=(t,)) for t in ("one", "two")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # then one is created and the other is told the key is taken by another request
    assert sorted(statuses.values()) == [201, 409]
    (run,) = MotorRun.objects.all()
    winner = next(task for task, code in statuses.items() if code == 201)
    assert run.task == winner
    assert IdempotencyRecord.objects.count() == 1
