"""Trust levels (seed 004): a new agent supervises itself, only staff with the permission change a
level, every change is recorded, and the record cannot be changed or deleted."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction
from django.test import Client
from django.urls import reverse

from cognition.models import Agent, TrustLevelChange
from cognition.trust import TrustChangeRefused, TrustLevelInvalid, agent_set_trust_level
from tests.skills.admin_support import (
    fast_password_hashing,  # noqa: F401 - autouse fixture
    make_agent,
    make_user,
)

pytestmark = pytest.mark.django_db

PERM = "cognition.change_trust_level"


def test_a_new_agent_starts_at_supervised_auto():
    agent = make_agent("scout", owner=make_user("owner"))

    assert Agent.objects.get(pk=agent.pk).trust_level == "supervised_auto"


def test_a_staff_user_with_the_permission_changes_the_level_and_it_is_recorded():
    boss = make_user("boss", perms=[PERM])
    agent = make_agent("scout", owner=boss)

    changed = agent_set_trust_level(agent=agent, level="observe", actor=boss, reason="new skill")

    assert changed.trust_level == Agent.objects.get(pk=agent.pk).trust_level == "observe"
    assert list(
        TrustLevelChange.objects.values_list(
            "agent_name", "from_level", "to_level", "actor_label", "reason"
        )
    ) == [("scout", "supervised_auto", "observe", "admin:boss", "new skill")]


@pytest.mark.parametrize(
    ("is_staff", "perms"),
    [(False, [PERM]), (True, []), (False, [])],
    ids=["not-staff-with-permission", "staff-without-permission", "neither"],
)
def test_anyone_else_is_refused_and_nothing_changes(is_staff, perms):
    user = make_user("someone", perms=perms, is_staff=is_staff)
    agent = make_agent("scout", owner=user)

    with pytest.raises(TrustChangeRefused) as caught:
        agent_set_trust_level(agent=agent, level="bounded_auto", actor=user)

    assert caught.value.code == "trust_change_refused"
    assert caught.value.details == {"rule": "staff_with_permission", "permission": PERM}
    assert Agent.objects.get(pk=agent.pk).trust_level == "supervised_auto"
    assert not TrustLevelChange.objects.exists()


def test_an_unknown_level_is_refused_naming_the_four():
    boss = make_user("boss", superuser=True)
    agent = make_agent("scout", owner=boss)

    with pytest.raises(TrustLevelInvalid) as caught:
        agent_set_trust_level(agent=agent, level="trusted", actor=boss)

    assert caught.value.message == (
        "trust_level: 'trusted' is not one of observe, suggest, supervised_auto, bounded_auto."
    )
    assert Agent.objects.get(pk=agent.pk).trust_level == "supervised_auto"
    assert not TrustLevelChange.objects.exists()


def test_the_database_refuses_a_level_outside_the_four():
    agent = make_agent("scout", owner=make_user("owner"))

    with pytest.raises(DatabaseError), transaction.atomic():
        Agent.objects.filter(pk=agent.pk).update(trust_level="standard")


def test_a_trust_change_row_cannot_be_updated_or_deleted_by_the_orm_or_raw_sql():
    boss = make_user("boss", superuser=True)
    agent = make_agent("scout", owner=boss)
    agent_set_trust_level(agent=agent, level="suggest", actor=boss)
    row = TrustLevelChange.objects.get()
    before = list(TrustLevelChange.objects.values())

    attempts = [
        lambda: TrustLevelChange.objects.filter(pk=row.pk).update(to_level="bounded_auto"),
        lambda: TrustLevelChange.objects.filter(pk=row.pk).delete(),
        lambda: _raw(f"UPDATE cognition_trustlevelchange SET reason = 'x' WHERE id = {row.pk}"),
        lambda: _raw(f"DELETE FROM cognition_trustlevelchange WHERE id = {row.pk}"),
    ]
    for attempt in attempts:
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            attempt()

    assert list(TrustLevelChange.objects.values()) == before


def _raw(sql: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql)


def test_the_admin_offers_the_level_actions_only_to_staff_with_the_permission():
    holder = make_user("holder", perms=[PERM, "cognition.view_agent"])
    viewer = make_user("viewer", perms=["cognition.view_agent"])
    agent = make_agent("scout", owner=holder)
    url = reverse("admin:cognition_agent_changelist")

    seen_by_viewer = _client(viewer).get(url).content.decode()
    client = _client(holder)
    seen_by_holder = client.get(url).content.decode()
    response = client.post(
        url, {"action": "set_trust_bounded_auto", "_selected_action": [agent.pk]}
    )

    assert "set_trust_observe" not in seen_by_viewer
    for level in ("observe", "suggest", "supervised_auto", "bounded_auto"):
        assert f"set_trust_{level}" in seen_by_holder
    assert response.status_code == 302
    assert Agent.objects.get(pk=agent.pk).trust_level == "bounded_auto"
    assert TrustLevelChange.objects.get().actor_label == "admin:holder"


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client
