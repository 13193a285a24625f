"""Fixtures for the skills tests: users, agents, bundles on disk and a table snapshot."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission
from django.db import connection

from cognition.models import Agent
from skills.bundle import bundle_from_files
from skills.models import Policy, PolicyAuditEvent, Skill, SkillFile, SkillVersion
from skills.services import Actor

SKILL_TABLES = (Skill, SkillVersion, SkillFile, Policy, PolicyAuditEvent)


def skill_md(name: str, description: str = "Does a useful thing.", body: str = "# Steps\n") -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\n{body}"


def make_bundle(name: str, files: Mapping[str, bytes | str] | None = None, **kw: str):
    """A validated bundle named `name` with SKILL.md plus `files`."""
    content: dict[str, bytes] = {"SKILL.md": skill_md(name, **kw).encode()}
    for path, data in (files or {}).items():
        content[path] = data.encode() if isinstance(data, str) else data
    return bundle_from_files(content, dir_name=name)


def write_skill(
    root: Path, name: str, files: Mapping[str, bytes | str] | None = None, **kw: str
) -> Path:
    """Write a skill directory `root/name` with SKILL.md plus `files`; return it."""
    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "SKILL.md").write_text(skill_md(name, **kw))
    for path, data in (files or {}).items():
        target = directory / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.encode() if isinstance(data, str) else data)
    return directory


def table_snapshot() -> dict[str, object]:
    """Row counts of every skills table plus the policies' status and credential column."""
    snapshot: dict[str, object] = {m._meta.db_table: m.objects.count() for m in SKILL_TABLES}
    snapshot["policies"] = sorted(
        Policy.objects.values_list("id", "status", "credential_values", "allowed_domains")
    )
    snapshot["current_versions"] = sorted(Skill.objects.values_list("name", "current_version_id"))
    return snapshot


@pytest.fixture
def snapshot() -> Callable[[], dict[str, object]]:
    return table_snapshot


@pytest.fixture
def owner(django_user_model):
    return django_user_model.objects.create_user(username="owner")


@pytest.fixture
def approver(django_user_model):
    user = django_user_model.objects.create_user(username="alice", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="approve_policy"))
    return django_user_model.objects.get(pk=user.pk)  # fresh permission cache


@pytest.fixture
def approver_actor(approver) -> Actor:
    return Actor.from_user(approver)


@pytest.fixture
def staff_without_permission(django_user_model):
    return django_user_model.objects.create_user(username="bob", is_staff=True)


@pytest.fixture
def system_actor() -> Actor:
    return Actor.system("test")


@pytest.fixture
def agent(owner) -> Agent:
    return Agent.objects.create(name="main", owner=owner)


@pytest.fixture
def other_agent(owner) -> Agent:
    return Agent.objects.create(name="helper", owner=owner)


def raw_column(table: str, column: str, pk: int) -> object:
    """Read one column straight from the database, bypassing the ORM."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column} FROM {table} WHERE id = %s", [pk])  # noqa: S608
        return cursor.fetchone()[0]


def tamper_file(file_id: int, data: bytes) -> None:
    """Rewrite a SkillFile's bytes as an attacker with database access would.

    The immutability trigger refuses UPDATEs, so this switches triggers off for the current
    transaction (superuser only) the way such an attacker could.
    """
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute("UPDATE skills_skillfile SET data = %s WHERE id = %s", [data, file_id])
        cursor.execute("SET LOCAL session_replication_role = DEFAULT")
