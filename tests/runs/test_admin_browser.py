"""The run console in a real headless Chromium: answer a question, watch a run progress live."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission, User
from playwright.sync_api import Page, expect

from runs.models import (
    ApprovalRequest,
    ApprovalStatus,
    Attempt,
    MotorRun,
    RunEvent,
    RunStatus,
    Step,
)
from runs.services import run_respond, run_start
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import drive, new_workspace

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct-horse-battery-9"  # noqa: S105 - test login


def _controller(username: str) -> User:
    user = User.objects.create_user(username, password=PASSWORD, is_staff=True)
    for codename in ("view_motorrun", "change_motorrun"):
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="runs", codename=codename)
        )
    return user


def _asking_run(agent, scripted_llm) -> str:
    run_id = run_start(
        workspace=new_workspace(), agent_id=agent.pk, task="Export the quarterly data", actor="test"
    )["run_id"]
    scripted_llm.add(
        reply_tools(
            tool_call("ask_user", {"question": "Separate CSVs or one workbook?"}, call_id="q1"),
            text="The format is not specified; asking.",
        )
    )
    drive(run_id, scripted_llm.client())
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.AWAITING_INPUT
    return run_id


def test_answering_the_pending_question_resumes_the_run(
    page: Page, admin_login, artifacts_dir: Path, agent, scripted_llm
) -> None:
    # given a run awaiting input and a user allowed to control runs
    run_id = _asking_run(agent, scripted_llm)
    _controller("ann")
    admin_login("ann", PASSWORD)

    # when the user opens the runs list and the run's console
    page.goto("/admin/runs/motorrun/")
    row = page.locator("#result_list tbody tr", has_text=run_id)
    expect(row.locator(".mc-badge--awaiting_input")).to_have_text("Awaiting input")
    row.get_by_role("link", name=run_id).click()

    # then the question is shown with a form to answer it
    expect(page.locator("#run-title")).to_contain_text(f"Run {run_id}")
    expect(page.locator("#question-text")).to_have_text("Separate CSVs or one workbook?")
    expect(page.locator("#trace")).to_contain_text("ask_user")
    page.screenshot(path=str(artifacts_dir / "admin-run-question.png"), full_page=True)

    # when the user types an answer and sends it
    page.fill("#id_answer", "One workbook, one sheet per quarter.")
    page.click("#btn-answer")

    # then the page reports it and the run is running with the answer as that call's result
    expect(page.locator(".messagelist")).to_contain_text(
        f"Answer sent. Run {run_id}: awaiting_input → running."
    )
    expect(page.locator("#run-status .mc-badge--running")).to_have_text("Running")
    expect(page.locator("#pending-question")).to_have_count(0)
    run = MotorRun.objects.get(pk=run_id)
    assert run.status == RunStatus.RUNNING
    attempt = Attempt.objects.get(run=run)
    tool_messages = [m for m in attempt.messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["q1"]
    assert "One workbook, one sheet per quarter." in tool_messages[0]["content"]
    step = Step.objects.get(attempt=attempt, tool_call_id="q1")
    assert step.result["output"] == "One workbook, one sheet per quarter."

    # when the run then completes while the page stays open
    scripted_llm.add(reply_text("Wrote one workbook."))
    drive(run_id, scripted_llm.client())
    # then the page shows the completion and no longer the notice of the earlier transition
    expect(page.locator("#run-status .mc-badge--completed")).to_have_text("Completed")
    expect(page.locator(".messagelist")).to_have_count(0)


def test_the_console_follows_the_run_without_a_reload(
    page: Page, admin_login, artifacts_dir: Path, agent, scripted_llm
) -> None:
    # given the console of a run awaiting input is open
    run_id = _asking_run(agent, scripted_llm)
    _controller("ann")
    admin_login("ann", PASSWORD)
    page.goto(f"/admin/runs/motorrun/{quote(run_id)}/change/")
    expect(page.locator("#run-status .mc-badge--awaiting_input")).to_be_visible()
    page.evaluate("window.__sameDocument = true")

    # when the run is answered elsewhere and goes on: a failing tool call, then a final answer
    run_respond(run_id=run_id, answer="one workbook", actor="agent:test")
    scripted_llm.add(
        reply_tools(
            tool_call("fetch", {"url": "https://example.org/rates.csv"}, call_id="f1"),
            text="Fetching the rates first.",
        ),
        reply_text("Wrote quarterly.xlsx with four sheets."),
    )
    drive(run_id, scripted_llm.client())
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.COMPLETED

    # then the same page shows the new step, the final status and the result, without a reload
    expect(page.locator("#run-status .mc-badge--completed")).to_have_text("Completed")
    expect(page.locator("#trace")).to_contain_text("fetch")
    expect(page.locator("#trace")).to_contain_text("https://example.org/rates.csv")
    expect(page.locator("#trace")).to_contain_text("Fetching the rates first.")
    expect(page.locator("#result-summary")).to_have_text("Wrote quarterly.xlsx with four sheets.")
    expect(page.locator("#mc-live-note")).to_have_text("This run is finished.")
    assert page.evaluate("window.__sameDocument") is True
    page.screenshot(path=str(artifacts_dir / "admin-run-trace.png"), full_page=True)


def test_approving_the_exact_action_resumes_the_run(
    page: Page, admin_login, artifacts_dir: Path, agent, scripted_llm, tmp_path: Path
) -> None:
    # given a gated run waiting for approval of one bash call
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run_id = run_start(
        agent_id=agent.pk,
        task="Append a line to the log",
        tools=["bash"],
        workspace=str(workspace),
        approval_required=True,
        actor="test",
    )["run_id"]
    scripted_llm.add(reply_tools(tool_call("bash", {"command": "echo a >> log.txt"})))
    drive(run_id, scripted_llm.client())
    approval = ApprovalRequest.objects.get(run_id=run_id)
    _controller("ann")
    admin_login("ann", PASSWORD)

    # when the user opens the console
    page.goto(f"/admin/runs/motorrun/{quote(run_id)}/change/")

    # then the exact action is shown
    expect(page.locator("#approval-tool")).to_have_text("bash")
    expect(page.locator("#approval-arguments")).to_have_text(
        '{\n  "command": "echo a >> log.txt"\n}'
    )
    expect(page.locator("#trace")).to_contain_text("waiting for a decision")
    page.screenshot(path=str(artifacts_dir / "admin-run-approval.png"), full_page=True)

    # when the user approves it
    page.click("#btn-approve")

    # then the approval is consumed by that user's decision and the run runs again
    expect(page.locator(".messagelist")).to_contain_text(
        f"Action approved. Run {run_id}: awaiting_approval → running."
    )
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.CONSUMED
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.RUNNING
    assert RunEvent.objects.filter(run_id=run_id).last().actor == "admin:ann"


def test_a_completed_run_reads_as_finished_with_steps_counted_from_one(
    page: Page, admin_login, artifacts_dir: Path, agent, scripted_llm
) -> None:
    # given a run that made one tool call and completed
    run_id = run_start(
        agent_id=agent.pk, task="Say hi after a look", actor="test", workspace=new_workspace()
    )["run_id"]
    scripted_llm.add(reply_tools(tool_call("nope", {"a": 1})), reply_text("Hi."))
    drive(run_id, scripted_llm.client())
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
    _controller("cai")
    admin_login("cai", PASSWORD)

    # when the runs list and the run's console are opened
    page.goto("/admin/runs/motorrun/")
    row = page.locator("#result_list tbody tr", has_text=run_id)

    # then the list shows what the run used, without a progress bar
    expect(row).to_contain_text("2 iterations")
    expect(row.locator(".mc-progress__bar")).to_have_count(0)
    page.screenshot(path=str(artifacts_dir / "admin-runs-list-finished.png"), full_page=True)
    row.get_by_role("link", name=run_id).click()
    expect(page.locator("#run-progress .mc-progress__bar")).to_have_count(0)
    expect(page.locator("#trace")).to_contain_text("attempt 1")
    expect(page.locator("#trace")).to_contain_text("iteration 1 · call 1")
    page.screenshot(path=str(artifacts_dir / "admin-run-finished.png"), full_page=True)
