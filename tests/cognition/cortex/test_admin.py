"""An agent's cortex in the admin: regions, candidates with weights and reflex badges, lessons;
the reset. Runs on both databases."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from cognition.cortex import record_acquired
from cognition.models import (
    Cortex,
    CortexCandidate,
    CortexFollowUp,
    CortexLesson,
    CortexOutcome,
    CortexRegion,
)
from skills.models import Policy
from tests.skills.admin_support import APPROVER_PERMS, make_agent, make_user

from .support import acquired_skill

pytestmark = pytest.mark.django_db

VIEW = ["cognition.view_cortex"]
CHANGE = ["cognition.view_cortex", "cognition.change_cortex"]


@pytest.fixture
def cortex(tmp_path):
    olivia = make_user("olivia", perms=APPROVER_PERMS)
    agent = make_agent("scout", owner=olivia)
    policy = acquired_skill(tmp_path / "src", agent=agent, approver=olivia)
    record_acquired(
        agent=agent,
        task="Look up Alice's Q3 sales report",
        skill_version=policy.skill.current_version,
        source="local registry",
    )
    CortexCandidate.objects.update(weight=0.95, consecutive_successes=5, successes=5, reflex=True)
    cortex = Cortex.objects.get()
    CortexLesson.objects.create(
        cortex=cortex, kind="env_ready", region=CortexRegion.objects.get(), key="SALES_TOKEN"
    )
    outcome = CortexOutcome.objects.create(
        cortex=cortex,
        key="signal:1",
        skill_name="sales-report",
        success=True,
        weight_before=0.5,
        weight_after=0.575,
    )
    CortexFollowUp.objects.create(
        cortex=cortex, outcome=outcome, action="release", skill_name="sales-report"
    )
    return cortex


def _client(perms: list[str]) -> Client:
    client = Client()
    client.force_login(make_user("staff", perms=perms))
    return client


def test_the_cortex_page_shows_regions_candidates_badges_and_lessons(cortex):
    page = _client(VIEW).get(reverse("admin:cognition_cortex_change", args=[cortex.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert "<h3>sales-report</h3>" in html
    assert "<code>query</code> <code>sales</code> <code>report</code>" in html
    assert "<td>0.950</td>" in html
    assert '<span class="cortex-badge cortex-reflex">⚡ reflex</span>' in html
    assert "<td>local registry</td>" in html
    assert "<td>SALES_TOKEN</td>" in html
    assert "0.500 → 0.575" in html
    assert "<td>release: pending, due " in html
    assert "Reset this cortex" not in html  # view only


def test_the_list_counts_and_searches(cortex):
    page = _client(VIEW).get(reverse("admin:cognition_cortex_changelist") + "?q=scout")
    assert page.status_code == 200
    assert page.context["cl"].result_count == 1


def test_reset_forgets_what_was_learned_and_keeps_the_ledger_and_the_skill(cortex):
    client = _client(CHANGE)
    page = client.get(reverse("admin:cognition_cortex_change", args=[cortex.pk]))
    assert "Reset this cortex" in page.content.decode()

    response = client.post(reverse("admin:cognition_cortex_reset", args=[cortex.pk]))

    assert response.status_code == 302
    assert (CortexRegion.objects.count(), CortexCandidate.objects.count()) == (0, 0)
    assert CortexLesson.objects.count() == 0
    assert CortexOutcome.objects.count() == 1
    cortex.refresh_from_db()
    assert cortex.rebuilt_reason == "reset by admin:staff"
    assert Policy.objects.filter(skill__name="sales-report").count() == 1


def test_reset_needs_the_change_permission_and_a_post(cortex):
    viewer = _client(VIEW)
    url = reverse("admin:cognition_cortex_reset", args=[cortex.pk])
    assert viewer.post(url).status_code == 403
    assert _client_get_status(url) == 405
    assert CortexRegion.objects.count() == 1
    assert CortexLesson.objects.count() == 1


def _client_get_status(url: str) -> int:
    client = Client()
    client.force_login(make_user("other", perms=CHANGE))
    return client.get(url).status_code
