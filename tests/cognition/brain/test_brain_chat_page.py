"""The chat page in headless Chromium: log in, start a conversation, send a message and see the
reply, watch a review card arrive after a motor_result signal, and approve the skill with a click.
The brain's LLM is the local stub server (LLM_BASE_URL)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from cognition.brain.services import brain_wake_handle
from cognition.models import Conversation, Message
from runs.models import SignalKind
from runs.outbox import signal_emit
from skills.imports import skill_import_pasted
from skills.models import Policy, PolicyStatus
from skills.services import Actor
from tests.cognition.conftest import World, skill_md
from tests.fixtures.llm import reply_text
from tests.skills.admin_support import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def brain_llm(llm_stub_server, settings):
    settings.LLM_BASE_URL = llm_stub_server.base_url
    settings.LLM_API_KEY = "stub"
    return llm_stub_server


def _log_in(page: Page, username: str) -> None:
    page.goto("/chat/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Talk to your agent")


def test_send_a_message_see_the_reply_then_approve_a_reviewed_skill(
    page: Page, world: World, brain_llm
) -> None:
    # given olivia logged in, starting a conversation with alpha
    _log_in(page, "olivia")
    page.select_option("#id_agent", label="alpha")
    page.click("#start-conversation")
    expect(page).to_have_url(re.compile(r"/chat/\d+/$"))
    conversation = Conversation.objects.get(agent=world.alpha, user=world.olivia)
    # when she sends a message, the agent's reply appears
    brain_llm.add(reply_text("Hello Olivia, what shall I learn?"))
    page.fill("#text", "Hello there")
    page.click("#send-button")
    expect(page.locator(".user-bubble")).to_contain_text("Hello there")
    expect(page.locator(".assistant-bubble")).to_contain_text("Hello Olivia, what shall I learn?")
    assert brain_llm.requests[0]["messages"][-1] == {"role": "user", "content": "Hello there"}
    # when a run's completion signal reports a new skill (the brain presents it)
    skill_import_pasted(text=skill_md("mailer"), actor=Actor.system("run"), agent=world.alpha)
    signal = signal_emit(
        agent_id=world.alpha.pk,
        kind=SignalKind.MOTOR_RESULT,
        payload={
            "run_id": "run_outside",
            "status": "completed",
            "result": {
                "ok": True,
                "summary": "Learned the mailer API.",
                "skills": {"created": ["mailer"], "updated": [], "unchanged": [], "failed": []},
            },
        },
    )
    brain_llm.add(reply_text("I learned mailer; it calls api.agentmail.to. Approve it?"))
    assert brain_wake_handle(signal_id=signal.pk) == "handled"
    # then the page shows the review card by itself (polling) with the facts
    card = page.locator(".review-card[data-skill=mailer]")
    expect(card).to_be_visible()
    expect(card).to_contain_text("api.agentmail.to")
    expect(card.locator(".card-status")).to_have_text("reviewed")
    expect(page.locator(".assistant-bubble").last).to_contain_text("Approve it?")
    assert Policy.objects.get(skill__name="mailer").status == PolicyStatus.REVIEWED
    # when she clicks Approve, the skill is approved by her
    card.get_by_role("button", name="Approve mailer").click()
    expect(card.locator(".approved")).to_have_text("Approved.")
    expect(page.locator(".event-skill_approved")).to_contain_text("olivia approved skill 'mailer'")
    policy = Policy.objects.get(skill__name="mailer")
    assert (policy.status, policy.approved_by) == (PolicyStatus.APPROVED, world.olivia)
    # and a reload shows the card as approved, without a button
    page.reload()
    expect(card.locator(".approved")).to_have_text("Approved.")
    expect(card.get_by_role("button")).to_have_count(0)
    assert (
        Message.objects.filter(conversation=conversation, event__type="skill_review").count() == 1
    )


def test_an_approval_refused_by_the_skills_rules_is_shown_and_changes_nothing(
    page: Page, world: World, brain_llm
) -> None:
    # given bob (no approve permission) owns bravo, whose skill waits in a review card
    conversation = Conversation.objects.create(agent=world.bravo, user=world.bob)
    skill_import_pasted(text=skill_md("mailer"), actor=Actor.system("run"), agent=world.bravo)
    signal = signal_emit(
        agent_id=world.bravo.pk,
        kind=SignalKind.MOTOR_RESULT,
        payload={
            "run_id": "run_b",
            "status": "completed",
            "result": {"ok": True, "summary": "ok", "skills": {"created": ["mailer"]}},
        },
    )
    brain_llm.add(reply_text("Approve mailer?"))
    brain_wake_handle(signal_id=signal.pk)
    _log_in(page, "bob")
    page.goto(f"/chat/{conversation.pk}/")
    card = page.locator(".review-card[data-skill=mailer]")
    # when he clicks Approve
    card.get_by_role("button", name="Approve mailer").click()
    # then the card says why, and the policy is unchanged
    expect(card.locator(".card-error")).to_be_visible()
    expect(card.locator(".card-error")).to_contain_text("approve")
    assert Policy.objects.get(agent=world.bravo).status == PolicyStatus.REVIEWED
    assert not Message.objects.filter(event__type="skill_approved").exists()


def test_another_user_s_conversation_is_not_found(page: Page, world: World) -> None:
    conversation = Conversation.objects.create(agent=world.alpha, user=world.olivia)
    _log_in(page, "bob")
    response = page.goto(f"/chat/{conversation.pk}/")
    assert response is not None and response.status == 404
    expect(page.locator("h1")).to_have_text("No such conversation")


def test_run_progress_and_an_approval_card_allowed_by_a_click(
    page: Page, world: World, brain_llm, settings, tmp_path
) -> None:
    from cognition.brain.services import conversation_post_message
    from runs.models import MotorRun, RunStatus, Signal
    from tests.fixtures.llm import ScriptedLLM, reply_tools, tool_call
    from tests.runs.helpers import drive

    settings.MOTOR_WORKSPACES_DIR = tmp_path / "workspaces"
    settings.MOTOR_WORKSPACES_DIR.mkdir()
    # given olivia's conversation in which the brain started a run that needs approval to go on
    conversation = Conversation.objects.create(agent=world.alpha, user=world.olivia, title="files")
    brain_llm.add(
        reply_tools(
            tool_call(
                "core_act",
                {
                    "mode": "agentic",
                    "task": "Write out.txt",
                    "tools": ["bash"],
                    "domains": [],
                    "approval_required": True,
                },
            )
        ),
        reply_text("Started a run."),
    )
    added = conversation_post_message(
        conversation_id=conversation.pk, text="write out.txt", actor=world.olivia
    )
    run_id = added[2].tool_result["result"]["run_id"]
    motor = ScriptedLLM().add(reply_tools(tool_call("bash", {"command": "echo hi > out.txt"})))
    drive(run_id, motor.client())
    signal = Signal.objects.get(run_id=run_id, payload__status="awaiting_approval")
    brain_llm.add(reply_text("The run wants to run: echo hi > out.txt. Allow it?"))
    brain_wake_handle(signal_id=signal.pk)
    # when she opens the conversation
    _log_in(page, "olivia")
    page.goto(f"/chat/{conversation.pk}/")
    # then the runs panel shows the paused run and its progress
    run_row = page.locator(f".run[data-run-id={run_id}]")
    expect(run_row).to_contain_text("awaiting_approval")
    expect(run_row.locator(".progress")).to_have_text("iteration 1/20 · attempt 1/3")
    # and the approval card names the action; her click allows it and the run goes on
    card = page.locator(".approval-card")
    expect(card).to_contain_text("bash")
    card.get_by_role("button", name="Allow this action").click()
    expect(card.locator(".approved")).to_have_text("Allowed.")
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.RUNNING
    expect(run_row).to_contain_text("running")


def test_a_card_drops_its_approve_button_when_the_skill_is_approved_in_words(
    page: Page, world: World, brain_llm, artifacts_dir
) -> None:
    # given olivia's conversation shows a review card for mailer
    conversation = Conversation.objects.create(agent=world.alpha, user=world.olivia)
    skill_import_pasted(text=skill_md("mailer"), actor=Actor.system("run"), agent=world.alpha)
    signal = signal_emit(
        agent_id=world.alpha.pk,
        kind=SignalKind.MOTOR_RESULT,
        payload={
            "run_id": "run_w",
            "status": "completed",
            "result": {"ok": True, "summary": "ok", "skills": {"created": ["mailer"]}},
        },
    )
    brain_llm.add(reply_text("Approve mailer?"))
    brain_wake_handle(signal_id=signal.pk)
    _log_in(page, "olivia")
    page.goto(f"/chat/{conversation.pk}/")
    card = page.locator(".review-card[data-skill=mailer]")
    expect(card.get_by_role("button", name="Approve mailer")).to_be_visible()
    # and the card shows what approving grants and the warning that it is more than the policy
    expect(card.locator(".approval-grants")).to_contain_text("api.agentmail.to")
    expect(card.locator("[data-code=grants_allowed_domains]")).to_contain_text(
        "uses more than the policy grants"
    )

    # when she approves in her own words (the brain calls core.skill approve)
    from tests.fixtures.llm import reply_tools, tool_call

    brain_llm.add(
        reply_tools(tool_call("core_skill", {"action": "approve", "name": "mailer"})),
        reply_text("mailer is approved."),
    )
    page.fill("#text", "Yes, approve mailer")
    page.click("#send-button")

    # then, without a reload, the card reads approved and has no button
    expect(card.locator(".card-status")).to_have_text("approved")
    expect(card.locator(".approved")).to_have_text("Approved.")
    expect(card.get_by_role("button")).to_have_count(0)
    expect(card.locator(".approval-proposal")).to_have_count(0)
    assert Policy.objects.get(agent=world.alpha).status == PolicyStatus.APPROVED
    page.screenshot(path=str(artifacts_dir / "chat-card-approved-in-words.png"), full_page=True)


def test_the_runs_panel_shows_the_current_step_a_link_and_cancels_a_run(
    page: Page, world: World, brain_llm, settings, tmp_path, artifacts_dir
) -> None:
    from cognition.brain.services import conversation_post_message
    from runs.models import MotorRun, RunStatus
    from tests.fixtures.llm import ScriptedLLM, reply_tools, tool_call
    from tests.runs.helpers import drive

    settings.MOTOR_WORKSPACES_DIR = tmp_path / "workspaces"
    settings.MOTOR_WORKSPACES_DIR.mkdir()
    # given a run of olivia's conversation paused before an action that needs approval
    conversation = Conversation.objects.create(agent=world.alpha, user=world.olivia, title="files")
    brain_llm.add(
        reply_tools(
            tool_call(
                "core_act",
                {
                    "mode": "agentic",
                    "task": "Write out.txt",
                    "tools": ["bash"],
                    "domains": [],
                    "approval_required": True,
                },
            )
        ),
        reply_text("Started a run."),
    )
    added = conversation_post_message(
        conversation_id=conversation.pk, text="write out.txt", actor=world.olivia
    )
    run_id = added[2].tool_result["result"]["run_id"]
    drive(
        run_id, ScriptedLLM().add(reply_tools(tool_call("bash", {"command": "echo hi"}))).client()
    )
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.AWAITING_APPROVAL

    # when she opens the conversation
    _log_in(page, "olivia")
    page.goto(f"/chat/{conversation.pk}/")

    # then the run shows what it is doing, a link to its page and a Cancel button
    row = page.locator(f".run[data-run-id={run_id}]")
    expect(row.locator(".step")).to_have_text("waiting for an approval")
    # (olivia may not view runs in the admin, so the link is the run in the API)
    expect(row.locator("a.run-link")).to_have_attribute("href", f"/api/v1/runs/{run_id}/")
    page.screenshot(path=str(artifacts_dir / "chat-runs-panel.png"), full_page=True)

    # when she clicks Cancel
    row.get_by_role("button", name="Cancel").click()

    # then the run is cancelled, by her, and the panel shows it without a Cancel button
    expect(row).to_contain_text("cancelled")
    expect(row.get_by_role("button", name="Cancel")).to_have_count(0)
    expect(row.locator(".bar")).to_have_count(0)
    expect(row.locator(".step")).to_have_text("last step: bash echo hi")
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.CANCELLED
    expect(page.locator(".event-run_cancelled")).to_contain_text(f"olivia cancelled run {run_id}")
    page.screenshot(path=str(artifacts_dir / "chat-run-cancelled.png"), full_page=True)
