"""The admin speaks of Motor Cortex: its header, a real "View site", what awaits a human on the
home page, and list tables that fit a 1280 px screen."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client
from playwright.sync_api import Page, expect

from cognition.models import DeliveryState, DeliveryTarget, SignalDelivery
from cognition.services import credential_set, personal_token_create
from runs.models import MotorRun, RunStatus, SignalKind
from runs.outbox import signal_emit
from runs.services import run_start
from skills.imports import skill_import_pasted
from skills.services import Actor
from tests.runs.helpers import new_workspace
from tests.skills.admin_support import PASSWORD, make_user

from .conftest import World, skill_md
from .core_support import _clean_mutex_keys, workspaces  # noqa: F401 - fixtures

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("workspaces")]


def _waiting_work(world: World) -> None:
    """Two skills to review (one of them rejected, which waits for a new version instead), a
    run waiting for an answer and one failed delivery."""
    skill_import_pasted(text=skill_md("mailer"), actor=Actor.system("run"), agent=world.alpha)
    skill_import_pasted(text=skill_md("invoicer"), actor=Actor.system("run"), agent=world.alpha)
    skill_import_pasted(text=skill_md("scraper"), actor=Actor.system("run"), agent=world.bravo)
    from skills.models import Policy
    from skills.reviewing import policy_reject, policy_review

    scraper = policy_review(
        policy=Policy.objects.get(skill__name="scraper"), actor=Actor.system("review")
    )
    policy_reject(policy=scraper, note="too broad", actor=Actor.from_user(world.bravo.owner))
    run_id = run_start(
        agent_id=world.alpha.pk, task="Export the data", actor="test", workspace=new_workspace()
    )["run_id"]
    MotorRun.objects.filter(pk=run_id).update(status=RunStatus.AWAITING_INPUT)
    signal = signal_emit(
        agent_id=world.alpha.pk, kind=SignalKind.MOTOR_RESULT, payload={"status": "completed"}
    )
    SignalDelivery.objects.create(
        signal=signal,
        agent=world.alpha,
        target=DeliveryTarget.WEBHOOK,
        state=DeliveryState.FAILED,
        attempts=8,
    )


def _panel(html: str) -> str:
    start = html.index('id="awaiting-human"')
    return html[start : html.index("</table>", start)]


def test_the_home_page_lists_what_awaits_a_human_with_counts_and_links(world: World) -> None:
    # given waiting work and a superuser
    _waiting_work(world)
    root = make_user("root", superuser=True)
    client = Client()
    client.force_login(root)
    # when the admin's home page is opened
    html = client.get("/admin/").content.decode()
    # then it says Motor Cortex and lists each kind of waiting work with its count and list
    assert "<title>Console | Motor Cortex admin</title>" in html
    assert '<div id="site-name"><a href="/admin/">Motor Cortex</a></div>' in html
    assert "Django administration" not in html
    panel = _panel(html)
    for key, label, count, url in (
        (
            "skills_to_review",
            "Skills to review",
            2,
            "/admin/skills/policy/?status=to_review",
        ),
        (
            "approvals_pending",
            "Runs waiting for an approval",
            0,
            "/admin/runs/motorrun/?status__exact=awaiting_approval",
        ),
        (
            "runs_awaiting_input",
            "Runs waiting for an answer",
            1,
            "/admin/runs/motorrun/?status__exact=awaiting_input",
        ),
        (
            "failed_deliveries",
            "Failed signal deliveries",
            1,
            "/admin/cognition/signaldelivery/?state__exact=failed",
        ),
    ):
        row = panel[panel.index(f'id="awaiting-{key}"') :]
        row = row[: row.index("</tr>")]
        assert f'<a href="{url}">{label}</a>' in row
        assert f'<a href="{url}">{count}</a>' in row
        # and each link opens a list that answers
        assert client.get(url).status_code == 200


def test_the_skills_link_lists_exactly_the_policies_it_counts(world: World) -> None:
    # given two skills to review and a rejected one (which waits for a new version)
    _waiting_work(world)
    root = make_user("root", superuser=True)
    client = Client()
    client.force_login(root)
    # when the home page's "Skills to review" link is followed
    row = _panel(client.get("/admin/").content.decode()).split('id="awaiting-skills_to_review"')[1]
    url = re.search(r'<a href="([^"]+)">2</a>', row)[1].replace("&amp;", "&")
    listing = client.get(url)
    # then the list holds the two it counted, not the rejected one
    rows = listing.context["cl"].result_list
    assert sorted(p.skill.name for p in rows) == ["invoicer", "mailer"]
    # and its status filter shows that choice as the selected one, not "All"
    html = listing.content.decode()
    assert re.search(r'<li class="selected">\s*<a href="[^"]*">To review</a>', html)
    assert not re.search(
        r'<li class="selected">\s*<a href="[^"]*">All</a></li>\s*<li>\s*<a href="[^"]*">To review',
        html,
    )


def test_a_user_sees_only_the_waiting_work_they_may_open(world: World) -> None:
    # given waiting work and a staff user who may view runs only
    _waiting_work(world)
    viewer = make_user("vera", perms=["runs.view_motorrun"])
    client = Client()
    client.force_login(viewer)
    # then the panel lists the runs and nothing else
    panel = _panel(client.get("/admin/").content.decode())
    assert 'id="awaiting-runs_awaiting_input"' in panel
    assert "awaiting-skills_to_review" not in panel
    assert "awaiting-failed_deliveries" not in panel


def test_view_site_opens_a_landing_page_with_the_chat_admin_and_docs() -> None:
    # given a staff user in the admin
    root = make_user("root", superuser=True)
    client = Client()
    client.force_login(root)
    html = client.get("/admin/").content.decode()
    # then "View site" goes to / and that page answers with links to the real pages
    assert '<a href="/">View site</a>' in html
    home = client.get("/")
    assert home.status_code == 200
    body = home.content.decode()
    for link in ('href="/chat/"', 'href="/admin/"', 'href="/api/docs/"'):
        assert link in body
    for url in ("/chat/", "/admin/", "/api/docs/"):
        assert client.get(url).status_code == 200


LISTS = [
    ("agents", "/admin/cognition/agent/"),
    ("skills", "/admin/skills/skill/"),
    ("policies", "/admin/skills/policy/"),
    ("runs", "/admin/runs/motorrun/"),
    ("signal-deliveries", "/admin/cognition/signaldelivery/"),
    ("policy-audit", "/admin/skills/policyauditevent/"),
    ("personal-tokens", "/admin/cognition/personaltoken/"),
    ("credentials", "/admin/cognition/credential/"),
]


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_home_landing_and_list_tables_at_1280_px(
    page: Page, admin_login, artifacts_dir: Path, world: World
) -> None:
    # given waiting work, a credential, a personal token and a superuser in a 1280 px browser
    _waiting_work(world)
    root = make_user("root", superuser=True)
    credential_set(agent=world.alpha, name="MAILER_API_KEY", value="k-123", actor=root)
    personal_token_create(user=root, name="laptop", actor=root)
    admin_login("root", PASSWORD)
    # when the home page is opened, it shows the panel under the Motor Cortex header
    page.goto("/admin/")
    expect(page.locator("#site-name")).to_have_text("Motor Cortex")
    expect(page.locator("#awaiting-runs_awaiting_input .mc-awaiting-count")).to_have_text("1")
    page.screenshot(path=str(artifacts_dir / "admin-home.png"), full_page=True)
    # and "View site" opens the landing page
    page.click("text=View site")
    expect(page.locator("h1")).to_have_text("Motor Cortex")
    page.screenshot(path=str(artifacts_dir / "landing.png"), full_page=True)
    # then every list table fits the window: neither the page nor the table scrolls sideways
    too_wide: dict[str, tuple[int, int, int]] = {}
    for name, url in LISTS:
        page.goto(url)
        expect(page.locator("#result_list tbody tr").first).to_be_visible()
        page.screenshot(path=str(artifacts_dir / f"admin-list-{name}-1280.png"), full_page=True)
        page_width = page.evaluate("document.documentElement.scrollWidth")
        table, shown = page.evaluate(
            "() => { const t = document.querySelector('#result_list');"
            " return [t.scrollWidth, t.parentElement.clientWidth]; }"
        )
        if page_width > 1280 or table > shown:
            too_wide[url] = (page_width, table, shown)
    assert too_wide == {}
