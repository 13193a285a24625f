"""The flows' admin console: read-only pages with the audit trail, cancel through the service."""

from __future__ import annotations

import pytest
from django.contrib.admin.utils import quote
from django.test import Client
from django.urls import reverse

from forge.flow_services import flow_start
from forge.models import FlowEvent, FlowState, ForgeFlow
from tests.skills.admin_support import make_user

pytestmark = pytest.mark.django_db


def test_a_flow_page_shows_its_trail_and_the_cancel_action_ends_it(agent):
    # given a flow and a superuser
    flow = flow_start(agent=agent, request="check uptime", actor="t")
    client = Client()
    client.force_login(make_user("root", superuser=True))
    # when the admin opens it
    page = client.get(reverse("admin:forge_forgeflow_change", args=[quote(flow.id)]))
    # then it shows the flow and its events, and nothing can be edited
    assert page.status_code == 200
    body = page.content.decode()
    assert "check uptime" in body and "create: check uptime" in body
    assert 'name="request"' not in body and 'name="state"' not in body
    # and the cancel action ends it through the service, audited
    response = client.post(
        reverse("admin:forge_forgeflow_changelist"),
        {"action": "cancel_flows", "_selected_action": [flow.id]},
    )
    assert response.status_code == 302
    flow.refresh_from_db()
    assert (flow.state, flow.error) == (FlowState.FAILED, "cancelled in the admin")
    last = FlowEvent.objects.filter(flow=flow).order_by("-id").first()
    assert (last.from_state, last.to_state, last.actor) == ("designing", "failed", "admin:root")
    assert ForgeFlow.objects.count() == 1
