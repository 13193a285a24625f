"""The first hour of a newcomer, in a real headless Chromium against a live server and the e2e
worker: what `bin/dev` prepares (bootstrap_dev), the landing page, the admin login and home page,
an agent token issued in the admin, the API docs, a run started with that token over HTTP, the
run's console answering its question, the skill it wrote reviewed and approved in the admin, and
the chat. Each page is saved as a screenshot (first_hour_NN_*.png) in the test artefacts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.core.management import call_command
from playwright.sync_api import ConsoleMessage, Page, expect
from pytest_django.live_server_helper import LiveServer

from cognition.models import Agent, Conversation
from runs.models import MotorRun, RunStatus
from skills.models import Policy, PolicyAuditEvent, PolicyStatus
from tests.e2e.conftest import Stack
from tests.fixtures.llm import reply_text, reply_tools, tool_call

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SKILL_MD = (
    "---\nname: weather-report\ndescription: Report the weather for a city from wttr.in.\n---\n"
    "# Weather report\n\nFetch https://wttr.in/{city}?format=3 and print the line.\n"
)
EXAMPLE_SKILLS = ["csv-summary", "exchange-rates", "github-issues"]


@pytest.fixture
def console_errors(page: Page) -> Iterator[list[str]]:
    """Every error the browser console reports (failed loads included), checked at the end."""
    errors: list[str] = []

    def note(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(f"{message.text} ({page.url})")

    page.on("console", note)
    yield errors


def _shot(page: Page, artifacts: Path, name: str) -> None:
    page.screenshot(path=str(artifacts / f"first_hour_{name}.png"), full_page=True)


def _awaiting(page: Page) -> dict[str, str]:
    rows = page.locator("#awaiting-human tbody tr")
    return {
        (rows.nth(i).get_attribute("id") or ""): rows.nth(i).locator("td").inner_text()
        for i in range(rows.count())
    }


def test_the_first_hour_from_the_readme_works_in_the_browser(
    stack: Stack,
    live_server: LiveServer,
    page: Page,
    console_errors: list[str],
    artifacts_dir: Path,
    settings,
    tmp_path: Path,
) -> None:
    # given what bin/dev prepares on a fresh clone: the admin login, `assistant`, the examples
    settings.MOTOR_DATA_DIR = tmp_path
    call_command("bootstrap_dev", verbosity=0)
    username, password = (tmp_path / "admin-login.txt").read_text().split("\n")[:2]
    assert username == "admin"
    agent = Agent.objects.get(name="assistant")

    # when the newcomer opens the landing page
    page.goto("/")
    # then it names the product and links the chat, the admin and the API docs
    expect(page).to_have_title("Motor Cortex")
    expect(page.locator("h1")).to_have_text("Motor Cortex")
    assert page.locator("#links a[id^=link-]").all_inner_texts() == [
        "Talk to your agent",
        "Admin console",
        "API docs",
    ]
    _shot(page, artifacts_dir, "01_landing")

    # when they follow "Admin console" and log in with the printed login
    page.click("#link-admin")
    expect(page).to_have_url(f"{live_server.url}/admin/login/?next=/admin/")
    expect(page.locator("#site-name")).to_have_text("Motor Cortex")
    _shot(page, artifacts_dir, "02_admin_login")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")

    # then the home page lists what waits for them: the three example skills, nothing else
    expect(page).to_have_url(f"{live_server.url}/admin/")
    expect(page.locator("#awaiting-human h2")).to_have_text("Waiting for you")
    assert _awaiting(page) == {
        "awaiting-skills_to_review": "3",
        "awaiting-approvals_pending": "0",
        "awaiting-runs_awaiting_input": "0",
        "awaiting-failed_deliveries": "0",
    }
    _shot(page, artifacts_dir, "03_admin_home")

    # when they issue an API token for `assistant` with the agents list's action
    page.goto("/admin/cognition/agent/")
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    page.locator("#result_list tbody tr", has_text="assistant").locator(".action-select").check()
    page.select_option(
        "select[name=action]", label="Issue a new API token (shown once; replaces the old one)"
    )
    page.click("button[name=index]")

    # then the token is shown once, for that agent
    expect(page.locator("#content h1")).to_have_text("New API token")
    token_cell = page.locator("#content table tbody tr", has_text="assistant").locator("td").last
    token = token_cell.inner_text().strip()
    assert token.startswith("mc_")
    _shot(page, artifacts_dir, "04_token_issued")

    # when they open the API docs from the landing page
    page.goto("/")
    page.click("#link-api-docs")
    # then Swagger UI shows the API and its runs endpoint
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Motor Cortex API")
    expect(page.locator(".opblock-post", has_text="/api/v1/runs/").first).to_be_visible()
    page.screenshot(path=str(artifacts_dir / "first_hour_05_api_docs.png"))

    # when they start a run with the token, as the README's curl example does
    stack.motor.add(
        reply_tools(tool_call("ask_user", {"question": "Which city?"}), text="Asking."),
        reply_tools(tool_call("write", {"path": "SKILL.md", "content": SKILL_MD})),
        reply_text("Created the weather-report skill."),
    )
    task = "Write a skill that reports the weather"
    response = httpx.post(
        f"{live_server.url}/api/v1/runs/",
        headers={"Authorization": f"Bearer {token}"},
        json={"task": task, "tools": ["write"]},
        timeout=30,
    )
    assert response.status_code == 201, response.text
    run_id = response.json()["run_id"]
    assert response.json() == {"run_id": run_id, "status": "created"}
    stack.wait_for(
        lambda: MotorRun.objects.filter(pk=run_id, status=RunStatus.AWAITING_INPUT).exists(),
        "the run's question",
    )

    # then the admin's home page counts one run waiting for an answer, and its link lists it
    page.goto("/admin/")
    assert _awaiting(page)["awaiting-runs_awaiting_input"] == "1"
    page.click("#awaiting-runs_awaiting_input th a")
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first.locator(".mc-badge--awaiting_input")).to_have_text("Awaiting input")
    expect(rows.first).to_contain_text(task)
    _shot(page, artifacts_dir, "06_runs_waiting")

    # when they open the run's console
    rows.first.get_by_role("link", name=run_id).click()
    # then it shows the grant and the question
    expect(page.locator("#run-title")).to_contain_text(f"Run {run_id}")
    expect(page.locator("#question-text")).to_have_text("Which city?")
    _shot(page, artifacts_dir, "07_run_question")

    # when they answer it
    page.fill("#id_answer", "Berlin")
    page.click("#btn-answer")
    # then the console follows the run to its end without a reload
    expect(page.locator(".messagelist")).to_contain_text(
        f"Answer sent. Run {run_id}: awaiting_input → running."
    )
    expect(page.locator("#run-status .mc-badge--completed")).to_have_text(
        "Completed", timeout=90_000
    )
    expect(page.locator("#result-summary")).to_have_text("Created the weather-report skill.")
    expect(page.locator("#trace")).to_contain_text("write")
    # and it names the skill the run wrote, waiting for review, with a link to the review
    expect(page.locator("#result-skills li")).to_have_text(
        ["created weather-report (pending review)"]
    )
    _shot(page, artifacts_dir, "08_run_completed")

    # and the skill it wrote waits for review, with the three examples
    policy = stack.wait_for(
        lambda: Policy.objects.filter(skill__name="weather-report", agent=agent).first(),
        "the extracted skill's policy",
    )
    assert policy.status == PolicyStatus.PENDING_REVIEW
    page.goto("/admin/")
    assert _awaiting(page)["awaiting-skills_to_review"] == "4"
    assert _awaiting(page)["awaiting-runs_awaiting_input"] == "0"
    page.click("#awaiting-skills_to_review th a")
    expect(page.locator("#result_list tbody tr")).to_have_count(4)
    assert sorted(page.locator("#result_list tbody th a").all_inner_texts()) == sorted(
        [*EXAMPLE_SKILLS, "weather-report"]
    )
    expect(page.locator("#changelist-filter li.selected", has_text="To review")).to_have_count(1)
    _shot(page, artifacts_dir, "09_skills_to_review")

    # when they open its review
    page.locator("#result_list a", has_text="weather-report").click()
    # then the review shows the referenced domain, not yet allowed, and where the skill came from
    expect(page.locator("#review-title")).to_have_text("Review: weather-report for agent assistant")
    expect(page.locator("#content")).to_contain_text("Referenced but not allowed: wttr.in")
    expect(page.locator("#content")).to_contain_text(f"Extracted from run {run_id}")
    _shot(page, artifacts_dir, "10_skill_review")

    # and the form is pre-filled with what approving would grant (one approval service decides)
    assert sorted(
        page.locator("input[name=tools]:checked").evaluate_all("els => els.map(e => e.value)")
    ) == ["fetch", "list", "read", "write"]
    # when they allow the domain and the fetch tool, save, and approve
    page.fill("textarea[name=allowed_domains]", "wttr.in")
    page.check("input[name=tools][value=fetch]")
    page.click("#btn-save")
    expect(page.locator(".messagelist")).to_contain_text("Policy saved")
    page.click("#btn-approve")

    # then the skill is approved by admin for its current content, with the whole audit trail
    expect(page.locator(".messagelist")).to_contain_text("Approved weather-report for assistant")
    _shot(page, artifacts_dir, "11_skill_approved")
    policy.refresh_from_db()
    assert (policy.status, policy.allowed_domains, policy.tools, policy.approved_by.username) == (
        PolicyStatus.APPROVED,
        ["wttr.in"],
        ["fetch", "list", "read", "write"],
        "admin",
    )
    assert policy.approved_content_hash == policy.skill.current_version.content_hash
    assert list(
        PolicyAuditEvent.objects.filter(policy=policy).order_by("id").values_list("action")
    ) == [("policy_created",), ("reviewed",), ("policy_updated",), ("approved",)]
    page.goto("/admin/")
    assert _awaiting(page)["awaiting-skills_to_review"] == "3"

    # when they open the chat from the landing page in a fresh browser (its own login)
    chat = page.context.browser.new_page(base_url=live_server.url, viewport=page.viewport_size)
    chat.on("console", lambda m: m.type == "error" and console_errors.append(m.text))
    chat.goto("/")
    chat.click("#link-chat")
    expect(chat).to_have_url(f"{live_server.url}/chat/login/?next=%2Fchat%2F")
    _shot(chat, artifacts_dir, "12_chat_login")
    chat.fill("#id_username", username)
    chat.fill("#id_password", password)
    chat.click("[type=submit]")
    expect(chat).to_have_url(f"{live_server.url}/chat/")
    _shot(chat, artifacts_dir, "13_chat_index")

    # and start a conversation with assistant and write to it
    chat.click("#start-conversation")
    conversation = Conversation.objects.get(agent=agent)
    expect(chat).to_have_url(f"{live_server.url}/chat/{conversation.pk}/")
    stack.fast.add(reply_text("Hello! I can run tasks in a sandbox and learn skills."))
    chat.fill("#text", "Hello, what can you do?")
    chat.click("#send-button")

    # then the reply appears under their message, and the run panel is empty
    messages = chat.locator("#messages .bubble")
    expect(messages).to_have_count(2)
    expect(messages.nth(0)).to_contain_text("Hello, what can you do?")
    expect(messages.nth(1)).to_contain_text("Hello! I can run tasks in a sandbox and learn skills.")
    expect(chat.locator("h1")).to_contain_text("with assistant")
    _shot(chat, artifacts_dir, "14_chat_reply")
    chat.close()

    assert stack.scripts_spent() == {"fast": 0, "smart": 0, "motor": 0}
    # no page of the walk had a failed load or a script error
    assert console_errors == []
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
