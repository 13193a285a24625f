"""A revoked agent token stops that agent's in-flight runs at their next step (real worker)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from cognition.models import Agent
from cognition.services import TOKEN_REVOKED_REASON, agent_revoke_token
from runs.models import MotorRun, RunEvent, RunStatus, Signal, Step
from runs.mutex import mutex_key, redis_client
from runs.services import run_start
from tests.fixtures.llm import LLMStubServer, reply_text, reply_tools, tool_call
from tests.runs.helpers import new_workspace

from .conftest import World, bearer
from .worker_support import (  # noqa: F401 - clean_run_queue, start_worker, worker: fixtures
    clean_run_queue,
    run_status,
    start_worker,
    wait_for,
    worker,
    worker_logs,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("clean_run_queue"),
]


@pytest.mark.usefixtures("worker")
def test_revoking_the_token_through_the_api_cancels_the_run_before_its_next_tool_call(
    world: World,
    session_client: Callable,
    llm_stub_server: LLMStubServer,
    tmp_path: Path,
) -> None:
    # given a run of alpha (started with its token) whose model writes one file, then — while
    # its second LLM call is in flight — asks to write another
    llm_stub_server.add(
        reply_tools(tool_call("write", {"path": "first.txt", "content": "1"}, call_id="w1"))
    )
    second = llm_stub_server.add_gated(
        reply_tools(tool_call("write", {"path": "second.txt", "content": "2"}, call_id="w2"))
    )
    llm_stub_server.add(reply_text("Both written."))
    created = bearer(world.alpha_token).post(
        "/api/v1/runs/", {"task": "Write two files", "tools": ["write"], "domains": []}, "json"
    )
    assert created.status_code == 201, created.content
    run_id = created.json()["run_id"]
    wait_for(lambda: len(llm_stub_server.requests) == 2, "the second LLM call")
    workspace = Path(MotorRun.objects.get(pk=run_id).workspace)
    assert (workspace / "first.txt").read_text() == "1"

    # when the owner revokes alpha's token through the API
    revoked = session_client(world.olivia).delete("/api/v1/agents/alpha/token/")
    assert revoked.status_code == 204

    # then the run is cancelled at once with the reason, the mutex is free, a signal went out
    run = MotorRun.objects.get(pk=run_id)
    assert run.status == RunStatus.CANCELLED
    assert run.result["failure"]["message"] == TOKEN_REVOKED_REASON == "agent token revoked"
    assert run.result["failure"]["category"] == "cancelled"
    assert redis_client().get(mutex_key(world.alpha.pk)) is None
    signal = Signal.objects.filter(run_id=run_id).order_by("-id").first()
    assert signal is not None
    assert (signal.kind, signal.payload["status"], signal.payload["error"]["message"]) == (
        "motor_result",
        "cancelled",
        "agent token revoked",
    )
    event = RunEvent.objects.filter(run_id=run_id, to_status="cancelled").get()
    assert (event.actor, event.detail) == ("olivia", {"reason": "agent token revoked"})
    # and the token no longer authenticates
    assert bearer(world.alpha_token).get("/api/v1/agents/me/").status_code == 401

    # when the model's answer (asking for the second write) arrives after all
    second.set()
    wait_for(lambda: llm_stub_server.remaining == 1, "the worker to take the second reply")
    wait_for(lambda: "lease lost" in worker_logs(tmp_path), "the worker to drop its slice")

    # then nothing further ran or was recorded: one step, no second file, no third LLM call
    assert list(
        Step.objects.filter(attempt__run_id=run_id).values_list("tool_call_id", "state")
    ) == [("w1", "done")]
    assert not (workspace / "second.txt").exists()
    assert len(llm_stub_server.requests) == 2
    assert run_status(run_id) == RunStatus.CANCELLED
    assert list(Signal.objects.filter(run_id=run_id).values_list("payload__status", flat=True)) == [
        "cancelled"
    ]


def test_revoking_in_the_admin_cancels_the_agents_active_run_and_leaves_others(
    world: World,
) -> None:
    # given an active run for alpha and one for bravo (no worker: they stay created)
    alpha_run = run_start(
        workspace=new_workspace(), agent_id=world.alpha.pk, task="a", tools=["read"], actor="t"
    )["run_id"]
    bravo_run = run_start(
        workspace=new_workspace(), agent_id=world.bravo.pk, task="b", tools=["read"], actor="t"
    )["run_id"]
    root = Client()
    root.force_login(world.olivia.__class__.objects.create_superuser("root", "r@x.org", "pw"))

    # when a superuser revokes alpha's token with the admin action
    response = root.post(
        reverse("admin:cognition_agent_changelist"),
        {"action": "revoke_api_token", "_selected_action": [world.alpha.pk]},
    )

    # then alpha's run is cancelled with the reason and bravo's run is untouched
    assert response.status_code == 302
    assert run_status(alpha_run) == RunStatus.CANCELLED
    assert MotorRun.objects.get(pk=alpha_run).result["failure"]["message"] == "agent token revoked"
    assert run_status(bravo_run) == RunStatus.CREATED
    assert Agent.objects.get(pk=world.alpha.pk).token_hash == ""
    assert Agent.objects.get(pk=world.bravo.pk).token_hash != ""
    assert list(
        Signal.objects.filter(run_id__in=[alpha_run, bravo_run]).values_list(
            "run_id", "payload__status"
        )
    ) == [(alpha_run, "cancelled")]


def test_revoking_an_agent_without_active_runs_changes_no_run(world: World) -> None:
    # given a finished run (cancelled by its owner earlier)
    from runs.services import run_cancel

    run_id = run_start(
        workspace=new_workspace(), agent_id=world.alpha.pk, task="a", tools=["read"], actor="t"
    )["run_id"]
    run_cancel(run_id=run_id, actor="t")
    before = list(MotorRun.objects.values_list("id", "status", "result", "updated_at"))
    signals = Signal.objects.count()

    # when the token is revoked
    agent_revoke_token(agent=world.alpha, actor=world.olivia)

    # then no run changed and no signal was added
    assert list(MotorRun.objects.values_list("id", "status", "result", "updated_at")) == before
    assert Signal.objects.count() == signals
