"""GET /api/v1/audit/ (the owner's or the agent's own tool-call audit, filtered, paginated) and
GET /api/v1/tools/manifests/ (generated from the manifests)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from runs.audit import CallFacts, tool_audit_row
from skills.toolpolicy.manifests import MANIFESTS, TOOL_IDS
from tests.skills.admin_support import make_user

from .conftest import bearer

pytestmark = pytest.mark.django_db


def _row(agent, *, tool="read", ok=True, skill="weather", ago=timedelta(0)):
    row = tool_audit_row(
        CallFacts(
            run_id="r1",
            attempt=1,
            iteration=1,
            call_index=0,
            agent_id=agent.pk,
            agent_name=agent.name,
            skill_name=skill,
            skill_version_hash="",
            trust_level="supervised_auto",
            actor="worker",
        ),
        tool=tool,
        arguments={"path": "a"},
        result={"ok": ok, "output": "x", "error_code": None if ok else "not_found"},
        decision="trust_level",
        approval_required=False,
    )
    row.run_id = None
    row.created_at = timezone.now() - ago
    row.save(force_insert=True)
    return row


def test_an_agent_sees_only_its_own_rows_newest_first(world):
    mine = [_row(world.alpha, ago=timedelta(minutes=m)) for m in (3, 2, 1)]
    _row(world.bravo)

    body = bearer(world.alpha_token).get("/api/v1/audit/").json()

    assert [r["id"] for r in body["results"]] == [r.pk for r in reversed(mine)]
    assert {r["agent_name"] for r in body["results"]} == {"alpha"}


def test_filters_by_skill_tool_outcome_and_date(world):
    client = bearer(world.alpha_token)
    ok_read = _row(world.alpha, tool="read", ago=timedelta(days=2))
    failed_read = _row(world.alpha, tool="read", ok=False)
    other_skill = _row(world.alpha, tool="write", skill="mail")

    def ids(query: str) -> list[int]:
        response = client.get(f"/api/v1/audit/?{query}")
        assert response.status_code == 200, response.content
        return [r["id"] for r in response.json()["results"]]

    since = (timezone.now() - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert ids("tool=read") == [failed_read.pk, ok_read.pk]
    assert ids("outcome=failed") == [failed_read.pk]
    assert ids("skill=mail") == [other_skill.pk]
    assert ids(f"since={since}") == [other_skill.pk, failed_read.pk]
    assert ids(f"until={since}") == [ok_read.pk]


def test_pages_follow_the_cursor(world):
    rows = [_row(world.alpha) for _ in range(5)]
    client = bearer(world.alpha_token)

    first = client.get("/api/v1/audit/?page_size=2").json()
    second = client.get(first["next"]).json()

    assert [r["id"] for r in first["results"] + second["results"]] == [
        r.pk for r in reversed(rows)
    ][:4]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("outcome=maybe", "outcome"),
        ("tool=teleport", "tool"),
        ("since=yesterday", "since"),
        ("cursor=zz", "cursor"),
    ],
)
def test_bad_filters_are_400_naming_the_parameter(world, query, field):
    response = bearer(world.alpha_token).get(f"/api/v1/audit/?{query}")

    assert response.status_code == 400
    assert field in str(response.json()["error"]["details"])


def test_a_human_sees_the_rows_of_an_agent_they_own_and_not_of_another(world):
    _row(world.bravo)
    client = Client()
    client.force_login(world.bob)

    own = client.get("/api/v1/audit/?agent=bravo")
    other = client.get("/api/v1/audit/?agent=alpha")

    assert own.status_code == 200 and len(own.json()["results"]) == 1
    assert other.status_code == 404


def test_tool_manifests_are_listed_as_the_manifests_say(world):
    body = bearer(world.alpha_token).get("/api/v1/tools/manifests/").json()

    assert body == [m.to_dict() for m in MANIFESTS.values()]


def test_the_openapi_description_is_generated_from_the_manifests(world):
    client = Client()
    client.force_login(make_user("root", superuser=True))

    schema = client.get(reverse("api-schema"), {"format": "json"}).json()

    def resolved(node: dict) -> dict:
        ref = node.get("$ref")
        return schema["components"]["schemas"][ref.rsplit("/", 1)[1]] if ref else node

    manifest = schema["components"]["schemas"]["ToolManifest"]["properties"]
    assert resolved(manifest["id"])["enum"] == list(TOOL_IDS)
    audit_tool = next(
        p for p in schema["paths"]["/api/v1/audit/"]["get"]["parameters"] if p["name"] == "tool"
    )
    assert sorted(resolved(audit_tool["schema"])["enum"]) == sorted(TOOL_IDS)  # spectacular sorts
