"""Run artifacts in the admin, in a real headless Chromium: listed on the run's page and
downloaded by a staff user with the bytes the run wrote."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import Permission, User
from playwright.sync_api import Page, expect

from runs.models import MotorRun, RunStatus
from runs.services import run_start
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import drive

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct-horse-battery-9"  # noqa: S105 - test login
CSV = "quarter,revenue\nQ1,120\nQ2,135\n"


def test_staff_see_a_runs_artifacts_and_download_one(
    page: Page, admin_login, artifacts_dir: Path, agent, scripted_llm, tmp_path, settings
) -> None:
    # given a completed run that wrote a CSV, and a staff user who may view runs
    settings.MOTOR_ARTIFACTS_DIR = tmp_path / "store"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run_id = run_start(
        agent_id=agent.pk,
        task="Export the revenue",
        tools=["write"],
        workspace=str(workspace),
        actor="test",
    )["run_id"]
    scripted_llm.add(
        reply_tools(tool_call("write", {"path": "exports/revenue.csv", "content": CSV})),
        reply_text("Exported the revenue to exports/revenue.csv."),
    )
    drive(run_id, scripted_llm.client())
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
    user = User.objects.create_user("vera", password=PASSWORD, is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label="runs", codename="view_motorrun")
    )
    admin_login("vera", PASSWORD)

    # when she opens the run's page
    page.goto(f"/admin/runs/motorrun/{run_id}/change/")
    # then its result lists the artifact with its size and type
    artifacts = page.locator("#result-artifacts")
    expect(artifacts).to_contain_text("exports/revenue.csv")
    expect(artifacts).to_contain_text("text/csv")
    page.screenshot(path=str(artifacts_dir / "admin-run-artifacts.png"), full_page=True)

    # when she downloads it, she gets the run's bytes under the file's name
    with page.expect_download() as started:
        artifacts.get_by_role("link", name="exports/revenue.csv").click()
    download = started.value
    assert download.suggested_filename == "revenue.csv"
    assert Path(download.path()).read_text() == CSV

    # and the artifacts list in the admin shows it with its run
    page.goto("/admin/runs/artifact/")
    row = page.locator("#result_list tbody tr", has_text="exports/revenue.csv")
    expect(row).to_contain_text(run_id)
    page.screenshot(path=str(artifacts_dir / "admin-artifacts-list.png"), full_page=True)
