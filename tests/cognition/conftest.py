"""Fixtures for the API tests: two owners, two agents with live tokens, and clients for each kind
of principal (agent token, human session, human personal token)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.contrib.auth.models import User
from django.db import connection
from rest_framework.test import APIClient

from cognition.models import Agent, Credential
from cognition.services import agent_issue_token, personal_token_create
from skills.models import Policy, PolicyAuditEvent, Skill, SkillVersion
from tests.skills.admin_support import (
    APPROVER_PERMS,
    PASSWORD,
    fast_password_hashing,  # noqa: F401 - autouse fixture
    make_agent,
    make_user,
)

SECRET = "s3cr3t-value-that-must-never-leak-7f9a"  # noqa: S105 - test data


def skill_md(
    name: str, body: str = "# Steps\n\nCall https://api.agentmail.to/v0/inboxes with curl.\n"
) -> str:
    return f"---\nname: {name}\ndescription: Talks to the example API.\n---\n{body}"


@dataclass
class World:
    olivia: User  # owns alpha; staff with the approve permission
    bob: User  # owns bravo; not staff
    alpha: Agent
    bravo: Agent
    alpha_token: str
    bravo_token: str


@pytest.fixture
def world() -> World:
    olivia = make_user("olivia", perms=APPROVER_PERMS)
    bob = make_user("bob", is_staff=False)
    alpha = make_agent("alpha", owner=olivia)
    bravo = make_agent("bravo", owner=bob)
    return World(
        olivia=olivia,
        bob=bob,
        alpha=alpha,
        bravo=bravo,
        alpha_token=agent_issue_token(agent=alpha, actor=olivia).raw,
        bravo_token=agent_issue_token(agent=bravo, actor=bob).raw,
    )


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.fixture
def as_agent() -> Callable[[str], APIClient]:
    return bearer


@pytest.fixture
def session_client() -> Callable[[User], APIClient]:
    def make(user: User) -> APIClient:
        client = APIClient()
        assert client.login(username=user.get_username(), password=PASSWORD)
        return client

    return make


@pytest.fixture
def personal_client() -> Callable[[User], APIClient]:
    def make(user: User) -> APIClient:
        return bearer(personal_token_create(user=user, name="cli", actor=user).raw)

    return make


def state_snapshot() -> dict[str, object]:
    """Everything a refused call must leave untouched: rows, statuses, policy fields, vault."""
    return {
        "skills": sorted(Skill.objects.values_list("name", "current_version_id")),
        "versions": SkillVersion.objects.count(),
        "policies": sorted(
            Policy.objects.values_list(
                "id",
                "status",
                "allowed_domains",
                "required_credentials",
                "tools",
                "dependencies",
                "inputs",
                "credential_values",
                "rejection_note",
                "approved_content_hash",
                "reviewed_hash",
            )
        ),
        "audit": sorted(PolicyAuditEvent.objects.values_list("id", "action")),
        "credentials": sorted(Credential.objects.values_list("agent_id", "name", "value")),
        "energy": sorted(Agent.objects.values_list("id", "energy", "last_energy_at")),
    }


def raw_credential_column() -> list[str]:
    """The vault's value column as PostgreSQL stores it (no ORM in between)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT value FROM cognition_credential")
        return [row[0] for row in cursor.fetchall()]


def raw_policy_credential_column() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT credential_values FROM skills_policy")
        return [row[0] for row in cursor.fetchall()]
