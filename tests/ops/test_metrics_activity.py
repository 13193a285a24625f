"""Every metric the operations issue lists moves by exactly what real activity did: a webhook
delivered to a local HTTP receiver, a reaper pass, a run's sandbox sessions, tool failures,
approvals and questions waiting, egress allowed and denied, deliveries pending and failed, and a
scheduled occurrence skipped. (Runs by status, LLM latency and tokens, iterations, tool latency
and energy refusals are shown moving in test_metrics.py.)"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from cognition.delivery import signal_dispatch
from cognition.models import DeliveryState, SignalDelivery
from cognition.webhooks import agent_set_webhook
from config.celery import app as celery_app
from runs.models import ApprovalRequest, MotorRun, RunStatus
from runs.outbox import signal_emit
from runs.services import SliceOutcome, run_start
from runs.tasks import run_reap_task
from tests.cognition.conftest import World, world  # noqa: F401 - fixture
from tests.cognition.core_support import skill_in_status, workspaces  # noqa: F401 - fixture
from tests.cognition.test_signal_delivery import Receiver, receiver  # noqa: F401 - fixture
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import drive, new_workspace
from tests.skills.admin_support import make_agent, make_user

from .test_metrics import TOKEN, moved_by, scrape, value

pytest_plugins = ["tests.fixtures.upstream"]


@pytest.fixture
def metrics_on(settings) -> str:
    settings.MOTOR_METRICS_TOKEN = TOKEN
    return TOKEN


def moves(before: dict, after: dict, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The series of `name` that changed between two scrapes, with their deltas."""
    keys = {labels for (n, labels) in after if n == name} | {
        labels for (n, labels) in before if n == name
    }
    deltas = {
        labels: after.get((name, labels), 0.0) - before.get((name, labels), 0.0) for labels in keys
    }
    return {labels: delta for labels, delta in deltas.items() if delta}


# --- webhooks ------------------------------------------------------------------------------------


@pytest.fixture
def eager(settings) -> Iterator[None]:
    settings.MOTOR_SIGNAL_DELIVERY_MAX_ATTEMPTS = 1  # a refused attempt is the final one
    settings.MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True  # the receiver is on loopback
    before = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = before


@pytest.mark.django_db(transaction=True)
def test_webhook_deliveries_are_timed_by_outcome_and_a_failed_one_is_counted(
    client: Client,
    metrics_on,
    eager,
    receiver: Receiver,  # noqa: F811
) -> None:
    # given two agents whose webhooks answer 200 and 500
    ok_agent = make_agent("scout", owner=make_user("olivia"))
    down_agent = make_agent("ranger", owner=make_user("bob"))
    for agent, path, status in ((ok_agent, "/ok", 200), (down_agent, "/down", 500)):
        receiver.secrets[path] = agent_set_webhook(
            agent=agent, url=f"{receiver.base_url}{path}", actor="t"
        ).raw
        receiver.plans[path] = [status]
    before = scrape(client)
    # when a signal of each is delivered by a real HTTP request
    signal_emit(agent_id=ok_agent.pk, kind="motor_result", payload={"status": "completed"})
    signal_emit(agent_id=down_agent.pk, kind="motor_result", payload={"status": "failed"})
    assert (len(receiver.on("/ok")), len(receiver.on("/down"))) == (1, 1)
    after = scrape(client)
    # then each attempt is one observation of the latency histogram, under its outcome
    assert moves(before, after, "motor_webhook_seconds_count") == {
        (("outcome", "delivered"),): 1.0,
        (("outcome", "failed"),): 1.0,
    }
    took = moved_by(before, after, "motor_webhook_seconds_sum", outcome="delivered")
    assert 0 < took < 5
    # and the failed delivery is what the deliveries gauge shows
    assert moves(before, after, "motor_signal_deliveries") == {(("state", "failed"),): 1.0}


@pytest.mark.django_db
def test_a_planned_delivery_is_pending_until_its_attempt(client: Client, metrics_on, settings):
    settings.MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    agent = make_agent("scout", owner=make_user("olivia"))
    agent_set_webhook(agent=agent, url="http://127.0.0.1:9/hook", actor="t")
    before = scrape(client)
    # when a signal's deliveries are planned (its attempts not yet run: nothing commits here)
    signal = signal_emit(agent_id=agent.pk, kind="motor_result", payload={"status": "completed"})
    planned = signal_dispatch(signal_id=signal.pk)
    # then the webhook's is pending, and each brain hook's is delivering: claimed in the plan
    # for the first attempt the dispatching process makes itself
    hooks = len(planned) - 1
    assert hooks >= 1
    assert moves(before, scrape(client), "motor_signal_deliveries") == {
        (("state", "pending"),): 1.0,
        (("state", "delivering"),): float(hooks),
    }
    assert list(
        SignalDelivery.objects.filter(state=DeliveryState.PENDING).values_list("target", flat=True)
    ) == ["webhook"]


# --- the reaper ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_reaper_pass_counts_what_it_did(
    client: Client, metrics_on, make_agent, scripted_llm, settings
) -> None:
    settings.MOTOR_AWAITING_INPUT_TIMEOUT_SECONDS = 60
    # a pass with nothing to do moves nothing
    quiet = scrape(client)
    assert run_reap_task() == {"woken": [], "timed_out": []}
    assert moves(quiet, scrape(client), "motor_reaper_actions_total") == {}
    # given one run whose wake-up was lost and one whose question waited too long
    lost = run_start(workspace=new_workspace(), agent_id=make_agent().pk, task="t", actor="t")[
        "run_id"
    ]
    MotorRun.objects.filter(pk=lost).update(idle_since=timezone.now() - timedelta(minutes=5))
    asking = run_start(workspace=new_workspace(), agent_id=make_agent().pk, task="t", actor="t")[
        "run_id"
    ]
    scripted_llm.add(reply_tools(tool_call("ask_user", {"question": "Which?"})))
    drive(asking, scripted_llm.client())
    MotorRun.objects.filter(pk=asking).update(updated_at=timezone.now() - timedelta(seconds=61))
    before = scrape(client)
    # when the periodic reaper task runs once
    report = run_reap_task()
    # then its counters moved by what it reported
    assert report == {"woken": [lost], "timed_out": [asking]}
    assert moves(before, scrape(client), "motor_reaper_actions_total") == {
        (("action", "woken"),): 1.0,
        (("action", "timed_out"),): 1.0,
    }


# --- sandbox sessions and egress -----------------------------------------------------------------


@pytest.mark.django_db
def test_sandbox_sessions_open_and_cold_and_warm_starts(client: Client, metrics_on) -> None:
    from runs.sessions import open_run_sessions, run_session_close, run_session_get
    from sandbox.types import ExecRequest

    # sessions of earlier tests in this process would close by idle timeout mid-measure
    for run_id in open_run_sessions():
        run_session_close(run_id)
    workspace = new_workspace()
    before = scrape(client)
    # when a run's first call opens its session and two later calls reuse it
    first = run_session_get(run_id="run_5b0c1d2e3f4a", workspace=workspace, allowed_domains=())
    try:
        for _ in range(2):
            again = run_session_get(
                run_id="run_5b0c1d2e3f4a", workspace=workspace, allowed_domains=()
            )
            assert again is first
        assert first.exec(ExecRequest(argv=["true"], timeout_s=30)).exit_code == 0
        during = scrape(client)
    finally:
        run_session_close("run_5b0c1d2e3f4a")
    after = scrape(client)
    # then one cold and two warm starts were counted, and the session was open until closed
    assert moves(before, during, "motor_sandbox_session_starts_total") == {
        (("kind", "cold"),): 1.0,
        (("kind", "warm"),): 2.0,
    }
    assert moved_by(before, during, "motor_sandbox_sessions_open") == 1
    assert moved_by(before, after, "motor_sandbox_sessions_open") == 0


@pytest.mark.django_db
def test_a_session_the_idle_reaper_closes_leaves_the_open_sessions_gauge(
    client: Client, metrics_on, settings
) -> None:
    from runs.sessions import _sessions, open_run_sessions, run_session_close, run_session_get

    for run_id in open_run_sessions():
        run_session_close(run_id)
    settings.MOTOR_SANDBOX_IDLE_TIMEOUT_SECONDS = 0.2
    before = scrape(client)
    # given a run's session, opened and then left alone past its idle timeout
    run_session_get(run_id="run_6c1d2e3f4a5b", workspace=new_workspace(), allowed_domains=())
    assert moved_by(before, scrape(client), "motor_sandbox_sessions_open") == 1
    time.sleep(0.4)
    # when the idle reaper closes it (not the run)
    assert _sessions().close_idle() == ["run_6c1d2e3f4a5b"]
    # then the gauge says no session is open any more
    assert moved_by(before, scrape(client), "motor_sandbox_sessions_open") == 0


@pytest.mark.django_db
def test_allowed_and_denied_egress_are_counted_by_reason(
    client: Client, metrics_on, upstream, monkeypatch
) -> None:
    from runs.sessions import run_session_close, run_session_get
    from sandbox.types import ExecRequest

    monkeypatch.setenv("MOTOR_SANDBOX_EGRESS_HOSTS", f"allowed.test={upstream.ip}")
    before = scrape(client)
    # given a session that may reach allowed.test (the test upstream) and nothing else
    session = run_session_get(
        run_id="run_6c1d2e3f4a5b", workspace=new_workspace(), allowed_domains=("allowed.test",)
    )
    try:
        # when a program fetches from the allowed host, then from one outside the allowlist
        program = (
            "import urllib.request\n"
            "print(urllib.request.urlopen('http://allowed.test/hello', timeout=10).status)\n"
            "try:\n    urllib.request.urlopen('http://denied.test/', timeout=10)\n"
            "except Exception as exc:\n    print(type(exc).__name__)\n"
        )
        result = session.exec(ExecRequest(argv=["python3", "-c", program], timeout_s=30))
        assert result.stdout == b"200\nHTTPError\n", result.stderr
    finally:
        run_session_close("run_6c1d2e3f4a5b")
    # then one allowed and one denied decision were counted, each with its reason
    assert moves(before, scrape(client), "motor_egress_decisions_total") == {
        (("decision", "allowed"), ("reason", "closed")): 1.0,
        (("decision", "denied"), ("reason", "not_allowlisted")): 1.0,
    }


# --- tool failures, approvals and questions waiting ----------------------------------------------


@pytest.mark.django_db
def test_a_failed_tool_call_is_counted_by_tool_and_error_code(
    client: Client, metrics_on, agent, scripted_llm
) -> None:
    run_id = run_start(
        agent_id=agent.pk, task="Read it", tools=["read"], workspace=new_workspace(), actor="t"
    )["run_id"]
    scripted_llm.add(
        reply_tools(tool_call("read", {"path": "missing.txt"}, call_id="r")),
        reply_text("There is no such file."),
    )
    before = scrape(client)
    # when the run reads a file that does not exist
    assert drive(run_id, scripted_llm.client())[-1] is SliceOutcome.FINISHED
    after = scrape(client)
    # then the call is timed and its failure counted with the tool's error code
    assert moved_by(before, after, "motor_tool_call_seconds_count", tool="read") == 1
    assert moves(before, after, "motor_tool_call_failures_total") == {
        (("error_code", "not_found"), ("tool", "read")): 1.0
    }


@pytest.mark.django_db
def test_approvals_and_questions_waiting_are_counted_with_their_age(
    client: Client, metrics_on, make_agent, scripted_llm
) -> None:
    # given a run waiting for an approval and another waiting for an answer
    gated = run_start(
        agent_id=make_agent().pk,
        task="Append",
        tools=["bash"],
        workspace=new_workspace(),
        approval_required=True,
        actor="t",
    )["run_id"]
    scripted_llm.add(reply_tools(tool_call("bash", {"command": "echo a >> log.txt"})))
    assert drive(gated, scripted_llm.client()) == [SliceOutcome.PAUSED]
    asking = run_start(workspace=new_workspace(), agent_id=make_agent().pk, task="t", actor="t")[
        "run_id"
    ]
    scripted_llm.add(reply_tools(tool_call("ask_user", {"question": "Which?"})))
    assert drive(asking, scripted_llm.client()) == [SliceOutcome.PAUSED]
    # asked 10 minutes and 5 minutes ago
    ApprovalRequest.objects.filter(run_id=gated).update(
        created_at=timezone.now() - timedelta(minutes=10)
    )
    MotorRun.objects.filter(pk=asking).update(updated_at=timezone.now() - timedelta(minutes=5))
    # when Prometheus scrapes
    samples = scrape(client)
    # then both waits are counted and aged (seconds, give or take the scrape's own time)
    assert value(samples, "motor_approvals_pending") == 1
    assert 600 <= value(samples, "motor_approvals_pending_oldest_age_seconds") < 660
    assert value(samples, "motor_awaiting_input_runs") == 1
    assert 300 <= value(samples, "motor_awaiting_input_oldest_age_seconds") < 360
    assert value(samples, "motor_runs", status="awaiting_approval", trigger="api") == 1
    assert MotorRun.objects.get(pk=gated).status == RunStatus.AWAITING_APPROVAL


# --- schedules -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_skipped_occurrence_is_counted_by_its_reason(
    client: Client,
    metrics_on,
    world: World,  # noqa: F811
    tmp_path,
    workspaces,  # noqa: F811
) -> None:
    from cognition.schedule_firing import schedule_fire
    from cognition.schedules import schedule_create
    from cognition.services import credential_set

    # given an hourly schedule of an approved skill, and its agent busy with another run
    skill_in_status(tmp_path / "src", agent=world.alpha, approver=world.olivia, status="approved")
    credential_set(agent=world.alpha, name="WEATHER_TOKEN", value="tok-12345678", actor="test")
    schedule = schedule_create(
        agent=world.alpha,
        skill="weather-report",
        task="Report the weather in Berlin",
        interval_seconds=3600,
        actor=world.olivia,
    )
    run_start(workspace=new_workspace(), agent_id=world.alpha.pk, task="hold", actor="test")
    before = scrape(client)
    # when it fires twice
    for _ in range(2):
        schedule_fire(schedule_id=schedule.pk)
    # then both skips are counted under the reason
    assert moves(before, scrape(client), "motor_schedule_skips_total") == {
        (("reason", "agent_busy"),): 2.0
    }
