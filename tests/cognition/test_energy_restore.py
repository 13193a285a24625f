"""Exhausted agents: the refusal says when energy will suffice, and staff can restore it (admin
action and API), recorded in the agent's history."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from cognition.energy import energy_check
from cognition.errors import EnergyTooLow
from cognition.models import Agent
from tests.skills.admin_support import (
    fast_password_hashing,  # noqa: F401 - autouse fixture
    make_user,
)

from .conftest import World, bearer

pytestmark = pytest.mark.django_db


def _set(agent: Agent, level: float) -> Agent:
    # Without a last drain time no regeneration is added on read, so the level is exact however
    # long the test takes (the refusal's waiting time is then exact too).
    Agent.objects.filter(pk=agent.pk).update(energy=level, last_energy_at=None)
    return Agent.objects.get(pk=agent.pk)


def _state(agent: Agent) -> tuple[object, ...]:
    return (
        Agent.objects.values_list("energy", "last_energy_at").get(pk=agent.pk),
        LogEntry.objects.count(),
    )


# --- the refusal --------------------------------------------------------------------------


def test_the_refusal_says_when_regeneration_lets_the_run_start(world: World, settings) -> None:
    # given an agent at 0.25 that regains 6 per hour (0.05 short of an agentic run's 0.3)
    settings.MOTOR_ENERGY_REGEN_PER_HOUR = 6.0
    agent = _set(world.alpha, 0.25)
    before = timezone.now()
    # when an agentic run is checked
    with pytest.raises(EnergyTooLow) as caught:
        energy_check(agent=agent, mode="agentic", tools=["code"])
    # then the refusal names the run's need, the time it will suffice and how staff restore it
    error = caught.value
    at = datetime.fromisoformat(error.details["sufficient_at"])
    assert error.details["required"] == 0.3
    assert error.details["retry_after_s"] == 30
    assert before + timedelta(seconds=29) <= at <= timezone.now() + timedelta(seconds=31)
    assert str(error) == (
        f"Agent 'alpha' is at energy {error.details['energy']:.3f} (oneshot_only), too low for "
        f"an agentic run (needs 0.3). At 6 per hour it will suffice at "
        f"{at:%Y-%m-%d %H:%M:%S} UTC (in 30 s). A staff user can restore it (admin: Agents, "
        f'"Restore energy"; or POST /api/v1/agents/{agent.pk}/energy/restore/).'
    )


def test_the_browser_needs_more_than_half_and_a_oneshot_reads_a_oneshot(
    world: World, settings
) -> None:
    settings.MOTOR_ENERGY_REGEN_PER_HOUR = 0.1
    agent = _set(world.alpha, 0.5)
    with pytest.raises(EnergyTooLow) as browser:
        energy_check(agent=agent, mode="agentic", tools=["browser"])
    assert "too low for an agentic run with the browser (needs more than 0.5)" in str(browser.value)
    # one second past the boundary, since exactly 0.5 is not enough
    assert browser.value.details["retry_after_s"] == 1
    agent = _set(world.alpha, 0.4)
    with pytest.raises(EnergyTooLow) as below:
        energy_check(agent=agent, mode="agentic", tools=["browser"])
    # 0.1 at 0.1 per hour reaches 0.5 in an hour; one second later it is more than 0.5
    assert below.value.details["retry_after_s"] == 3601
    agent = _set(world.alpha, 0.0)
    with pytest.raises(EnergyTooLow) as oneshot:
        energy_check(agent=agent, mode="oneshot")
    assert "too low for a oneshot run (needs 0.05)" in str(oneshot.value)
    assert "in 30 min" in str(oneshot.value)


def test_without_regeneration_the_refusal_says_it_never_comes_back(world: World, settings) -> None:
    settings.MOTOR_ENERGY_REGEN_PER_HOUR = 0.0
    agent = _set(world.alpha, 0.1)
    with pytest.raises(EnergyTooLow) as caught:
        energy_check(agent=agent, mode="agentic")
    assert "Energy does not regenerate here (MOTOR_ENERGY_REGEN_PER_HOUR is 0)." in str(
        caught.value
    )
    assert (caught.value.details["sufficient_at"], caught.value.details["retry_after_s"]) == (
        None,
        None,
    )


def test_a_refused_agentic_run_through_the_api_carries_the_outlook(world: World, settings) -> None:
    # given alpha exhausted for agentic runs
    settings.MOTOR_ENERGY_REGEN_PER_HOUR = 0.1
    _set(world.alpha, 0.2)
    # when it asks for an agentic run
    response = bearer(world.alpha_token).post(
        "/api/v1/runs/", {"task": "Tidy the workspace", "tools": ["read"]}, format="json"
    )
    # then it is refused with the time it may try again
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "energy_too_low"
    assert "an agentic run (needs 0.3). At 0.1 per hour it will suffice" in error["message"]
    assert error["details"]["retry_after_s"] == 3600


# --- the API ------------------------------------------------------------------------------


def test_staff_restore_an_agents_energy_with_a_personal_token(
    world: World, personal_client, settings
) -> None:
    # given an exhausted agent and a staff user allowed to change agents
    settings.MOTOR_ENERGY_REGEN_PER_HOUR = 0.0
    _set(world.bravo, 0.1)
    staff = make_user("stella", perms=["cognition.change_agent"])
    # when the staff user restores it through the API
    response = personal_client(staff).post(
        f"/api/v1/agents/{world.bravo.name}/energy/restore/", {}, format="json"
    )
    # then it is full again, the answer says from what, and the agent's history records who
    assert response.status_code == 200
    body = response.json()
    assert (body["name"], body["energy"], body["energy_band"], body["previous_energy"]) == (
        "bravo",
        1.0,
        "all",
        0.1,
    )
    assert Agent.objects.get(pk=world.bravo.pk).energy == 1.0
    entry = LogEntry.objects.get()
    assert (entry.user_id, entry.object_id, entry.action_flag, entry.change_message) == (
        staff.pk,
        str(world.bravo.pk),
        CHANGE,
        "Energy restored from 0.100 to 1.000.",
    )
    # and the agent may start an agentic run again
    assert energy_check(agent=Agent.objects.get(pk=world.bravo.pk), mode="agentic") == 1.0


def test_a_level_can_be_given(world: World, session_client, settings) -> None:
    settings.MOTOR_ENERGY_REGEN_PER_HOUR = 0.0
    _set(world.alpha, 0.0)
    root = make_user("root", superuser=True)
    response = session_client(root).post(
        f"/api/v1/agents/{world.alpha.pk}/energy/restore/", {"level": 0.6}, format="json"
    )
    assert (response.status_code, response.json()["energy"]) == (200, 0.6)


@pytest.mark.parametrize(
    ("who", "status", "code"),
    [
        ("agent token", 403, "human_required"),
        ("owner, not staff", 403, "staff_required"),
        ("staff without the permission", 403, "staff_required"),
    ],
)
def test_only_staff_with_the_permission_restore_energy(
    world: World, personal_client, settings, who: str, status: int, code: str
) -> None:
    # given an exhausted agent
    settings.MOTOR_ENERGY_REGEN_PER_HOUR = 0.0
    _set(world.bravo, 0.1)
    before = _state(world.bravo)
    client = {
        "agent token": lambda: bearer(world.bravo_token),
        "owner, not staff": lambda: personal_client(world.bob),
        "staff without the permission": lambda: personal_client(world.olivia),
    }[who]()
    # when the caller tries to restore it
    response = client.post(f"/api/v1/agents/{world.bravo.pk}/energy/restore/", {}, format="json")
    # then it is refused, naming the rule, and nothing changed
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    assert _state(world.bravo) == before


@pytest.mark.parametrize(
    ("ref", "body", "status", "code"),
    [
        ("bravo", {"level": 1.5}, 400, "invalid"),
        ("bravo", {"level": "full"}, 400, "invalid"),
        ("nobody", {}, 404, "agent_not_found"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(
    world: World, personal_client, settings, ref: str, body: dict, status: int, code: str
) -> None:
    settings.MOTOR_ENERGY_REGEN_PER_HOUR = 0.0
    _set(world.bravo, 0.1)
    before = _state(world.bravo)
    root = make_user("root", superuser=True)
    response = personal_client(root).post(
        f"/api/v1/agents/{ref}/energy/restore/", body, format="json"
    )
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    assert _state(world.bravo) == before


# --- the admin action ---------------------------------------------------------------------


def _run_action(client: Client, agent: Agent):
    return client.post(
        reverse("admin:cognition_agent_changelist"),
        {"action": "restore_energy", "_selected_action": [agent.pk]},
        follow=True,
    )


def test_the_admin_action_restores_energy_and_records_it(world: World, settings) -> None:
    # given an exhausted agent and a staff user allowed to change agents
    settings.MOTOR_ENERGY_REGEN_PER_HOUR = 0.0
    _set(world.alpha, 0.05)
    staff = make_user("stella", perms=["cognition.view_agent", "cognition.change_agent"])
    client = Client()
    client.force_login(staff)
    # when the action runs on the agent
    page = _run_action(client, world.alpha)
    # then it is full, the page says so, and the agent's history shows who restored it
    assert "Energy restored to 1.00 for: alpha" in page.content.decode()
    assert Agent.objects.get(pk=world.alpha.pk).energy == 1.0
    history = client.get(reverse("admin:cognition_agent_history", args=[world.alpha.pk]))
    assert "Energy restored from 0.050 to 1.000." in history.content.decode()
    assert LogEntry.objects.get().user_id == staff.pk


def test_staff_without_the_permission_are_not_offered_the_action(world: World, settings) -> None:
    settings.MOTOR_ENERGY_REGEN_PER_HOUR = 0.0
    _set(world.alpha, 0.05)
    before = _state(world.alpha)
    viewer = make_user("vera", perms=["cognition.view_agent"])
    client = Client()
    client.force_login(viewer)
    listing = client.get(reverse("admin:cognition_agent_changelist")).content.decode()
    assert 'value="restore_energy"' not in listing
    _run_action(client, world.alpha)
    assert _state(world.alpha) == before


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_restoring_energy_in_the_admin_in_the_browser(
    page, admin_login, artifacts_dir, world: World, settings
) -> None:
    from playwright.sync_api import expect

    from tests.skills.admin_support import PASSWORD

    # given an exhausted agent and a superuser in the admin
    settings.MOTOR_ENERGY_REGEN_PER_HOUR = 0.0
    _set(world.alpha, 0.05)
    make_user("root", superuser=True)
    admin_login("root", PASSWORD)
    # when they select the agent and run "Restore energy"
    page.goto("/admin/cognition/agent/")
    page.locator("#result_list tr", has_text="alpha").locator("input.action-select").check()
    page.select_option("select[name=action]", "restore_energy")
    page.click("button[name=index]")
    # then the page confirms it and the list shows the agent rested
    expect(page.locator(".messagelist")).to_contain_text("Energy restored to 1.00 for: alpha")
    expect(page.locator("#result_list tr", has_text="alpha")).to_contain_text("1.00 (all)")
    page.screenshot(path=str(artifacts_dir / "admin-agent-energy-restored.png"), full_page=True)
    assert Agent.objects.get(pk=world.alpha.pk).energy == 1.0
