"""Staff disable a skill for one agent without deleting it: runs of it are refused at core.act
(naming it), everything else about the policy stays, and enabling it restores the approval."""

# ruff: noqa: F811 - pytest fixtures imported from core_support are parameters here
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from cognition.core_act import core_act
from cognition.principals import Principal
from cognition.services import credential_set
from skills.disabling import policy_disable, policy_enable
from skills.errors import ApprovalPermissionDenied, PolicyTransitionNotAllowed, SkillDisabled
from skills.models import Policy, PolicyAuditEvent, PolicyStatus, Skill
from skills.services import Actor

from .conftest import World, bearer
from .core_support import (  # noqa: F401 - fixtures
    _clean_mutex_keys,
    run_count,
    skill_in_status,
    workspace_entries,
    workspaces,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def approved(world: World, workspaces, tmp_path) -> Policy:
    policy = skill_in_status(
        tmp_path / "src", agent=world.alpha, approver=world.olivia, status="approved"
    )
    credential_set(agent=world.alpha, name="WEATHER_TOKEN", value="tok-12345678", actor="test")
    return policy


def _staff(world: World) -> Actor:
    return Actor(user=world.olivia, label="admin:olivia")


def _act(world: World):
    return core_act(
        principal=Principal.for_agent(world.alpha),
        agent=world.alpha,
        mode="agentic",
        task="Report the weather",
        skill="weather-report",
        trigger="api",
    )


def _energy(world: World) -> float:
    world.alpha.refresh_from_db()
    return world.alpha.energy


def test_a_disabled_skill_is_refused_naming_it_and_enabling_restores_it(
    world, approved, workspaces
):
    # given staff disabled the approved skill for alpha
    policy_disable(policy=approved, actor=_staff(world), reason="provider outage")
    approved.refresh_from_db()
    assert approved.disabled_at is not None and approved.disabled_by == world.olivia
    # then the skill and the approval are kept
    assert (approved.status, Skill.objects.filter(name="weather-report").exists()) == (
        PolicyStatus.APPROVED,
        True,
    )
    energy = _energy(world)
    # when the agent starts it: refused, naming skill, agent and reason; nothing was created
    with pytest.raises(SkillDisabled) as refused:
        _act(world)
    assert refused.value.message == (
        "Skill 'weather-report' is disabled for agent 'alpha' (provider outage); staff enable "
        "it again in the admin before it can run."
    )
    assert refused.value.details == {"name": "weather-report", "agent": "alpha"}
    assert (run_count(), workspace_entries(workspaces), _energy(world)) == (0, [], energy)
    # and through the API it is a 409 with that code and message
    response = bearer(world.alpha_token).post(
        "/api/v1/runs/", {"task": "Report the weather", "skill": "weather-report"}, format="json"
    )
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "skill_disabled"
    assert run_count() == 0
    # when staff enable it again, the same call starts a run with the approved policy
    policy_enable(policy=approved, actor=_staff(world))
    result = _act(world)
    assert result["status"] == "created" and run_count() == 1
    # and both changes are in the policy's audit trail
    events = list(
        PolicyAuditEvent.objects.filter(
            policy=approved, reason__in=["disabled: provider outage", "enabled again"]
        )
        .order_by("id")
        .values_list("action", "actor_label", "changes")
    )
    assert events == [
        ("policy_updated", "admin:olivia", {"disabled": {"old": False, "new": True}}),
        (
            "policy_updated",
            "admin:olivia",
            {
                "disabled": {"old": True, "new": False},
                "disabled_reason": {"old": "provider outage", "new": ""},
            },
        ),
    ]


def test_only_an_approver_may_disable_and_nothing_changes_otherwise(world, approved):
    audit_rows = PolicyAuditEvent.objects.count()
    with pytest.raises(ApprovalPermissionDenied):
        policy_disable(policy=approved, actor=Actor(user=world.bob, label="admin:bob"))
    with pytest.raises(ApprovalPermissionDenied):
        policy_disable(policy=approved, actor=Actor.system("agent"))
    approved.refresh_from_db()
    assert approved.disabled_at is None
    assert PolicyAuditEvent.objects.count() == audit_rows


def test_disabling_twice_or_enabling_an_enabled_skill_is_refused_naming_why(world, approved):
    with pytest.raises(PolicyTransitionNotAllowed, match="is not disabled for agent 'alpha'"):
        policy_enable(policy=approved, actor=_staff(world))
    policy_disable(policy=approved, actor=_staff(world))
    rows = PolicyAuditEvent.objects.count()
    with pytest.raises(PolicyTransitionNotAllowed, match="is already disabled for agent 'alpha'"):
        policy_disable(policy=approved, actor=_staff(world))
    assert PolicyAuditEvent.objects.count() == rows


def test_a_skill_review_run_may_still_read_a_disabled_skill(world, approved):
    policy_disable(policy=approved, actor=_staff(world))
    result = core_act(
        principal=Principal.for_agent(world.alpha),
        agent=world.alpha,
        mode="agentic",
        task="Review the skill",
        skill="weather-report",
        skill_review=True,
        trigger="motor_result",
    )
    assert result["status"] == "created"


def test_the_admin_actions_disable_and_enable(world, approved, client):
    user = get_user_model().objects.get(pk=world.olivia.pk)
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    client.force_login(user)
    url = reverse("admin:skills_policy_changelist")
    # when staff choose "disable" on the policy
    response = client.post(
        url, {"action": "disable_for_agent", "_selected_action": [approved.pk]}, follow=True
    )
    assert response.status_code == 200
    assert "Disabled: weather-report for alpha." in response.content.decode()
    approved.refresh_from_db()
    assert approved.disabled_at is not None and approved.status == PolicyStatus.APPROVED
    # and then "enable"
    response = client.post(
        url, {"action": "enable_for_agent", "_selected_action": [approved.pk]}, follow=True
    )
    assert "Enabled: weather-report for alpha." in response.content.decode()
    approved.refresh_from_db()
    assert approved.disabled_at is None


def test_the_skill_detail_api_shows_whether_and_why_it_is_disabled(world, approved):
    client = bearer(world.alpha_token)
    # given an enabled skill, its detail says so
    body = client.get("/api/v1/skills/weather-report/").json()
    assert (body["disabled"], body["disabled_at"], body["disabled_reason"]) == (False, None, "")
    # when staff disable it
    policy = policy_disable(policy=approved, actor=_staff(world), reason="leaks the report")
    # then the detail shows it disabled, when and why, with its status and approval unchanged
    body = client.get("/api/v1/skills/weather-report/").json()
    assert body["disabled"] is True
    assert body["disabled_at"] == policy.disabled_at.isoformat()
    assert body["disabled_reason"] == "leaks the report"
    assert body["status"] == "approved"
    assert body["approved_by"] == "olivia"


def test_the_review_page_shows_a_disabled_skill_as_disabled(world, approved, client):
    policy_disable(policy=approved, actor=_staff(world), reason="leaks the report")
    client.force_login(world.olivia)
    html = client.get(reverse("admin:skills_policy_review", args=[approved.pk])).content.decode()
    assert '<div class="mc-alert mc-alert--danger" id="policy-disabled">' in html
    assert "Disabled for alpha by olivia" in html
    assert "leaks the report" in html
    # and an enabled skill's page has no such notice
    policy_enable(policy=approved, actor=_staff(world))
    html = client.get(reverse("admin:skills_policy_review", args=[approved.pk])).content.decode()
    assert 'id="policy-disabled"' not in html
