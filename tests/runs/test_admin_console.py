"""The run console in the admin: every button calls a runs service, refusals change nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from cognition.models import Agent
from runs.models import (
    ApprovalRequest,
    ApprovalStatus,
    Attempt,
    MotorRun,
    RunEvent,
    RunStatus,
    Signal,
    Step,
)
from runs.services import run_start
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.credential_resolver import SECRET_VALUE
from tests.runs.helpers import drive, new_workspace, snapshot

pytestmark = pytest.mark.django_db

VIEW = ["runs.view_motorrun"]
CONTROL = ["runs.view_motorrun", "runs.change_motorrun"]


def _user(username: str, perms: list[str]) -> User:
    user = User.objects.create_user(username, password="x", is_staff=True)
    for perm in perms:
        app_label, codename = perm.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    return User.objects.get(pk=user.pk)


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _url(name: str, run_id: str) -> str:
    return reverse(f"admin:runs_motorrun_{name}", args=[quote(run_id)])


def _messages(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def _asking_run(agent, scripted_llm, question: str = "CSV or JSON?") -> str:
    run_id = run_start(
        workspace=new_workspace(), agent_id=agent.pk, task="Export the data", actor="test"
    )["run_id"]
    scripted_llm.add(
        reply_tools(tool_call("ask_user", {"question": question}, call_id="call_q"), text="Ask.")
    )
    drive(run_id, scripted_llm.client())
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.AWAITING_INPUT
    return run_id


def _completed_run(agent, scripted_llm) -> str:
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="Say hi", actor="test")[
        "run_id"
    ]
    scripted_llm.add(reply_text("Hi."))
    drive(run_id, scripted_llm.client())
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
    return run_id


def _failed_run(agent, scripted_llm) -> str:
    run_id = run_start(
        workspace=new_workspace(), agent_id=agent.pk, task="Loop", max_iterations=1, actor="test"
    )["run_id"]
    scripted_llm.add(reply_tools(tool_call("nope"), text="trying"))
    drive(run_id, scripted_llm.client())
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.FAILED
    return run_id


@pytest.fixture
def gated_run(agent, scripted_llm, tmp_path: Path) -> str:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run_id = run_start(
        agent_id=agent.pk,
        task="Append",
        tools=["bash"],
        workspace=str(workspace),
        approval_required=True,
        actor="test",
    )["run_id"]
    scripted_llm.add(reply_tools(tool_call("bash", {"command": "echo a >> log.txt"}, call_id="b")))
    drive(run_id, scripted_llm.client())
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.AWAITING_APPROVAL
    return run_id


# --- viewing ---------------------------------------------------------------------------------


def test_runs_list_shows_status_progress_and_attempts_and_filters_by_status(agent, scripted_llm):
    # given a run awaiting input and a completed one of another agent
    asking = _asking_run(agent, scripted_llm)
    other = Agent.objects.create(name="other-agent", owner=agent.owner)
    done = run_start(
        workspace=new_workspace(), agent_id=other.pk, task="Say hi " + "x" * 200, actor="test"
    )["run_id"]
    scripted_llm.add(reply_text("Hi."))
    drive(done, scripted_llm.client())
    client = _client(_user("vera", VIEW))

    # when the list is opened
    page = client.get(reverse("admin:runs_motorrun_changelist")).content.decode()

    # then both runs show with badge, iteration/max progress and attempts
    assert '<span class="mc-badge mc-badge--awaiting_input">Awaiting input</span>' in page
    assert '<span class="mc-badge mc-badge--completed">Completed</span>' in page
    assert '<span class="mc-progress__text">1/20</span>' in page
    assert "1/3" in page
    assert "Say hi " + "x" * 60 in page and "x" * 200 not in page

    # when filtered by status, only the matching run is listed
    filtered = client.get(
        reverse("admin:runs_motorrun_changelist"), {"status": "awaiting_input"}
    ).content.decode()
    assert asking in filtered and done not in filtered
    # and a search by id finds exactly that run
    searched = client.get(reverse("admin:runs_motorrun_changelist"), {"q": done}).content.decode()
    assert done in searched and asking not in searched


def test_console_shows_grant_question_and_trace(agent, scripted_llm):
    # given a run awaiting an answer
    run_id = _asking_run(agent, scripted_llm, question="Separate CSVs or one?")
    client = _client(_user("ann", CONTROL))

    # when its console is opened
    response = client.get(_url("change", run_id))

    # then it shows the status, the question with an answer form and the trace step
    page = response.content.decode()
    assert response.status_code == 200
    assert "Awaiting input" in page
    assert '<pre class="mc-pre" id="question-text">Separate CSVs or one?</pre>' in page
    assert 'id="answer-form"' in page
    assert '<code class="mc-tool">ask_user</code>' in page
    assert "iteration 1/20" in page
    assert '<div class="mc-reasoning">Ask.</div>' in page


def test_viewer_without_control_sees_no_forms_and_outsider_gets_403(agent, scripted_llm):
    run_id = _asking_run(agent, scripted_llm)
    viewer = _client(_user("vic", VIEW))
    outsider = _client(_user("ozzy", []))

    page = viewer.get(_url("change", run_id)).content.decode()
    assert "CSV or JSON?" in page
    assert 'id="answer-form"' not in page
    assert outsider.get(_url("change", run_id)).status_code == 403
    assert outsider.get(_url("live", run_id)).status_code == 403


# --- acting ----------------------------------------------------------------------------------


def test_answer_calls_run_respond_and_resumes_the_run(agent, scripted_llm):
    # given a run awaiting input and a user allowed to control runs
    run_id = _asking_run(agent, scripted_llm)
    client = _client(_user("ann", CONTROL))

    # when the user answers in the console
    response = client.post(_url("respond", run_id), {"answer": "JSON please"})

    # then the run runs again with the answer as the ask_user call's result, by that admin
    assert response.status_code == 302
    assert _messages(response) == [f"Answer sent. Run {run_id}: awaiting_input → running."]
    run = MotorRun.objects.get(pk=run_id)
    attempt = Attempt.objects.get(run=run)
    assert run.status == RunStatus.RUNNING
    assert attempt.messages[-1] == {
        "role": "tool",
        "tool_call_id": "call_q",
        "content": attempt.messages[-1]["content"],
    }
    assert "JSON please" in attempt.messages[-1]["content"]
    step = Step.objects.get(attempt=attempt, tool_call_id="call_q")
    assert (step.result["output"], step.result["provenance"]) == ("JSON please", "user")
    event = RunEvent.objects.filter(run_id=run_id).last()
    assert (event.from_status, event.to_status, event.actor) == (
        "awaiting_input",
        "running",
        "admin:ann",
    )


def test_answer_to_a_completed_run_is_refused_and_changes_nothing(agent, scripted_llm):
    run_id = _completed_run(agent, scripted_llm)
    client = _client(_user("ann", CONTROL))
    before = snapshot(run_id)

    response = client.post(_url("respond", run_id), {"answer": "late"}, follow=True)

    assert response.status_code == 200
    assert (
        f"Answer refused: run {run_id} is completed; only a run awaiting input takes an answer"
        in response.content.decode()
    )
    assert snapshot(run_id) == before


def test_an_empty_answer_is_refused_and_changes_nothing(agent, scripted_llm):
    run_id = _asking_run(agent, scripted_llm)
    client = _client(_user("ann", CONTROL))
    before = snapshot(run_id)

    response = client.post(_url("respond", run_id), {"answer": "   "})

    assert _messages(response) == ["Nothing changed: answer: This field is required."]
    assert snapshot(run_id) == before


@pytest.mark.parametrize(
    ("action", "data"),
    [
        ("respond", {"answer": "yes"}),
        ("cancel", {}),
        ("retry", {"guidance": "again"}),
    ],
)
def test_a_viewer_gets_403_for_every_action_and_nothing_changes(agent, scripted_llm, action, data):
    run_id = _asking_run(agent, scripted_llm)
    client = _client(_user("vic", VIEW))
    before = snapshot(run_id)

    response = client.post(_url(action, run_id), data)

    assert response.status_code == 403
    assert snapshot(run_id) == before


def test_a_viewer_cannot_approve_and_nothing_changes(gated_run):
    approval = ApprovalRequest.objects.get(run_id=gated_run)
    client = _client(_user("vic", VIEW))
    before = snapshot(gated_run)

    assert client.post(_url("approve", gated_run), {"approval_id": approval.pk}).status_code == 403
    assert client.post(_url("reject", gated_run), {"approval_id": approval.pk}).status_code == 403

    assert snapshot(gated_run) == before
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING


def test_console_shows_the_exact_action_and_approve_calls_run_approve(gated_run):
    approval = ApprovalRequest.objects.get(run_id=gated_run)
    client = _client(_user("ann", CONTROL))

    page = client.get(_url("change", gated_run)).content.decode()
    assert '<code id="approval-tool">bash</code>' in page
    assert (
        '<pre class="mc-pre" id="approval-arguments">{\n  &quot;command&quot;: '
        "&quot;echo a &gt;&gt; log.txt&quot;\n}</pre>" in page
    )
    assert approval.action_hash in page

    response = client.post(_url("approve", gated_run), {"approval_id": approval.pk})

    assert _messages(response) == [
        f"Action approved. Run {gated_run}: awaiting_approval → running."
    ]
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.CONSUMED
    assert MotorRun.objects.get(pk=gated_run).status == RunStatus.RUNNING
    assert RunEvent.objects.filter(run_id=gated_run).last().actor == "admin:ann"


def test_reject_calls_run_reject_with_the_note(gated_run):
    approval = ApprovalRequest.objects.get(run_id=gated_run)
    client = _client(_user("ann", CONTROL))

    response = client.post(
        _url("reject", gated_run), {"approval_id": approval.pk, "note": "not now"}
    )

    assert _messages(response) == [
        f"Action rejected. Run {gated_run}: awaiting_approval → running."
    ]
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.REJECTED
    step = Step.objects.get(attempt__run_id=gated_run, tool_call_id="b")
    assert (step.result["error_code"], step.result["output"]) == (
        "rejected",
        "The owner rejected this action: not now",
    )
    assert MotorRun.objects.get(pk=gated_run).status == RunStatus.RUNNING


def test_approving_another_approval_id_is_refused_and_changes_nothing(gated_run):
    approval = ApprovalRequest.objects.get(run_id=gated_run)
    client = _client(_user("ann", CONTROL))
    before = snapshot(gated_run)

    response = client.post(_url("approve", gated_run), {"approval_id": approval.pk + 999})

    [message] = _messages(response)
    assert message.startswith("Approval refused: ")
    assert snapshot(gated_run) == before
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING


def test_cancel_calls_run_cancel(agent, scripted_llm):
    run_id = _asking_run(agent, scripted_llm)
    client = _client(_user("ann", CONTROL))

    response = client.post(_url("cancel", run_id), {"reason": "wrong task"})

    assert _messages(response) == [f"Cancelled. Run {run_id}: awaiting_input → cancelled."]
    run = MotorRun.objects.get(pk=run_id)
    assert run.status == RunStatus.CANCELLED
    assert run.result["failure"]["message"] == "wrong task"
    event = RunEvent.objects.filter(run_id=run_id).last()
    assert (event.actor, event.detail) == ("admin:ann", {"reason": "wrong task"})


def test_cancel_of_a_finished_run_is_refused_and_changes_nothing(agent, scripted_llm):
    run_id = _completed_run(agent, scripted_llm)
    client = _client(_user("ann", CONTROL))
    before = snapshot(run_id)

    response = client.post(_url("cancel", run_id), {})

    assert _messages(response) == [
        f"Cancel refused: run {run_id} is completed; only an active run can be cancelled"
    ]
    assert snapshot(run_id) == before


def test_retry_calls_run_retry_with_the_guidance(agent, scripted_llm):
    run_id = _failed_run(agent, scripted_llm)
    client = _client(_user("ann", CONTROL))
    page = client.get(_url("change", run_id)).content.decode()
    assert 'id="btn-retry"' in page and "budget_exhausted" in page

    response = client.post(_url("retry", run_id), {"guidance": "Stop calling nope."})

    assert _messages(response) == [f"New attempt started. Run {run_id}: failed → running."]
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.current_attempt_index) == (RunStatus.RUNNING, 1)
    second = Attempt.objects.get(run=run, index=1)
    assert second.recovery_context["guidance"] == "Stop calling nope."


def test_retry_of_a_completed_run_is_refused_and_changes_nothing(agent, scripted_llm):
    run_id = _completed_run(agent, scripted_llm)
    client = _client(_user("ann", CONTROL))
    before = snapshot(run_id)

    response = client.post(_url("retry", run_id), {"guidance": "again"})

    assert _messages(response) == [
        f"Retry refused: run {run_id} is completed; only a failed run can be retried"
    ]
    assert snapshot(run_id) == before


def test_actions_need_post(agent, scripted_llm):
    run_id = _asking_run(agent, scripted_llm)
    client = _client(_user("ann", CONTROL))
    before = snapshot(run_id)

    assert client.get(_url("cancel", run_id)).status_code == 405
    assert snapshot(run_id) == before


# --- live endpoint ---------------------------------------------------------------------------


def test_live_endpoint_reports_state_and_panels_only_when_changed(agent, scripted_llm):
    run_id = _asking_run(agent, scripted_llm)
    client = _client(_user("vic", VIEW))

    first = client.get(_url("live", run_id)).json()
    assert (first["status"], first["terminal"], first["progress"]) == (
        "awaiting_input",
        False,
        {"iteration": 1, "max": 20, "percent": 5},
    )
    assert "CSV or JSON?" in first["html"]["state"]
    assert "ask_user" in first["html"]["trace"]

    unchanged = client.get(_url("live", run_id), {"since": first["fingerprint"]}).json()
    assert "html" not in unchanged
    assert unchanged["fingerprint"] == first["fingerprint"]


# --- read-only ledger and signals ------------------------------------------------------------


@pytest.mark.parametrize(
    "model", ["motorrun", "attempt", "step", "approvalrequest", "signal", "runevent"]
)
def test_ledger_models_cannot_be_added_changed_or_deleted_even_by_a_superuser(
    agent, scripted_llm, model
):
    run_id = _asking_run(agent, scripted_llm)
    admin_user = User.objects.create_superuser("root", "root@example.org", "x")
    client = _client(admin_user)
    objects = {
        "motorrun": MotorRun.objects.get(pk=run_id),
        "attempt": Attempt.objects.get(run_id=run_id),
        "step": Step.objects.get(attempt__run_id=run_id),
        "approvalrequest": None,
        "signal": Signal.objects.get(run_id=run_id),
        "runevent": RunEvent.objects.filter(run_id=run_id).first(),
    }
    before = snapshot(run_id)

    assert client.get(reverse(f"admin:runs_{model}_add")).status_code == 403
    changelist = client.get(reverse(f"admin:runs_{model}_changelist"))
    assert changelist.status_code == 200
    assert 'name="action"' not in changelist.content.decode()  # no bulk delete
    obj = objects[model]
    if obj is not None:
        assert client.get(reverse(f"admin:runs_{model}_delete", args=[obj.pk])).status_code == 403
        if model != "motorrun":
            page = client.post(reverse(f"admin:runs_{model}_change", args=[obj.pk]), {})
            assert page.status_code == 403
    assert snapshot(run_id) == before


def test_signals_list_shows_run_agent_and_payload_status(agent, scripted_llm):
    run_id = _asking_run(agent, scripted_llm)
    signal = Signal.objects.get(run_id=run_id)
    client = _client(_user("sid", ["runs.view_signal"]))

    page = client.get(reverse("admin:runs_signal_changelist")).content.decode()

    assert f">{signal.pk}</a>" in page
    assert run_id in page and agent.name in page
    assert '<span class="mc-badge mc-badge--awaiting_input">Awaiting input</span>' in page


# --- secrets ---------------------------------------------------------------------------------


def test_no_admin_page_renders_a_credential_value(agent, scripted_llm, settings, tmp_path):
    # given a run that used the credential api_token (value known to the test resolver)
    settings.MOTOR_CREDENTIAL_RESOLVER = "tests.runs.credential_resolver.resolve"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run_id = run_start(
        agent_id=agent.pk,
        task="Check the token <credential:api_token>",
        tools=["code"],
        credential_names=["api_token"],
        workspace=str(workspace),
        actor="t",
    )["run_id"]
    program = "import os\nv = os.environ['api_token']  # <credential:api_token>\nprint(len(v), v)\n"
    scripted_llm.add(
        reply_tools(
            tool_call("code", {"code": program}),
            text="using <credential:api_token>",
        ),
        reply_tools(tool_call("ask_user", {"question": "Keep <credential:api_token>?"})),
    )
    drive(run_id, scripted_llm.client())
    step = Step.objects.get(attempt__run_id=run_id, tool="code")
    assert step.result["ok"] is True, step.result
    assert step.result["output"].strip() == f"{len(SECRET_VALUE)} <credential:api_token>"
    client = _client(User.objects.create_superuser("root", "root@example.org", "x"))

    # when every admin page of the run's ledger is opened
    attempt = Attempt.objects.get(run_id=run_id)
    urls = [
        reverse("admin:runs_motorrun_changelist"),
        _url("change", run_id),
        _url("live", run_id),
        reverse("admin:runs_attempt_changelist"),
        reverse("admin:runs_attempt_change", args=[attempt.pk]),
        reverse("admin:runs_step_changelist"),
        reverse("admin:runs_signal_changelist"),
        reverse("admin:runs_runevent_changelist"),
    ]
    urls += [
        reverse("admin:runs_step_change", args=[s.pk]) for s in Step.objects.filter(attempt=attempt)
    ]
    urls += [
        reverse("admin:runs_signal_change", args=[s.pk])
        for s in Signal.objects.filter(run_id=run_id)
    ]
    pages = {url: client.get(url) for url in urls}

    # then each renders, shows the placeholder where relevant, and never the value
    assert {url: r.status_code for url, r in pages.items()} == {url: 200 for url in urls}
    console = pages[_url("change", run_id)].content.decode()
    assert "&lt;credential:api_token&gt;" in console
    assert "<code>api_token</code>" in console
    for url, response in pages.items():
        body = response.content.decode()
        if url == _url("live", run_id):
            body = json.dumps(response.json())
        assert SECRET_VALUE not in body, url


def test_web_results_are_marked_untrusted_and_long_output_is_folded(agent, scripted_llm):
    # given a run whose trace holds a web result with a long output (recorded as the loop would)
    run_id = _asking_run(agent, scripted_llm)
    attempt = Attempt.objects.get(run_id=run_id)
    long_output = "row," * 400 + "END-OF-OUTPUT"
    Step.objects.create(
        attempt=attempt,
        iteration=0,
        call_index=1,
        tool_call_id="w1",
        tool="fetch",
        arguments={"url": "https://example.org/page"},
        state="done",
        result={
            "ok": True,
            "output": long_output,
            "error_code": None,
            "retryable": False,
            "provenance": "web",
            "duration_ms": 12,
            "cost": 0.0,
        },
        duration_ms=12,
        lease_token=MotorRun.objects.get(pk=run_id).lease_token,
    )
    client = _client(_user("vic", VIEW))

    page = client.get(_url("change", run_id)).content.decode()

    # then the web step is highlighted as untrusted, and its output shown folded with all of it
    assert 'class="mc-step mc-step--untrusted"' in page
    assert "web · untrusted" in page
    assert f"show all {len(long_output)} characters" in page
    assert page.count("END-OF-OUTPUT") == 1  # only inside the fold
    assert "12 ms" in page
    assert "waiting for an answer" in page


def test_an_unknown_run_is_404_for_the_page_the_live_feed_and_actions():
    client = _client(_user("ann", CONTROL))

    assert client.get(_url("change", "run_000000000000")).status_code == 404
    assert client.get(_url("live", "run_000000000000")).status_code == 404
    assert client.post(_url("cancel", "run_000000000000"), {}).status_code == 404
    assert MotorRun.objects.count() == 0


def test_a_run_waiting_for_credentials_offers_no_answer_form(agent, scripted_llm, settings):
    # given a run waiting for api_key, which nobody has set
    settings.MOTOR_CREDENTIAL_RESOLVER = "tests.runs.credential_resolver.nothing"
    run_id = run_start(
        workspace=new_workspace(),
        agent_id=agent.pk,
        task="t",
        credential_names=["api_key"],
        actor="test",
    )["run_id"]
    drive(run_id, scripted_llm.client())
    # when its console is opened by someone who may answer questions
    page = _client(_user("ann", CONTROL)).get(_url("change", run_id)).content.decode()
    # then it names the credential and where to set it, with no field to type a value into
    assert 'id="question-text">This run needs the credential api_key' in page
    assert "Waiting for the credential\n    <code>api_key</code>:" in page
    assert "set it under <strong>Credentials</strong> in this admin" in page
    assert 'id="answer-form"' not in page


# --- reading numbers and structured data -----------------------------------------------------


def test_a_finished_run_has_no_progress_bar_and_steps_count_from_one(agent, scripted_llm):
    # given a run awaiting input (one tool call) and a completed run
    asking = _asking_run(agent, scripted_llm)
    done = _completed_run(Agent.objects.create(name="other", owner=agent.owner), scripted_llm)
    client = _client(_user("nia", VIEW))

    # when the list and the asking run's console are opened
    listing = client.get(reverse("admin:runs_motorrun_changelist")).content.decode()
    console = client.get(_url("change", asking)).content.decode()
    finished = client.get(_url("change", done)).content.decode()

    # then only the active run has a bar; the finished one says what it used
    assert listing.count('class="mc-progress__bar"') == 1
    assert '<span class="mc-meta" title="LLM calls of the last attempt">1 iteration</span>' in (
        listing
    )
    assert 'class="mc-progress__bar"' not in finished
    # and the trace counts attempts, iterations and calls from 1
    assert "attempt 1<br>iteration 1 · call 1" in console
    assert "iteration 1.0" not in console


def test_signal_payloads_and_audit_rows_are_shown_indented_with_names(agent, scripted_llm):
    # given a signal of a run that asked a question
    run_id = _asking_run(agent, scripted_llm)
    signal = Signal.objects.get(run_id=run_id)
    client = _client(_user("pia", ["runs.view_signal"]))

    # when its page is opened
    page = client.get(reverse("admin:runs_signal_change", args=[quote(signal.pk)])).content.decode()

    # then the payload is indented JSON in a <pre>, and the title names the agent
    assert '<pre class="mc-json">{\n  &quot;question&quot;: &quot;CSV or JSON?&quot;' in page
    assert f"for agent {agent.name}" in page
    assert f"for agent {agent.pk}<" not in page
