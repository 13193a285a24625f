"""The brain's rules beyond the main flows: the time budget, no secrets through the chat, a
paused run's approval (refused to the brain, allowed by the human's click), skipped schedules,
and the read-only admin pages."""

from __future__ import annotations

import pytest

from cognition.brain.services import (
    brain_wake_handle,
    conversation_approve_run_action,
    conversation_post_message,
)
from cognition.models import Conversation, Credential
from runs.models import MotorRun, RunStatus, Signal, SignalKind
from runs.outbox import signal_emit
from skills.imports import skill_import_pasted
from skills.models import Policy, PolicyStatus
from skills.reviewing import policy_review
from skills.services import Actor
from tests.cognition.conftest import World, skill_md
from tests.fixtures.llm import ScriptedLLM, reply_text, reply_tools, tool_call
from tests.runs.helpers import drive

pytestmark = pytest.mark.django_db


def test_a_spent_time_budget_ends_the_turn_without_calling_the_llm(
    world: World, chat: Conversation, scripted_llm, settings
) -> None:
    settings.COGNITION_TURN_BUDGET_SECONDS = 0
    scripted_llm.add(reply_text("never sent"))
    added = conversation_post_message(
        conversation_id=chat.pk, text="hi", actor=world.olivia, client=scripted_llm.client()
    )
    assert [(m.role, (m.event or {}).get("code")) for m in added] == [
        ("user", None),
        ("event", "turn_budget"),
    ]
    assert scripted_llm.requests == []


def test_the_brain_cannot_set_a_credential_value_from_the_chat(
    world: World, chat: Conversation, scripted_llm
) -> None:
    scripted_llm.add(
        reply_tools(
            tool_call("core_credential", {"action": "set", "name": "API_KEY", "value": "sk-1"})
        ),
        reply_text("Please enter it in the admin."),
    )
    added = conversation_post_message(
        conversation_id=chat.pk,
        text="my key is sk-1",
        actor=world.olivia,
        client=scripted_llm.client(),
    )
    assert added[2].tool_result["error"]["code"] == "credential_not_in_chat"
    assert Credential.objects.count() == 0
    schema = next(
        t for t in scripted_llm.requests[0]["tools"] if t["function"]["name"] == "core_credential"
    )
    assert schema["function"]["parameters"]["properties"]["action"]["enum"] == ["list", "delete"]
    assert "value" not in schema["function"]["parameters"]["properties"]


def test_a_paused_action_is_not_the_brain_s_to_approve_but_the_human_s_click_allows_it(
    world: World, chat: Conversation, scripted_llm, workspaces
) -> None:
    brain, motor = scripted_llm, ScriptedLLM()
    brain.add(
        reply_tools(
            tool_call(
                "core_act",
                {
                    "mode": "agentic",
                    "task": "Write a file",
                    "tools": ["bash"],
                    "domains": [],
                    "approval_required": True,
                },
            )
        ),
        reply_text("Started."),
    )
    added = conversation_post_message(
        conversation_id=chat.pk, text="write it", actor=world.olivia, client=brain.client()
    )
    run_id = added[2].tool_result["result"]["run_id"]
    motor.add(reply_tools(tool_call("bash", {"command": "echo hi > out.txt"}, call_id="b1")))
    drive(run_id, motor.client())
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.AWAITING_APPROVAL
    # when the brain wakes, core_task is not offered and its attempt is refused
    brain.add(
        reply_tools(tool_call("core_task", {"action": "approve", "run_id": run_id})),
        reply_text("The run wants to run bash: echo hi > out.txt. Allow it?"),
    )
    signal = Signal.objects.filter(run_id=run_id, payload__status="awaiting_approval").get()
    brain_wake_handle(signal_id=signal.pk, client=brain.client())
    assert "core_task" not in [t["function"]["name"] for t in brain.requests[-2]["tools"]]
    refused = chat.messages.filter(role="tool").latest("id").tool_result
    assert refused["error"]["code"] == "tool_not_offered"
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.AWAITING_APPROVAL
    event = chat.messages.get(signal=signal).event
    assert (event["status"], event["approval"]["tool"]) == ("awaiting_approval", "bash")
    # when olivia clicks Allow, the run resumes
    message = conversation_approve_run_action(
        conversation_id=chat.pk, run_id=run_id, actor=world.olivia
    )
    assert message.event == {"type": "run_action_approved", "run_id": run_id}
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.RUNNING


def test_a_skipped_schedule_is_told_on_a_schedule_turn_that_cannot_approve(
    world: World, chat: Conversation, scripted_llm
) -> None:
    policy = skill_import_pasted(
        text=skill_md("mailer"), actor=Actor.system("t"), agent=world.alpha
    ).policy
    policy_review(policy=policy, actor=Actor.system("t"))
    signal = signal_emit(
        agent_id=world.alpha.pk,
        kind=SignalKind.SCHEDULE_SKIPPED,
        payload={"skill": "mailer", "reason": "not_approved", "detail": "mailer is reviewed"},
    )
    scripted_llm.add(
        reply_tools(tool_call("core_skill", {"action": "approve", "name": "mailer"})),
        reply_text("Your mailer schedule did not run: the skill is not approved."),
    )
    assert brain_wake_handle(signal_id=signal.pk, client=scripted_llm.client()) == "handled"
    rows = list(chat.messages.order_by("id").values_list("role", "trigger", "text"))
    assert rows[0] == (
        "event",
        "schedule",
        "The schedule of skill 'mailer' did not start a run: mailer is reviewed",
    )
    refused = chat.messages.get(role="tool").tool_result
    assert refused["error"]["code"] == "consent_required"
    assert Policy.objects.get(pk=policy.pk).status == PolicyStatus.REVIEWED
    system = scripted_llm.requests[0]["messages"][0]["content"]
    assert '<trigger type="schedule">' in system


def test_the_admin_shows_conversations_read_only(world: World, chat: Conversation, client):
    from tests.skills.admin_support import make_user

    root = make_user("root", superuser=True)
    client.force_login(root)
    listing = client.get("/admin/cognition/conversation/")
    assert listing.status_code == 200
    assert f"/chat/{chat.pk}/" in listing.content.decode()
    assert client.get("/admin/cognition/conversation/add/").status_code == 403
    assert client.get(f"/admin/cognition/conversation/{chat.pk}/change/").status_code == 200
    assert client.get("/admin/cognition/brainwake/").status_code == 200


def test_vault_values_never_reach_the_brain_s_llm(
    world: World, chat: Conversation, scripted_llm
) -> None:
    from cognition.services import credential_set
    from tests.cognition.conftest import SECRET

    credential_set(agent=world.alpha, name="MAIL_TOKEN", value=SECRET, actor="test")
    scripted_llm.add(
        reply_tools(tool_call("core_credential", {"action": "list"})),
        reply_text("You have MAIL_TOKEN set."),
    )
    added = conversation_post_message(
        conversation_id=chat.pk,
        text="which keys do I have?",
        actor=world.olivia,
        client=scripted_llm.client(),
    )
    assert added[2].tool_result == {"ok": True, "result": {"names": ["MAIL_TOKEN"]}}
    assert all(SECRET not in str(request) for request in scripted_llm.requests)
    assert not chat.messages.filter(tool_result__icontains=SECRET).exists()
