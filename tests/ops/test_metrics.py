"""GET /metrics: token-protected, parses as Prometheus text, and moves after a real run driven by
a real worker process (prometheus-client multiprocess files of another process)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from runs.models import RunStatus
from runs.services import run_respond, run_start
from tests.cognition.worker_support import run_status, wait_for
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import new_workspace

TOKEN = "metrics-token-for-tests-3b1c"  # noqa: S105 - test data


@pytest.fixture
def metrics_on(settings) -> str:
    settings.MOTOR_METRICS_TOKEN = TOKEN
    return TOKEN


def scrape(client: Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition, keyed by (name, sorted labels)."""
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.mark.django_db
def test_metrics_are_off_without_a_token(client: Client) -> None:
    response = client.get("/metrics")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "header",
    [None, "Bearer wrong-token", f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer"],
)
def test_metrics_refuse_a_missing_or_wrong_token(client: Client, metrics_on, header) -> None:
    extra = {"HTTP_AUTHORIZATION": header} if header is not None else {}
    response = client.get("/metrics", **extra)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert b"motor_" not in response.content


@pytest.mark.django_db
def test_the_exposition_parses_and_exports_every_database_series(client: Client, metrics_on):
    samples = scrape(client)
    # every status x trigger series exists from the start, zeros included
    assert value(samples, "motor_runs", status="completed", trigger="api") == 0
    assert len([k for k in samples if k[0] == "motor_runs"]) == 7 * 4
    for name in (
        "motor_approvals_pending",
        "motor_approvals_pending_oldest_age_seconds",
        "motor_awaiting_input_runs",
        "motor_awaiting_input_oldest_age_seconds",
    ):
        assert value(samples, name) == 0
    assert value(samples, "motor_signal_deliveries", state="failed") == 0
    assert value(samples, "motor_schedule_skips_total", reason="agent_busy") == 0
    # django-prometheus counts requests (this scrape's own request is counted by the next one)
    again = scrape(client)
    assert any(name.startswith("django_http_requests_total") for name, _ in again)


@pytest.mark.django_db
def test_egress_decisions_of_a_run_session_are_counted(client: Client, metrics_on) -> None:
    from runs.sessions import run_session_close, run_session_get
    from sandbox.types import ExecRequest

    before = scrape(client)
    # given a run's real sandbox session that may reach only allowed.test
    session = run_session_get(
        run_id="run_0e9f55a7c3d1", workspace=new_workspace(), allowed_domains=("allowed.test",)
    )
    try:
        # when a program inside asks its proxy for a host outside the allowlist
        program = (
            "import urllib.request\n"
            "try:\n    urllib.request.urlopen('http://denied.test/', timeout=10)\n"
            "except Exception as exc:\n    print(type(exc).__name__)\n"
        )
        result = session.exec(ExecRequest(argv=["python3", "-c", program], timeout_s=30))
        assert result.stdout == b"HTTPError\n", result.stderr
    finally:
        run_session_close("run_0e9f55a7c3d1")
    # then the denial is counted with its reason
    after = scrape(client)
    denied = {
        labels: v - before.get((name, labels), 0.0)
        for (name, labels), v in after.items()
        if name == "motor_egress_decisions_total" and ("decision", "denied") in labels
    }
    assert denied == {(("decision", "denied"), ("reason", "not_allowlisted")): 1.0}, denied
    # one session started for it: cold, or a spare sandbox of the pool adopted
    started = sum(
        moved_by(before, after, "motor_sandbox_session_starts_total", kind=kind)
        for kind in ("cold", "pooled")
    )
    assert started == 1


def moved_by(before: dict, after: dict, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("clean_run_queue")
def test_counters_move_after_a_real_run(
    client: Client, metrics_on, agent, llm_stub_server, start_worker: Callable
) -> None:
    before = scrape(client)
    # given a worker process and a scripted model that writes a file, asks, then answers
    start_worker()
    first = reply_tools(tool_call("write", {"path": "a.txt", "content": "hi"}, call_id="w"))
    first["usage"] = {"prompt_tokens": 120, "completion_tokens": 7, "total_tokens": 127}
    llm_stub_server.add(
        first,
        reply_tools(tool_call("ask_user", {"question": "Which city?"}, call_id="q")),
    )
    run_id = run_start(
        agent_id=agent.pk,
        task="Write a file",
        tools=["write"],
        workspace=str(new_workspace()),
        actor="t",
    )["run_id"]
    wait_for(lambda: run_status(run_id) == RunStatus.AWAITING_INPUT, "the question")
    # when Prometheus scrapes while the run waits for its answer
    waiting = scrape(client)
    assert value(waiting, "motor_awaiting_input_runs") == 1
    assert value(waiting, "motor_runs", status="awaiting_input", trigger="api") == 1
    llm_stub_server.add(reply_text("Done."))
    run_respond(run_id=run_id, answer="Berlin", actor="t")
    wait_for(lambda: run_status(run_id) == RunStatus.COMPLETED, "completion")
    after = scrape(client)

    # then the database series and the worker's own counters moved
    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert value(after, "motor_runs", status="completed", trigger="api") == 1
    assert value(after, "motor_awaiting_input_runs") == 0
    model = "gpt-4o-mini"
    assert moved("motor_llm_request_seconds_count", model=model, outcome="ok") == 3
    assert moved("motor_llm_tokens_total", model=model, kind="prompt") == 120
    assert moved("motor_llm_tokens_total", model=model, kind="completion") == 7
    assert sum(moved("motor_sandbox_session_starts_total", kind=k) for k in ("cold", "pooled")) >= 1
    assert moved("motor_iterations_total") == 3
    assert moved("motor_tool_call_seconds_count", tool="write") == 1
    assert moved("motor_tool_call_failures_total", tool="write", error_code="unknown") == 0


@pytest.mark.django_db
def test_an_energy_refusal_is_counted(client: Client, metrics_on, agent) -> None:
    from cognition.energy import energy_check
    from cognition.errors import EnergyTooLow
    from cognition.models import Agent

    before = scrape(client)
    # given an exhausted agent
    Agent.objects.filter(pk=agent.pk).update(energy=0.0)
    agent.refresh_from_db()
    # when it asks for an agentic run twice and is refused both times
    for _ in range(2):
        with pytest.raises(EnergyTooLow):
            energy_check(agent=agent, mode="agentic")
    # then the refusals are counted by mode
    after = scrape(client)
    assert moved_by(before, after, "motor_energy_refusals_total", mode="agentic") == 2


def test_a_metrics_dir_that_cannot_be_created_stops_startup_naming_the_setting(tmp_path) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    # given a file where the metrics directory should be
    blocked = tmp_path / "metrics"
    blocked.write_text("not a directory")
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings", DEBUG="true", MOTOR_METRICS_DIR=str(blocked)
    )
    # when a process starts
    out = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # then it stops with an error naming the directory and the setting
    assert out.returncode == 1
    assert f"The metrics directory {blocked}/" in out.stderr
    assert "set MOTOR_METRICS_DIR to a directory this process may write." in out.stderr
