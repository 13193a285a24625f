"""A run whose credential nobody has set asks for it, and resumes once it is set in the vault.

The answer to that question is never the value: it is refused and never stored. Names match in
any case across core.act, the API, the vault and the runtime.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from cognition.core_act import core_act
from cognition.models import Credential
from cognition.principals import Principal
from cognition.services import credential_delete, credential_set
from runs.errors import CredentialsStillMissing, InvalidRunParams, InvalidTransition
from runs.models import Attempt, MotorRun, RunEvent, RunStatus, Signal, Step
from runs.services import (
    run_credentials_provided,
    run_reemit_pending_questions,
    run_respond,
    run_start,
)
from tests.fixtures.llm import LLMStubServer, reply_text, reply_tools, tool_call
from tests.runs.helpers import drive, new_workspace

from .conftest import World, bearer
from .core_support import skill_in_status, workspaces  # noqa: F401 - fixture
from .worker_support import (  # noqa: F401 - clean_run_queue, start_worker, worker: fixtures
    clean_run_queue,
    run_status,
    start_worker,
    wait_for,
    worker,
    worker_logs,
)

VALUE = "wx-Tok3n-never-in-a-chat-4b71c9"  # a test credential value


def _everything_stored_about(run_id: str) -> str:
    """Messages, steps, events, signals and the result of a run, as one text."""
    run = MotorRun.objects.get(pk=run_id)
    return json.dumps(
        {
            "result": run.result,
            "messages": list(Attempt.objects.filter(run=run).values_list("messages", flat=True)),
            "questions": list(
                Attempt.objects.filter(run=run).values_list("pending_question", flat=True)
            ),
            "steps": list(Step.objects.filter(attempt__run=run).values_list("arguments", "result")),
            "events": list(RunEvent.objects.filter(run=run).values_list("detail", flat=True)),
            "signals": list(Signal.objects.filter(run_id=run_id).values_list("payload", flat=True)),
        },
        default=str,
    )


# --- with a real worker, through the API ---------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("clean_run_queue", "worker")
def test_a_run_asks_for_a_missing_credential_and_resumes_when_it_is_set_through_the_api(
    world: World,
    session_client: Callable,
    llm_stub_server: LLMStubServer,
    tmp_path: Path,
) -> None:
    # given an approved skill needing WEATHER_TOKEN, which nobody has set
    skill_in_status(tmp_path / "src", agent=world.alpha, approver=world.olivia, status="approved")
    program = "import os\nprint('token:', os.environ['WEATHER_TOKEN'])\n"
    llm_stub_server.add(reply_tools(tool_call("code", {"code": program})), reply_text("Done."))
    alpha = bearer(world.alpha_token)
    olivia = session_client(world.olivia)
    responses: list[str] = []

    # when the agent starts it through the API
    created = alpha.post("/api/v1/runs/", {"task": "Weather", "skill": "weather-report"}, "json")
    assert created.status_code == 201, created.content
    run_id = created.json()["run_id"]

    # then the worker stops at the first step with a question saying where to set it
    wait_for(lambda: run_status(run_id) == RunStatus.AWAITING_INPUT, "the question")
    detail = alpha.get(f"/api/v1/runs/{run_id}/")
    question = detail.json()["pending_question"]
    assert detail.json()["missing_credentials"] == ["weather_token"]
    assert "needs the credential weather_token, which nobody has set" in question
    assert "in the admin (Credentials) or through the API (PUT /api/v1/credentials/" in question
    assert "never send a credential's value in a chat or as the answer" in question
    assert llm_stub_server.requests == []  # the model was not called
    # (a worker that starts re-signals waiting runs, so there may be two of this signal)
    signal = Signal.objects.filter(run_id=run_id).order_by("id").first()
    assert (signal.payload["status"], signal.payload["missing_credentials"]) == (
        "awaiting_input",
        ["weather_token"],
    )

    # when the human pastes the value as the answer instead
    answered = olivia.post(f"/api/v1/runs/{run_id}/respond/", {"answer": VALUE}, format="json")
    # then it is refused, the run still waits, and the answer was stored nowhere
    assert answered.status_code == 409
    assert answered.json()["error"]["code"] == "credentials_missing"
    assert "set it in the admin or through the API" in answered.json()["error"]["message"]
    assert run_status(run_id) == RunStatus.AWAITING_INPUT
    assert VALUE not in _everything_stored_about(run_id)
    responses += [detail.content.decode(), answered.content.decode()]

    # when the owner sets it through the API (in another case than the policy spells it)
    stored = olivia.put(
        "/api/v1/credentials/weather_token/?agent=alpha", {"value": VALUE}, format="json"
    )
    assert stored.status_code == 200
    assert (stored.json()["name"], stored.json()["value"]) == ("weather_token", "[set]")

    # then the run resumes by itself and completes, the program having read the value
    wait_for(lambda: run_status(run_id) == RunStatus.COMPLETED, "completion")
    step = Step.objects.get(attempt__run_id=run_id)
    assert step.result["ok"] is True, step.result
    assert step.result["output"].strip() == "token: <credential:weather_token>"
    assert alpha.get(f"/api/v1/runs/{run_id}/").json()["missing_credentials"] == []

    # and the value is in no message, step, event, signal, LLM request, API response or log
    for path in (
        f"/api/v1/runs/{run_id}/",
        f"/api/v1/runs/{run_id}/log/",
        "/api/v1/runs/",
        "/api/v1/signals/?after=0",
        "/api/v1/credentials/",
    ):
        response = alpha.get(path)
        assert response.status_code == 200, path
        responses.append(response.content.decode())
    assert all(VALUE not in text for text in responses)
    assert VALUE not in _everything_stored_about(run_id)
    assert VALUE not in json.dumps(llm_stub_server.requests)
    assert VALUE not in worker_logs(tmp_path)
    assert all(VALUE not in v for v in Credential.objects.values_list("value", flat=True))


# --- in process ----------------------------------------------------------------------------------


def _act(world: World, **kwargs):
    return core_act(
        principal=Principal.for_agent(world.alpha),
        agent=world.alpha,
        mode="agentic",
        task="Weather",
        trigger="api",
        **kwargs,
    )


@pytest.mark.django_db
@pytest.mark.usefixtures("clean_run_queue")
def test_setting_one_of_two_missing_credentials_keeps_the_run_waiting(
    world: World, scripted_llm, settings, django_capture_on_commit_callbacks
) -> None:
    # given a run needing two credentials, neither set
    settings.MOTOR_CREDENTIAL_RESOLVER = "cognition.core.run_credentials_resolve"
    run_id = run_start(
        workspace=new_workspace(),
        agent_id=world.alpha.pk,
        task="t",
        credential_names=["API_KEY", "api_secret"],
        actor="t",
    )["run_id"]
    assert MotorRun.objects.get(pk=run_id).credential_names == ["api_key", "api_secret"]
    drive(run_id, scripted_llm.client())
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.missing_credentials) == ("awaiting_input", ["api_key", "api_secret"])
    assert (
        "needs the credentials api_key, api_secret" in Attempt.objects.get(run=run).pending_question
    )

    # when only one is set (its commit runs the vault's resume hook)
    with django_capture_on_commit_callbacks(execute=True):
        credential_set(agent=world.alpha, name="API_KEY", value=VALUE, actor="t")
    # then the run still waits, and asking it to go on names the one still missing
    assert run_status(run_id) == RunStatus.AWAITING_INPUT
    with pytest.raises(CredentialsStillMissing, match="still needs the credential api_secret"):
        run_credentials_provided(run_id=run_id, actor="t")
    assert run_status(run_id) == RunStatus.AWAITING_INPUT

    # when the other is set too
    with django_capture_on_commit_callbacks(execute=True):
        credential_set(agent=world.alpha, name="API_SECRET", value="second-" + VALUE, actor="t")
    # then it resumes, runs to the end, and the model saw placeholders only
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.missing_credentials) == ("running", [])
    scripted_llm.add(reply_text("done"))
    drive(run_id, scripted_llm.client())
    assert run_status(run_id) == RunStatus.COMPLETED
    assert VALUE not in json.dumps(scripted_llm.requests)
    assert VALUE not in _everything_stored_about(run_id)


@pytest.mark.django_db
def test_an_answer_resumes_a_credential_wait_only_when_the_credential_is_set(
    world: World, scripted_llm, settings
) -> None:
    # given a run waiting for api_key
    settings.MOTOR_CREDENTIAL_RESOLVER = "cognition.core.run_credentials_resolve"
    run_id = run_start(
        workspace=new_workspace(),
        agent_id=world.alpha.pk,
        task="t",
        credential_names=["api_key"],
        actor="t",
    )["run_id"]
    drive(run_id, scripted_llm.client())
    before = _everything_stored_about(run_id)

    # when the value itself is given as the answer
    with pytest.raises(CredentialsStillMissing):
        run_respond(run_id=run_id, answer=VALUE, actor="t")
    # then nothing changed and the value is nowhere
    assert _everything_stored_about(run_id) == before
    assert run_status(run_id) == RunStatus.AWAITING_INPUT

    # when the credential was set where resume is not triggered (a direct row, as a restore would)
    # and then the brain answers "done"
    from cognition import vault

    Credential.objects.create(
        agent=world.alpha, name="api_key", value=vault.seal(name="api_key", value=VALUE)
    )
    changed = run_respond(run_id=run_id, answer="I have set it", actor="t")
    # then the run goes on without storing the answer
    assert changed == {
        "run_id": run_id,
        "previous_status": "awaiting_input",
        "new_status": "running",
    }
    assert "I have set it" not in _everything_stored_about(run_id)


@pytest.mark.django_db
def test_credentials_provided_refuses_a_run_that_waits_for_none(world: World) -> None:
    run_id = run_start(workspace=new_workspace(), agent_id=world.alpha.pk, task="t", actor="t")[
        "run_id"
    ]
    with pytest.raises(InvalidTransition, match="waits for no credential"):
        run_credentials_provided(run_id=run_id, actor="t")
    assert run_status(run_id) == RunStatus.CREATED


@pytest.mark.django_db
def test_a_failing_resolver_fails_the_run_clearly_without_its_message(
    world: World, scripted_llm, settings, caplog
) -> None:
    # given a resolver that raises (its message quotes a secret)
    from tests.runs.credential_resolver import SECRET_VALUE

    settings.MOTOR_CREDENTIAL_RESOLVER = "tests.runs.credential_resolver.broken"
    run_id = run_start(
        workspace=new_workspace(),
        agent_id=world.alpha.pk,
        task="t",
        credential_names=["api_key"],
        actor="t",
    )["run_id"]
    # when the run takes a step
    drive(run_id, scripted_llm.client())
    # then it failed with a message naming the resolver and the error type, not crashing
    run = MotorRun.objects.get(pk=run_id)
    assert run.status == RunStatus.FAILED
    assert run.result["failure"]["message"] == (
        "the credential resolver tests.runs.credential_resolver.broken failed (RuntimeError); "
        "the run's credentials (api_key) could not be read"
    )
    assert run.result["failure"]["category"] == "tool_failure"
    assert scripted_llm.requests == []
    assert SECRET_VALUE not in _everything_stored_about(run_id)
    assert SECRET_VALUE not in caplog.text
    assert Signal.objects.get(run_id=run_id).payload["status"] == "failed"


@pytest.mark.django_db
def test_a_resolver_that_cannot_be_imported_fails_the_run_clearly(
    world: World, scripted_llm, settings
) -> None:
    settings.MOTOR_CREDENTIAL_RESOLVER = "tests.runs.credential_resolver.no_such_function"
    run_id = run_start(
        workspace=new_workspace(),
        agent_id=world.alpha.pk,
        task="t",
        credential_names=["api_key"],
        actor="t",
    )["run_id"]
    drive(run_id, scripted_llm.client())
    run = MotorRun.objects.get(pk=run_id)
    assert run.status == RunStatus.FAILED
    assert (
        "tests.runs.credential_resolver.no_such_function failed (ImportError)"
        in (run.result["failure"]["message"])
    )


@pytest.mark.django_db
def test_credential_names_match_in_any_case_in_the_vault_and_the_api(world: World) -> None:
    # given a credential stored as WEATHER_TOKEN
    credential_set(agent=world.alpha, name="WEATHER_TOKEN", value="one", actor="t")
    alpha = bearer(world.alpha_token)
    # when it is set again in another case through the API
    response = alpha.put("/api/v1/credentials/weather_token/", {"value": "two"}, format="json")
    # then the one stored name was replaced (kept in its stored spelling), not duplicated
    assert (response.json()["name"], response.json()["value"]) == ("WEATHER_TOKEN", "[set]")
    listed = alpha.get("/api/v1/credentials/").json()["results"]
    assert [(c["name"], c["value"]) for c in listed] == [("WEATHER_TOKEN", "[set]")]
    from cognition.selectors import credentials_resolve

    assert credentials_resolve(agent=world.alpha, names=["Weather_Token"]) == {
        "Weather_Token": "two"
    }
    # and a delete in yet another case removes it
    credential_delete(agent=world.alpha, name="vault_weather_TOKEN", actor="t")
    assert Credential.objects.count() == 0


@pytest.mark.django_db
def test_run_start_accepts_credential_names_in_any_case_and_refuses_bad_ones(world: World) -> None:
    run_id = run_start(
        workspace=new_workspace(),
        agent_id=world.alpha.pk,
        task="t",
        credential_names=["API_Key", "api_key"],
        actor="t",
    )["run_id"]
    assert MotorRun.objects.get(pk=run_id).credential_names == ["api_key"]
    MotorRun.objects.filter(pk=run_id).delete()
    with pytest.raises(InvalidRunParams, match="credential_names"):
        run_start(
            workspace=new_workspace(),
            agent_id=world.bravo.pk,
            task="t",
            credential_names=["9lives"],
            actor="t",
        )
    assert not MotorRun.objects.filter(agent=world.bravo).exists()


@pytest.mark.django_db
def test_a_restarted_service_asks_again_naming_the_missing_credentials(
    world: World, scripted_llm, settings
) -> None:
    # given a run waiting for api_key
    settings.MOTOR_CREDENTIAL_RESOLVER = "cognition.core.run_credentials_resolve"
    run_id = run_start(
        workspace=new_workspace(),
        agent_id=world.alpha.pk,
        task="t",
        credential_names=["api_key"],
        actor="t",
    )["run_id"]
    drive(run_id, scripted_llm.client())
    # when the service starts again and re-emits pending questions
    (signal_id,) = run_reemit_pending_questions()
    # then the new signal names the credential, like the first one
    first, again = Signal.objects.filter(run_id=run_id).order_by("id")
    assert again.pk == signal_id
    assert again.payload == first.payload
    assert again.payload["missing_credentials"] == ["api_key"]


@pytest.mark.django_db
def test_a_resolver_failing_at_resume_time_leaves_the_credential_set_and_the_run_waiting(
    world: World, scripted_llm, settings, django_capture_on_commit_callbacks
) -> None:
    # given a run waiting for api_key
    settings.MOTOR_CREDENTIAL_RESOLVER = "cognition.core.run_credentials_resolve"
    run_id = run_start(
        workspace=new_workspace(),
        agent_id=world.alpha.pk,
        task="t",
        credential_names=["api_key"],
        actor="t",
    )["run_id"]
    drive(run_id, scripted_llm.client())
    # when the resolver breaks and the credential is set
    settings.MOTOR_CREDENTIAL_RESOLVER = "tests.runs.credential_resolver.broken"
    with django_capture_on_commit_callbacks(execute=True):
        credential_set(agent=world.alpha, name="api_key", value=VALUE, actor="t")
    # then setting it succeeded and the run still waits (its next step reports the failure)
    assert list(Credential.objects.values_list("name", flat=True)) == ["api_key"]
    assert run_status(run_id) == RunStatus.AWAITING_INPUT


@pytest.mark.django_db
def test_a_run_without_a_skill_gets_a_vault_value_under_its_stored_spelling_too(
    world: World,
) -> None:
    # given API_KEY in alpha's vault and a run asking for it in lower case
    from cognition.core import run_credentials_resolve

    credential_set(agent=world.alpha, name="API_KEY", value=VALUE, actor="t")
    run_id = run_start(
        workspace=new_workspace(),
        agent_id=world.alpha.pk,
        task="t",
        credential_names=["API_KEY"],
        actor="t",
    )["run_id"]
    # when the runtime resolves the run's names
    values = run_credentials_resolve(
        agent_id=world.alpha.pk, run_id=run_id, names=["api_key", "other"]
    )
    # then the value comes under the run's name and the vault's ($API_KEY); the unset one is absent
    assert values == {"api_key": VALUE, "API_KEY": VALUE}


@pytest.mark.django_db
@pytest.mark.usefixtures("clean_run_queue")
def test_a_long_wait_for_a_credential_does_not_use_up_the_run_s_time(
    world: World, scripted_llm, settings, django_capture_on_commit_callbacks
) -> None:
    # given a run with a 60 s budget that waited 10 minutes for api_key before doing anything
    from datetime import timedelta

    from django.utils import timezone

    settings.MOTOR_CREDENTIAL_RESOLVER = "cognition.core.run_credentials_resolve"
    run_id = run_start(
        workspace=new_workspace(),
        agent_id=world.alpha.pk,
        task="t",
        credential_names=["api_key"],
        timeout_s=60,
        actor="t",
    )["run_id"]
    drive(run_id, scripted_llm.client())
    MotorRun.objects.filter(pk=run_id).update(started_at=timezone.now() - timedelta(minutes=10))
    # when it is set and the run goes on
    set_at = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        credential_set(agent=world.alpha, name="api_key", value=VALUE, actor="t")
    scripted_llm.add(reply_text("done"))
    drive(run_id, scripted_llm.client())
    # then it completed: its time counted from the resume, not from before the wait
    run = MotorRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED, run.result
    assert run.started_at >= set_at
