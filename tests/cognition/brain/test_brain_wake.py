"""The brain woken by motor_result signals, in process: both LLMs scripted, the motor run driven
slice by slice with its real sandbox; the wake-up handler is called with the signal's id."""

from __future__ import annotations

import json

import pytest

from cognition.brain.models import BrainWake, ConversationStatus, Message, WakeState
from cognition.brain.services import (
    brain_wake,
    brain_wake_handle,
    conversation_approve_skill,
    conversation_post_message,
)
from cognition.models import Conversation
from runs.models import Attempt, MotorRun, RunStatus, Signal
from skills.models import Policy, PolicyAuditEvent, PolicyStatus
from tests.cognition.conftest import World
from tests.cognition.worker_support import clean_run_queue  # noqa: F401 - fixture
from tests.fixtures.llm import ScriptedLLM, reply_text, reply_tools, tool_call
from tests.runs.helpers import drive, new_workspace

pytestmark = pytest.mark.django_db

SKILL = "---\nname: mailer\ndescription: Sends mail through the example API.\n---\n# Mailer\n\nCall https://api.mailhub.io/v1/send with $MAIL_TOKEN.\n"


def _start_run(world, chat, brain: ScriptedLLM, **act) -> str:
    """Olivia asks; the brain starts an agentic run; returns its id."""
    arguments = {"mode": "agentic", "task": "Learn the mail API", "tools": ["write"], "domains": []}
    arguments.update(act)
    brain.add(
        reply_tools(tool_call("core_act", arguments, call_id="act")),
        reply_text("I started a run."),
    )
    added = conversation_post_message(
        conversation_id=chat.pk,
        text="Learn the mail API",
        actor=world.olivia,
        client=brain.client(),
    )
    result = added[2].tool_result
    assert result["ok"] is True, result
    return result["result"]["run_id"]


def _signal(run_id: str, status: str) -> Signal:
    return Signal.objects.filter(run_id=run_id, payload__status=status).latest("id")


def _policy_state() -> list[tuple]:
    return sorted(
        Policy.objects.values_list("id", "status", "approved_by_id", "approved_content_hash")
    )


def test_completed_run_reports_reviews_the_new_skill_and_cannot_approve_it(
    world: World, chat: Conversation, scripted_llm, workspaces, models
) -> None:
    brain, motor = scripted_llm, ScriptedLLM()
    run_id = _start_run(world, chat, brain)
    # the motor writes a skill and finishes
    motor.add(
        reply_tools(tool_call("write", {"path": "SKILL.md", "content": SKILL})),
        reply_text("Wrote the mailer skill."),
    )
    drive(run_id, motor.client())
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
    assert Policy.objects.get(skill__name="mailer").status == PolicyStatus.PENDING_REVIEW
    # when the brain wakes on the completed signal and (wrongly) tries to approve
    brain.add(
        reply_tools(tool_call("core_skill", {"action": "approve", "name": "mailer"}, call_id="ap")),
        reply_text("I learned mailer. It references api.mailhub.io and MAIL_TOKEN. Approve?"),
    )
    audit_before = PolicyAuditEvent.objects.count()
    signal = _signal(run_id, "completed")
    assert brain_wake_handle(signal_id=signal.pk, client=brain.client()) == "handled"
    # then the skill was reviewed (by the engine) but not approved: the gate refused
    policy = Policy.objects.get(skill__name="mailer")
    assert policy.status == PolicyStatus.REVIEWED
    assert policy.approved_by_id is None
    assert PolicyAuditEvent.objects.count() == audit_before + 1  # the review only
    wake_messages = list(
        chat.messages.filter(signal__isnull=False)
        | chat.messages.filter(id__gt=chat.messages.get(signal=signal).pk)
    )
    kinds = [(m.role, (m.event or {}).get("type"), m.tool_name) for m in wake_messages]
    assert kinds == [
        ("event", "motor_result", ""),
        ("assistant", None, ""),
        ("tool", None, "core_skill"),
        ("event", "skill_review", ""),
        ("assistant", None, ""),
        ("tool", None, "core_skill"),
        ("assistant", None, ""),
    ]
    assert wake_messages[0].text == f"Run {run_id} completed: Wrote the mailer skill."
    card = wake_messages[3].event
    assert (card["skill"], card["status"]) == ("mailer", "reviewed")
    assert card["facts"]["referenced_domains"] == ["api.mailhub.io"]
    refused = wake_messages[5].tool_result
    assert refused["ok"] is False
    assert refused["error"]["code"] == "consent_required"
    assert all(m.trigger == "motor_result" for m in wake_messages)
    # the presentation used the smart model, and the model saw the trigger facts
    request = brain.requests[-1]
    assert request["model"] == models["smart"]
    system = request["messages"][0]["content"]
    assert '<trigger type="motor_result">' in system
    assert '"created": ["mailer"]' in system
    # a repeated signal is a no-op
    assert brain_wake_handle(signal_id=signal.pk, client=brain.client()) == "duplicate"
    assert BrainWake.objects.get(signal=signal).state == WakeState.DONE
    # and the user's click approves it, as her
    event = conversation_approve_skill(conversation_id=chat.pk, skill="mailer", actor=world.olivia)
    policy.refresh_from_db()
    assert (policy.status, policy.approved_by) == (PolicyStatus.APPROVED, world.olivia)
    assert event.event == {"type": "skill_approved", "skill": "mailer", "status": "approved"}


def test_a_question_sets_awaiting_answer_and_the_next_message_answers_it(
    world: World, chat: Conversation, scripted_llm, workspaces, models
) -> None:
    brain, motor = scripted_llm, ScriptedLLM()
    run_id = _start_run(world, chat, brain)
    motor.add(reply_tools(tool_call("ask_user", {"question": "CSV or JSON?"}, call_id="q1")))
    drive(run_id, motor.client())
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.AWAITING_INPUT
    # when the brain wakes and (wrongly) tries to answer for the user
    brain.add(
        reply_tools(
            tool_call("core_task", {"action": "respond", "run_id": run_id, "answer": "CSV"})
        ),
        reply_text("The run asks: CSV or JSON?"),
    )
    brain_wake_handle(signal_id=_signal(run_id, "awaiting_input").pk, client=brain.client())
    # then core_task was not even offered, the run still waits, and the conversation awaits
    request = brain.requests[-2]
    assert "core_task" not in [t["function"]["name"] for t in request["tools"]]
    refused = chat.messages.filter(role="tool").latest("id").tool_result
    assert refused["error"]["code"] == "tool_not_offered"
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.AWAITING_INPUT
    chat.refresh_from_db()
    assert (chat.status, chat.pending_run_id, chat.pending_question, chat.pending_tool_call_id) == (
        ConversationStatus.AWAITING_ANSWER,
        run_id,
        "CSV or JSON?",
        "q1",
    )
    # when olivia answers, the brain routes her answer to the run
    brain.add(
        reply_tools(
            tool_call("core_task", {"action": "respond", "run_id": run_id, "answer": "CSV please"})
        ),
        reply_text("Passed on: CSV."),
    )
    conversation_post_message(
        conversation_id=chat.pk, text="CSV please", actor=world.olivia, client=brain.client()
    )
    # the pending question was in the prompt, the run resumed, the conversation is idle again
    system = brain.requests[-2]["messages"][0]["content"]
    assert (
        f'<pending_motor_question run_id="{run_id}">CSV or JSON?</pending_motor_question>' in system
    )
    assert brain.requests[-2]["model"] == models["fast"]
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.RUNNING
    chat.refresh_from_db()
    assert (chat.status, chat.pending_run_id) == (ConversationStatus.IDLE, "")
    # and the motor receives the answer as the result of its ask_user call
    motor.add(reply_text("Made a CSV."))
    drive(run_id, motor.client())
    assert motor.requests[-1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "q1",
        "content": "CSV please",
    }


def test_a_retryable_failure_is_retried_with_guidance(
    world: World, chat: Conversation, scripted_llm, workspaces, models
) -> None:
    brain, motor = scripted_llm, ScriptedLLM()
    run_id = _start_run(world, chat, brain)
    drive(run_id, motor.client())  # the motor's LLM is unreachable: model_failure, retryable
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.current_attempt_index) == (RunStatus.FAILED, 0)
    brain.add(
        reply_tools(
            tool_call("core_task", {"action": "retry", "run_id": run_id, "guidance": "Try again."})
        ),
        reply_text("It failed once; I am retrying."),
    )
    brain_wake_handle(signal_id=_signal(run_id, "failed").pk, client=brain.client())
    system = brain.requests[-2]["messages"][0]["content"]
    assert '"can_retry": true' in system
    assert "Call core_task retry" in system
    run.refresh_from_db()
    assert (run.status, run.current_attempt_index) == (RunStatus.RUNNING, 1)
    attempt = Attempt.objects.get(run=run, index=1)
    assert "Try again." in json.dumps(attempt.recovery_context)


def test_a_final_failure_is_explained_without_a_retry(
    world: World, chat: Conversation, scripted_llm, workspaces, models
) -> None:
    from runs.services import run_retry

    brain, motor = scripted_llm, ScriptedLLM()
    run_id = _start_run(world, chat, brain)
    drive(run_id, motor.client())
    for _ in range(2):
        run_retry(run_id=run_id, guidance="again", actor="test")
        drive(run_id, motor.client())
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.current_attempt_index, run.max_attempts) == (RunStatus.FAILED, 2, 3)
    brain.add(reply_text("The run failed three times: the model service was unreachable."))
    signal = Signal.objects.filter(run_id=run_id, payload__status="failed").latest("id")
    brain_wake_handle(signal_id=signal.pk, client=brain.client())
    system = brain.requests[-1]["messages"][0]["content"]
    assert '"can_retry": false' in system
    assert "will not be retried" in system
    assert chat.messages.latest("id").text.startswith("The run failed three times")


def test_a_signal_of_a_run_without_conversation_goes_to_the_agent_s_latest_one(
    world: World, chat: Conversation, scripted_llm, workspaces
) -> None:
    from runs.services import run_start

    run_id = run_start(
        agent_id=world.alpha.pk, task="t", tools=[], workspace=new_workspace(), actor="api"
    )["run_id"]
    ScriptedLLM()  # no motor LLM: the run fails at once
    drive(run_id, ScriptedLLM().client())
    scripted_llm.add(reply_text("A run you started elsewhere failed."))
    signal = Signal.objects.filter(run_id=run_id).latest("id")
    assert brain_wake_handle(signal_id=signal.pk, client=scripted_llm.client()) == "handled"
    assert Message.objects.filter(conversation=chat, signal=signal).count() == 1
    assert BrainWake.objects.get(signal=signal).conversation == chat


def test_a_wake_whose_worker_died_mid_turn_is_resumed_without_a_second_event(
    world: World, chat: Conversation, scripted_llm
) -> None:
    # given a wake that a dead worker had claimed and written its event for (its lock expired)
    signal = Signal.objects.create(
        kind="motor_result",
        agent=world.alpha,
        seq=1,
        payload={"run_id": "run_gone", "status": "completed", "result": {"summary": "done"}},
    )
    BrainWake.objects.create(signal=signal, state=WakeState.RUNNING, conversation=chat)
    Message.objects.create(
        conversation=chat,
        role="event",
        trigger="motor_result",
        text="Run run_gone completed: done",
        event={"type": "motor_result"},
        signal=signal,
    )
    scripted_llm.add(reply_text("The run finished."))
    # when the redelivered task handles it
    assert brain_wake_handle(signal_id=signal.pk, client=scripted_llm.client()) == "handled"
    # then the turn was played once more, the event not repeated
    assert list(chat.messages.values_list("role", "text")) == [
        ("event", "Run run_gone completed: done"),
        ("assistant", "The run finished."),
    ]
    assert BrainWake.objects.get(signal=signal).state == WakeState.DONE


def test_a_wake_whose_turn_is_alive_elsewhere_waits(
    world: World, chat: Conversation, scripted_llm
) -> None:
    from cognition.brain.services import turn_lock

    signal = Signal.objects.create(
        kind="motor_result",
        agent=world.alpha,
        seq=1,
        payload={"run_id": "run_x", "status": "completed", "result": {}},
    )
    BrainWake.objects.create(signal=signal, state=WakeState.RUNNING, conversation=chat)
    with turn_lock(chat.pk, wait_s=0):
        assert brain_wake_handle(signal_id=signal.pk, client=scripted_llm.client()) == "busy"
    assert chat.messages.count() == 0
    assert scripted_llm.requests == []
    assert BrainWake.objects.get(signal=signal).state == WakeState.RUNNING


@pytest.mark.usefixtures("clean_run_queue")  # the resumed run's step is queued
def test_a_run_waiting_for_a_credential_is_not_a_question_for_the_chat(
    world: World,
    chat: Conversation,
    scripted_llm,
    workspaces,
    models,
    settings,
    django_capture_on_commit_callbacks,
) -> None:
    # given a run of alpha waiting for mail_token, which nobody has set
    from cognition.services import credential_set
    from runs.services import run_start

    settings.MOTOR_CREDENTIAL_RESOLVER = "cognition.core.run_credentials_resolve"
    run_id = run_start(
        workspace=new_workspace(),
        agent_id=world.alpha.pk,
        task="Send mail",
        credential_names=["MAIL_TOKEN"],
        actor="t",
    )["run_id"]
    drive(run_id, ScriptedLLM().client())
    assert MotorRun.objects.get(pk=run_id).missing_credentials == ["mail_token"]
    # when the brain wakes on its signal
    brain = scripted_llm
    brain.add(reply_text("Please set MAIL_TOKEN in the admin; do not paste it here."))
    assert (
        brain_wake_handle(signal_id=_signal(run_id, "awaiting_input").pk, client=brain.client())
        == "handled"
    )
    # then the event says where to set it, and the conversation does not wait for an answer
    event = chat.messages.get(role="event")
    assert event.text == (
        f"Run {run_id} waits for credentials nobody has set: mail_token. Set them in the admin "
        "(Credentials) or through the API; never send a value in this chat. The run goes on by "
        "itself once they are set."
    )
    assert event.event["missing_credentials"] == ["mail_token"]
    chat.refresh_from_db()
    assert (chat.status, chat.pending_run_id) == (ConversationStatus.IDLE, "")
    # and the run resumes when the credential is set in the vault
    with django_capture_on_commit_callbacks(execute=True):
        credential_set(agent=world.alpha, name="MAIL_TOKEN", value="m-9f2c", actor="t")
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.RUNNING


def test_a_signal_no_conversation_would_hear_is_done_at_once_without_a_task(
    world: World, chat: Conversation, django_capture_on_commit_callbacks
) -> None:
    from runs.outbox import signal_emit

    # given a signal of bravo, which has no conversation (chat is alpha's)
    with django_capture_on_commit_callbacks() as emitted:
        lonely = signal_emit(agent_id=world.bravo.pk, kind="motor_result", payload={"status": "x"})
        heard = signal_emit(agent_id=world.alpha.pk, kind="motor_result", payload={"status": "x"})
    assert len(emitted) == 2  # the deliveries' notifications, not run here

    # when the brain hook gets it, then its wake is done at once and no wake-up task is queued
    with django_capture_on_commit_callbacks() as queued:
        assert brain_wake(lonely.pk) is True
    assert queued == []
    wake = BrainWake.objects.get(signal=lonely)
    assert (wake.state, wake.outcome, wake.conversation) == (
        WakeState.DONE,
        "no_conversation",
        None,
    )
    assert wake.handled_at is not None
    # and a repeat is a no-op, through the hook and through the task's service
    with django_capture_on_commit_callbacks() as again:
        assert brain_wake(lonely.pk) is False
    assert again == []
    assert brain_wake_handle(signal_id=lonely.pk) == "duplicate"
    assert not Message.objects.filter(signal=lonely).exists()

    # when it gets alpha's signal, a conversation would hear of it: one task queued on commit
    with django_capture_on_commit_callbacks() as queued:
        assert brain_wake(heard.pk) is True
    assert len(queued) == 1
    assert BrainWake.objects.get(signal=heard).state == WakeState.QUEUED
    # and a missing signal records nothing
    assert brain_wake(heard.pk + 1000) is False
    assert BrainWake.objects.count() == 2
