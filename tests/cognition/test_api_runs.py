"""The runs endpoints with an agent token, a human and a second agent that must see nothing."""
# ruff: noqa: F811 - pytest fixtures imported from core_support are parameters here

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from cognition.models import Agent, IdempotencyRecord
from runs.models import ApprovalRequest, MotorRun, RunStatus
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import drive, snapshot

from .conftest import World, bearer
from .core_support import _clean_mutex_keys, workspaces  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db

BODY = {"task": "List the workspace", "tools": ["read"], "domains": []}


def _energy(agent: Agent) -> float:
    return Agent.objects.get(pk=agent.pk).energy


def _start(world: World, **body) -> str:
    response = bearer(world.alpha_token).post("/api/v1/runs/", {**BODY, **body}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()["run_id"]


def test_an_agent_creates_a_run_and_reads_it_back(world, workspaces):
    # when alpha starts a run
    client = bearer(world.alpha_token)
    response = client.post("/api/v1/runs/", BODY, format="json")
    # then it exists for alpha, with the energy drained once
    assert response.status_code == 201
    run_id = response.json()["run_id"]
    assert response.json() == {"run_id": run_id, "status": "created"}
    run = MotorRun.objects.get(pk=run_id)
    assert (run.agent_id, run.tools, run.allowed_domains, run.trigger) == (
        world.alpha.pk,
        ["read"],
        [],
        "api",
    )
    assert _energy(world.alpha) == pytest.approx(0.90)
    detail = client.get(f"/api/v1/runs/{run_id}/").json()
    assert (detail["id"], detail["status"], detail["task"]) == (run_id, "created", BODY["task"])
    assert (detail["pending_question"], detail["pending_approval"], detail["steps"]) == (
        None,
        None,
        [],
    )


def test_a_human_starts_a_run_for_their_agent(world, workspaces, session_client):
    client = session_client(world.olivia)
    response = client.post("/api/v1/runs/?agent=alpha", BODY, format="json")
    assert response.status_code == 201
    assert MotorRun.objects.get(pk=response.json()["run_id"]).agent_id == world.alpha.pk
    # and bob, who does not own alpha, cannot
    other = session_client(world.bob).post("/api/v1/runs/?agent=alpha", BODY, format="json")
    assert other.status_code == 404
    assert MotorRun.objects.count() == 1


def test_a_busy_agent_gets_409_saying_which_run_holds_it_and_what_to_do(world, workspaces):
    first = _start(world)
    response = bearer(world.alpha_token).post("/api/v1/runs/", BODY, format="json")
    assert response.status_code == 409
    assert response["Retry-After"] == "10"
    assert response.json()["error"] == {
        "code": "motor_busy",
        "message": f"Agent alpha already has an active run, {first} (created); an agent runs "
        "one task at a time. Wait for it to finish (GET /api/v1/runs/"
        f"{first}/ shows its status) or cancel it (POST /api/v1/runs/{first}/cancel/), "
        "then send this request again.",
        "details": {
            "run_id": first,
            "run_status": "created",
            "run_url": f"/api/v1/runs/{first}/",
            "retry_after_s": 10,
        },
    }
    assert MotorRun.objects.count() == 1
    assert _energy(world.alpha) == pytest.approx(0.90)


def test_an_idempotent_replay_returns_the_first_response_and_creates_nothing(world, workspaces):
    client = bearer(world.alpha_token)
    # given a run created with a key
    first = client.post("/api/v1/runs/", BODY, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == 201
    # when the same request is replayed with the same key
    again = client.post("/api/v1/runs/", BODY, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    # then it answers the first response and nothing new exists
    assert (again.status_code, again.json()) == (201, first.json())
    assert again.headers["Idempotent-Replayed"] == "true"
    assert MotorRun.objects.count() == 1
    assert _energy(world.alpha) == pytest.approx(0.90)
    # when the key is reused for another request
    other = client.post(
        "/api/v1/runs/",
        {**BODY, "task": "Something else"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="k-1",
    )
    # then it is a conflict, and still nothing new exists
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_conflict"
    assert MotorRun.objects.count() == 1
    assert IdempotencyRecord.objects.count() == 1


def test_a_refused_create_keeps_no_idempotency_record(world, workspaces):
    client = bearer(world.alpha_token)
    refused = client.post(
        "/api/v1/runs/", {**BODY, "max_iterations": 99}, format="json", HTTP_IDEMPOTENCY_KEY="k-2"
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "invalid_params"
    assert (IdempotencyRecord.objects.count(), MotorRun.objects.count()) == (0, 0)
    assert _energy(world.alpha) == 1.0


def test_keys_belong_to_their_principal(world, workspaces):
    bearer(world.alpha_token).post("/api/v1/runs/", BODY, format="json", HTTP_IDEMPOTENCY_KEY="k")
    response = bearer(world.bravo_token).post(
        "/api/v1/runs/", BODY, format="json", HTTP_IDEMPOTENCY_KEY="k"
    )
    assert response.status_code == 201
    assert MotorRun.objects.filter(agent=world.bravo).count() == 1


def test_the_list_is_cursor_paginated_filtered_and_scoped(world, workspaces):
    client = bearer(world.alpha_token)
    first = _start(world)
    client.post(f"/api/v1/runs/{first}/cancel/")
    second = _start(world)
    page = client.get("/api/v1/runs/?page_size=1").json()
    assert [r["id"] for r in page["results"]] == [second]
    assert page["next"] is not None
    rest = client.get(page["next"]).json()
    assert [r["id"] for r in rest["results"]] == [first]
    cancelled = client.get("/api/v1/runs/?status=cancelled").json()["results"]
    assert [r["id"] for r in cancelled] == [first]
    assert client.get("/api/v1/runs/?status=nope").status_code == 400
    assert bearer(world.bravo_token).get("/api/v1/runs/").json()["results"] == []


@pytest.mark.parametrize(
    ("method", "suffix", "body"),
    [
        ("get", "", None),
        ("get", "log/", None),
        ("post", "cancel/", {}),
        ("post", "respond/", {"answer": "yes"}),
        ("post", "approve/", {}),
        ("post", "reject/", {"note": "no"}),
        ("post", "retry/", {"guidance": "again"}),
    ],
)
def test_another_agents_run_is_not_found_and_untouched(world, workspaces, method, suffix, body):
    run_id = _start(world)
    before = snapshot(run_id)
    client = bearer(world.bravo_token)
    call = getattr(client, method)
    response = call(
        f"/api/v1/runs/{run_id}/{suffix}", body, format="json", HTTP_X_MOTOR_TRIGGER="user_message"
    )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert snapshot(run_id) == before


def _awaiting_input(world: World, scripted_llm) -> str:
    run_id = _start(world)
    scripted_llm.add(reply_tools(tool_call("ask_user", {"question": "Which folder?"})))
    drive(run_id, scripted_llm.client())
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.AWAITING_INPUT
    return run_id


def test_respond_is_consent_gated_for_an_agent(world, workspaces, scripted_llm):
    # given a run awaiting an answer
    run_id = _awaiting_input(world, scripted_llm)
    detail = bearer(world.alpha_token).get(f"/api/v1/runs/{run_id}/").json()
    assert detail["pending_question"] == "Which folder?"
    before = snapshot(run_id)
    client = bearer(world.alpha_token)
    # when the agent answers without a user_message trigger, or untrusted with one
    for headers in ({}, {"HTTP_X_MOTOR_TRIGGER": "user_message"}):
        response = client.post(
            f"/api/v1/runs/{run_id}/respond/", {"answer": "docs"}, format="json", **headers
        )
        # then it is refused and nothing changed
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "consent_required"
        assert snapshot(run_id) == before
    # when the agent is trusted to relay consent and declares the user's message
    Agent.objects.filter(pk=world.alpha.pk).update(trusted_for_relayed_consent=True)
    response = client.post(
        f"/api/v1/runs/{run_id}/respond/",
        {"answer": "docs"},
        format="json",
        HTTP_X_MOTOR_TRIGGER="user_message",
    )
    # then the answer is taken
    assert response.status_code == 200
    assert response.json() == {
        "run_id": run_id,
        "previous_status": "awaiting_input",
        "new_status": "running",
    }


def test_a_human_answers_without_a_trigger(world, workspaces, scripted_llm, session_client):
    run_id = _awaiting_input(world, scripted_llm)
    response = session_client(world.olivia).post(
        f"/api/v1/runs/{run_id}/respond/", {"answer": "docs"}, format="json"
    )
    assert response.status_code == 200
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.RUNNING


def _awaiting_approval(world: World, scripted_llm) -> tuple[str, int]:
    run_id = _start(world)
    scripted_llm.add(
        reply_tools(
            tool_call(
                "request_approval",
                {"tool": "read", "arguments": {"path": "a.txt"}, "reason": "look at a.txt"},
            )
        )
    )
    drive(run_id, scripted_llm.client())
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.AWAITING_APPROVAL
    return run_id, ApprovalRequest.objects.get(run_id=run_id).pk


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_approve_and_reject_are_consent_gated(
    world, workspaces, scripted_llm, personal_client, decision
):
    # given a run awaiting approval of one read
    run_id, approval_id = _awaiting_approval(world, scripted_llm)
    pending = bearer(world.alpha_token).get(f"/api/v1/runs/{run_id}/").json()["pending_approval"]
    assert (pending["id"], pending["tool"], pending["arguments"], pending["summary"]) == (
        approval_id,
        "read",
        {"path": "a.txt"},
        "look at a.txt",
    )
    before = snapshot(run_id)
    # when the agent decides on a motor_result trigger
    response = bearer(world.alpha_token).post(
        f"/api/v1/runs/{run_id}/{decision}/", {}, format="json", HTTP_X_MOTOR_TRIGGER="motor_result"
    )
    # then it is refused and nothing changed
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "consent_required"
    assert snapshot(run_id) == before
    assert ApprovalRequest.objects.get(pk=approval_id).status == "pending"
    # when the owner decides with a personal token
    response = personal_client(world.olivia).post(
        f"/api/v1/runs/{run_id}/{decision}/", {"approval_id": approval_id}, format="json"
    )
    # then the decision is recorded and the run resumes
    assert response.status_code == 200
    assert response.json() == {
        "run_id": run_id,
        "previous_status": "awaiting_approval",
        "new_status": "running",
    }
    expected = "consumed" if decision == "approve" else "rejected"
    assert ApprovalRequest.objects.get(pk=approval_id).status == expected


def test_cancel_log_and_retry(world, workspaces, scripted_llm):
    client = bearer(world.alpha_token)
    # given a run that fails on its iteration cap
    run_id = _start(world, max_iterations=1)
    scripted_llm.add(reply_tools(tool_call("read", {"path": "missing.txt"})))
    drive(run_id, scripted_llm.client())
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.FAILED
    # when its log is read
    log = client.get(f"/api/v1/runs/{run_id}/log/").json()
    # then it shows the tool call and the failure
    assert log["run_id"] == run_id
    assert "read" in log["log"] and "-> failed" in log["log"]
    # when it is retried with guidance
    response = client.post(
        f"/api/v1/runs/{run_id}/retry/", {"guidance": "create it"}, format="json"
    )
    # then a second attempt starts
    assert response.status_code == 200
    run = MotorRun.objects.get(pk=run_id)
    assert response.json() == {
        "run_id": run_id,
        "previous_status": "failed",
        "new_status": run.status,
        "attempt_index": 1,
    }
    # when it is cancelled
    response = client.post(f"/api/v1/runs/{run_id}/cancel/")
    assert response.status_code == 200
    assert response.json()["new_status"] == "cancelled"
    # and cancelling again is a conflict that changes nothing
    before = snapshot(run_id)
    again = client.post(f"/api/v1/runs/{run_id}/cancel/")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "invalid_transition"
    assert snapshot(run_id) == before


def test_oneshot_endpoint_returns_the_output(world):
    response = bearer(world.alpha_token).post(
        "/api/v1/oneshot/", {"code": "print(sum(range(5)))"}, format="json"
    )
    assert response.status_code == 200
    body = response.json()
    assert (body["ok"], body["result"], body["error"]) == (True, "10", None)
    assert _energy(world.alpha) == pytest.approx(0.95)
    assert MotorRun.objects.count() == 0


def test_finished_run_completes_and_is_listed(world, workspaces, scripted_llm):
    run_id = _start(world)
    scripted_llm.add(reply_text("Nothing to list."))
    drive(run_id, scripted_llm.client())
    item = bearer(world.alpha_token).get("/api/v1/runs/?status=completed").json()["results"][0]
    assert (item["id"], item["status"], item["iterations"], item["tools"]) == (
        run_id,
        "completed",
        1,
        ["read"],
    )


@pytest.mark.parametrize(
    "body",
    [
        {**BODY, "task": "bad\x00task"},
        {**BODY, "inputs": {"city": "Ber\x00lin"}},
        {**BODY, "skill": "no\x00such"},
    ],
)
def test_text_postgresql_cannot_store_is_a_400_and_creates_nothing(world, workspaces, body):
    response = bearer(world.alpha_token).post("/api/v1/runs/", body, format="json")
    assert response.status_code in (400, 404)
    assert set(response.json()["error"]) == {"code", "message", "details"}
    assert MotorRun.objects.count() == 0
    assert _energy(world.alpha) == 1.0


def test_an_answer_with_nul_is_refused_and_changes_nothing(
    world, workspaces, scripted_llm, session_client
):
    run_id = _awaiting_input(world, scripted_llm)
    before = snapshot(run_id)
    response = session_client(world.olivia).post(
        f"/api/v1/runs/{run_id}/respond/", {"answer": "do\x00cs"}, format="json"
    )
    assert response.status_code == 400
    assert snapshot(run_id) == before


def test_a_human_reads_their_agents_runs_and_no_one_elses(world, workspaces, session_client):
    run_id = _start(world)
    olivia = session_client(world.olivia)
    assert [r["id"] for r in olivia.get("/api/v1/runs/?agent=alpha").json()["results"]] == [run_id]
    assert olivia.get(f"/api/v1/runs/{run_id}/").json()["id"] == run_id
    assert olivia.get(f"/api/v1/runs/{run_id}/log/").status_code == 200
    bob = session_client(world.bob)
    assert bob.get("/api/v1/runs/").json()["results"] == []
    assert bob.get(f"/api/v1/runs/{run_id}/").status_code == 404
    assert bob.get(f"/api/v1/runs/{run_id}/?agent=alpha").status_code == 404
    before = snapshot(run_id)
    assert bob.post(f"/api/v1/runs/{run_id}/cancel/").status_code == 404
    assert snapshot(run_id) == before


def test_a_key_older_than_24_hours_starts_a_new_run(world, workspaces):
    client = bearer(world.alpha_token)
    first = client.post("/api/v1/runs/", BODY, format="json", HTTP_IDEMPOTENCY_KEY="old")
    client.post(f"/api/v1/runs/{first.json()['run_id']}/cancel/")
    IdempotencyRecord.objects.update(created_at=timezone.now() - timedelta(hours=24, seconds=1))
    again = client.post("/api/v1/runs/", BODY, format="json", HTTP_IDEMPOTENCY_KEY="old")
    assert again.status_code == 201
    assert again.json()["run_id"] != first.json()["run_id"]
    assert "Idempotent-Replayed" not in again.headers
    assert MotorRun.objects.count() == 2
    assert list(IdempotencyRecord.objects.values_list("response_body", flat=True)) == [again.json()]
