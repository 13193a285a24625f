"""A tour of every endpoint with a secret stored in the vault and in a policy: the raw value is in
no response body, for any kind of caller, and the database holds only ciphertext."""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import structlog
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.contrib.auth.models import User
from django.db import connection
from django.http import HttpResponse
from django.test import Client
from django.urls import reverse

from cognition.models import Agent
from runs.models import RunStatus, Step
from runs.mutex import redis_client
from tests.fixtures.llm import LLMStubServer, reply_text, reply_tools, tool_call
from tests.skills.admin_support import make_user

from .conftest import (
    SECRET,
    World,
    bearer,
    raw_credential_column,
    raw_policy_credential_column,
    skill_md,
)
from .core_support import skill_in_status
from .test_signal_delivery import Receiver, receiver  # noqa: F401 - fixture
from .worker_support import (  # noqa: F401 - clean_run_queue, start_worker: fixtures
    clean_run_queue,
    run_status,
    start_worker,
    wait_for,
    worker_logs,
)

pytestmark = pytest.mark.django_db

USER_MESSAGE = {"HTTP_X_MOTOR_TRIGGER": "user_message"}


def test_no_response_of_any_endpoint_contains_a_credential_value(
    world: World, session_client: Callable, personal_client: Callable
) -> None:
    Agent.objects.filter(pk=world.alpha.pk).update(trusted_for_relayed_consent=True)
    alpha = bearer(world.alpha_token)
    responses = [
        alpha.post("/api/v1/skills/", {"skill_md": skill_md("mailer")}, format="json"),
        alpha.put("/api/v1/credentials/API_KEY/", {"value": SECRET}, format="json"),
        alpha.post(
            "/api/v1/skills/mailer/update/",
            {"credentials": ["API_KEY"], "credential_values": {"API_KEY": SECRET}},
            format="json",
            **USER_MESSAGE,
        ),
        alpha.get("/api/v1/skills/mailer/review/"),
        alpha.post("/api/v1/skills/mailer/approve/", {}, format="json", **USER_MESSAGE),
    ]
    for client in (
        alpha,
        session_client(world.olivia),
        personal_client(world.olivia),
        bearer(world.bravo_token),
    ):
        for path in (
            "/api/v1/skills/",
            "/api/v1/skills/mailer/",
            "/api/v1/skills/mailer/review/",
            "/api/v1/credentials/",
            "/api/v1/agents/",
            "/api/v1/agents/me/",
            "/api/v1/tokens/",
            "/api/schema/",
        ):
            responses.append(client.get(path))
    responses.append(bearer(world.bravo_token).get("/api/v1/credentials/?agent=alpha"))

    assert [r.status_code for r in responses[:5]] == [201, 200, 200, 200, 200]
    assert responses[4].json()["status"] == "approved"
    for response in responses:
        assert response.status_code < 500
        assert SECRET.encode() not in response.content
    assert all(SECRET not in v for v in raw_credential_column() + raw_policy_credential_column())


# --- end to end: a real run that used a credential, a webhook secret and an agent token ----------

CREDENTIAL_VALUE = "wx-end-to-end-Cr3d-91c4e7"  # noqa: S105 - test data
PROGRAM = (
    "import os, sys\n"
    "value = os.environ['WEATHER_TOKEN']\n"
    "print('token:', value)\n"
    "sys.stderr.write('on stderr: ' + value + '\\n')\n"
)
FAILING = "import os\nraise SystemExit('refused with ' + os.environ['WEATHER_TOKEN'])\n"


def _redis_dump() -> bytes:
    """Every key and value of the test Redis database (SCAN; strings, lists, hashes, sets, sorted
    sets, streams), with Celery message bodies (base64 inside kombu's envelope) decoded."""
    client = redis_client()
    parts: list[bytes] = []
    for key in client.scan_iter(count=500):
        kind = client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        values: list[Any]
        if kind == "string":
            values = [client.get(key)]
        elif kind == "list":
            values = client.lrange(key, 0, -1)
        elif kind == "hash":
            values = [x for pair in client.hgetall(key).items() for x in pair]
        elif kind == "set":
            values = list(client.smembers(key))
        elif kind == "zset":
            values = [m for m, _ in client.zrange(key, 0, -1, withscores=True)]
        elif kind == "stream":
            values = [repr(entry) for entry in client.xrange(key)]
        else:
            values = []
        for value in [key, *values]:
            raw = value if isinstance(value, bytes) else str(value).encode()
            parts.append(raw)
            parts.extend(_decoded_bodies(raw))
    return b"\n".join(parts)


def _decoded_bodies(raw: bytes) -> list[bytes]:
    try:
        envelope = json.loads(raw)
    except ValueError:
        return []
    if isinstance(envelope, list) and envelope:  # kombu's unacked entries: [message, ...]
        envelope = envelope[0]
    if not isinstance(envelope, dict) or not isinstance(envelope.get("body"), str):
        return []
    try:
        return [base64.b64decode(envelope["body"])]
    except ValueError:
        return []


def _pg_dump() -> bytes:
    params = connection.settings_dict
    env = {**os.environ, "PGPASSWORD": params.get("PASSWORD") or ""}
    dumped = subprocess.run(
        [
            "pg_dump",
            "--no-owner",
            "--host",
            params.get("HOST") or "127.0.0.1",
            "--port",
            str(params.get("PORT") or 5432),
            "--username",
            params.get("USER") or "postgres",
            params["NAME"],
        ],
        env=env,
        capture_output=True,
        check=True,
        timeout=120,
    )
    return dumped.stdout


def _admin_pages(client: Client) -> dict[str, HttpResponse]:
    """The changelist and the change page of (up to five of) every object of every admin."""
    pages: dict[str, HttpResponse] = {"admin:index": client.get(reverse("admin:index"))}
    for model, model_admin in admin.site._registry.items():
        opts = model._meta
        changelist = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
        pages[changelist] = client.get(changelist)
        for pk in model_admin.get_queryset(_AdminRequest()).values_list("pk", flat=True)[:5]:
            # quoted as the admin's own links are: a run id such as run_26… would otherwise
            # read as run&… (the admin decodes _XX in primary keys)
            change = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[quote(pk)])
            pages[change] = client.get(change, follow=True)  # (a policy's goes to review)
    return pages


class _AdminRequest:
    """Enough of a request for ModelAdmin.get_queryset (a superuser: every row)."""

    def __init__(self) -> None:
        from django.contrib.auth.models import User

        self.user = User.objects.get(username="root")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("clean_run_queue")
def test_after_a_real_run_no_secret_is_in_the_database_dump_redis_logs_api_or_admin(
    world: World,
    session_client: Callable,
    start_worker: Callable,  # noqa: F811 - the fixture
    llm_stub_server: LLMStubServer,
    receiver: Receiver,  # noqa: F811 - the fixture
    tmp_path: Path,
    settings,
    caplog,
) -> None:
    caplog.set_level(logging.DEBUG)
    # this process's log lines as the configured formatter writes them (JSON objects)
    json_lines = io.StringIO()
    json_handler = logging.StreamHandler(json_lines)
    (json_handler.formatter,) = [
        h.formatter
        for h in logging.getLogger().handlers
        if isinstance(h.formatter, structlog.stdlib.ProcessorFormatter)
    ]
    logging.getLogger().addHandler(json_handler)
    settings.MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    settings.MOTOR_SIGNAL_STREAM_MAX_SECONDS = 1
    settings.MOTOR_SIGNAL_STREAM_HEARTBEAT_SECONDS = 0.5
    start_worker(MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES="true", LOG_LEVEL="DEBUG")
    make_user("root", superuser=True)
    skill_in_status(tmp_path / "src", agent=world.alpha, approver=world.olivia, status="approved")
    alpha = bearer(world.alpha_token)
    olivia = session_client(world.olivia)
    responses: list[HttpResponse] = []

    # given a webhook (its secret returned once), a credential set through the API, and a model
    # that prints the value, passes its placeholder and makes a program fail quoting it
    webhook = olivia.put(
        "/api/v1/agents/alpha/webhook/", {"url": f"{receiver.base_url}/alpha"}, format="json"
    )
    assert webhook.status_code == 200, webhook.content
    webhook_secret = webhook.json()["secret"]
    receiver.secrets["/alpha"] = webhook_secret
    responses.append(
        alpha.put("/api/v1/credentials/WEATHER_TOKEN/", {"value": CREDENTIAL_VALUE}, "json")
    )
    llm_stub_server.add(
        reply_tools(tool_call("code", {"code": PROGRAM})),
        reply_tools(
            tool_call("code", {"code": "print('<credential:WEATHER_TOKEN>'[::-1][::-1])"}),
            tool_call("code", {"code": FAILING}),
        ),
        reply_text("Done."),
    )
    secrets = {
        "credential": CREDENTIAL_VALUE,
        "webhook secret": webhook_secret,
        "agent token": world.alpha_token,
    }

    # when the agent runs the skill on a real worker, and the result signal reaches the webhook
    # (Redis is read over and over meanwhile, catching task messages queued and in flight)
    redis_samples: list[bytes] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            redis_samples.append(_redis_dump())
            sampling.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        created = alpha.post(
            "/api/v1/runs/", {"task": "Weather", "skill": "weather-report"}, "json"
        )
        assert created.status_code == 201, created.content
        run_id = created.json()["run_id"]
        wait_for(lambda: run_status(run_id) == RunStatus.COMPLETED, "completion")
        wait_for(
            lambda: any(r.verified and run_id.encode() in r.body for r in receiver.on("/alpha")),
            "the signed webhook delivery of the result",
        )
    finally:
        sampling.set()
        sampler.join()
    redis_samples.append(_redis_dump())
    # (the samples saw the run: its mutex key holds the run id while it is active)
    assert any(run_id.encode() in sample for sample in redis_samples)
    outputs = [s.result for s in Step.objects.filter(attempt__run_id=run_id).order_by("id")]
    # (the program did see the value: its output carries the placeholder where the value was)
    assert "token: <credential:weather_token>" in outputs[0]["output"], outputs
    assert outputs[2]["ok"] is False

    # then no API response of the agent or its owner holds any of them
    for client in (alpha, olivia):
        for path in (
            "/api/v1/runs/",
            f"/api/v1/runs/{run_id}/",
            f"/api/v1/runs/{run_id}/log/",
            "/api/v1/signals/?after=0",
            "/api/v1/signals/stream/?after=0",
            "/api/v1/credentials/",
            "/api/v1/skills/",
            "/api/v1/skills/weather-report/",
            "/api/v1/skills/weather-report/review/",
            "/api/v1/agents/",
            "/api/v1/agents/me/",
            "/api/v1/agents/alpha/webhook/",
            "/api/v1/tools/",
            "/api/v1/tokens/",
        ):
            params = {"agent": "alpha"} if client is olivia else {}
            response = client.get(path, params)
            if response.status_code in (403, 404):  # e.g. an endpoint for the other principal
                continue
            assert response.status_code == 200, (path, response.content)
            responses.append(response)
    bodies = [b"".join(r.streaming_content) if r.streaming else r.content for r in responses]
    assert len(bodies) > 20
    # nor does any admin page, for a superuser
    pages = _admin_pages(session_client(User.objects.get(username="root")))
    assert all(p.status_code == 200 for p in pages.values()), {
        k: p.status_code for k, p in pages.items() if p.status_code != 200
    }
    assert reverse("admin:runs_motorrun_change", args=[quote(run_id)]) in pages
    # nor the database dump, Redis, this process's log records or the worker's output
    dump = _pg_dump()
    # (the dump holds the data: the run, and the vault row as ciphertext)
    assert run_id.encode() in dump
    assert all(ciphertext.encode() in dump for ciphertext in raw_credential_column())
    places = {
        "pg_dump": dump,
        **{f"redis sample {i}": sample for i, sample in enumerate(redis_samples)},
        "caplog": caplog.text.encode(),
        "worker output": worker_logs(tmp_path).encode(),
        "LLM requests": json.dumps(llm_stub_server.requests).encode(),
        **{f"admin {url}": page.content for url, page in pages.items()},
        **{f"API response {i}": body for i, body in enumerate(bodies)},
    }
    assert "run" in worker_logs(tmp_path)  # the worker did log
    logging.getLogger().removeHandler(json_handler)
    # the log lines of both processes are JSON objects (with the run's context); their decoded
    # values are searched too (JSON escapes could hide a value from a search of the text)
    worker_records = [
        json.loads(line) for line in worker_logs(tmp_path).splitlines() if line.startswith("{")
    ]
    web_records = [json.loads(line) for line in json_lines.getvalue().splitlines()]
    assert any(r.get("run_id") == run_id for r in worker_records)
    assert web_records
    places["worker JSON log values"] = json.dumps(worker_records, ensure_ascii=False).encode()
    places["web JSON log lines"] = json_lines.getvalue().encode()
    places["web JSON log values"] = json.dumps(web_records, ensure_ascii=False).encode()
    leaks = [
        f"{what} in {where}"
        for what, secret in secrets.items()
        for where, text in places.items()
        if secret.encode() in text
    ]
    assert leaks == []
