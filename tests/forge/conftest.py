"""MCP skills for the forge tests: real FastMCP servers (and broken ones) imported into the skill
store, reviewed and approved through the services, run in the real sandbox."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from cognition.models import Agent
from forge.runtime import pool
from skills.models import Policy
from skills.policy_edits import policy_update
from skills.reviewing import policy_approve, policy_review
from skills.services import Actor
from tests.runs.conftest import agent, make_agent  # noqa: F401 - fixtures
from tests.runs.faults import processes  # noqa: F401 - fixture (worker processes)
from tests.skills.admin_support import import_skill

ECHO_SERVER = '''\
from mcp.server.fastmcp import FastMCP

mcp = FastMCP("echoer")


@mcp.tool()
def echo(text: str) -> dict:
    """Repeat a text."""
    return {"echo": text}


@mcp.tool()
def shout(text: str) -> str:
    """Say a text loudly."""
    return text.upper()


if __name__ == "__main__":
    mcp.run(transport="stdio")
'''

ECHO_TESTS = """\
import server


def test_echo():
    assert server.echo("a") == {"echo": "a"}
"""

MANIFEST = """\
version = "1"
created_by = "agent"

[tools.echo]
semantics = "read"
"""


def skill_md(name: str) -> str:
    return f"---\nname: {name}\ndescription: Echo texts back for tests.\n---\nEcho things.\n"


def mcp_files(
    name: str = "echoer",
    *,
    server: str = ECHO_SERVER,
    manifest: str = MANIFEST,
    tests: str = ECHO_TESTS,
) -> dict[str, str]:
    return {
        "SKILL.md": skill_md(name),
        "skill.toml": manifest,
        "scripts/server.py": server,
        "scripts/test_server.py": tests,
    }


@pytest.fixture
def approver(db: None):
    user = get_user_model().objects.create_user(username="approver", password="x", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="approve_policy"))
    return get_user_model().objects.get(pk=user.pk)  # fresh permission cache


@pytest.fixture
def approved_mcp_skill(tmp_path: Path, approver) -> Callable[..., Policy]:
    """Import an MCP skill for an agent, review and approve it (with `domains` allowed)."""
    counter = [0]

    def make(
        owner: Agent,
        files: dict[str, str] | None = None,
        *,
        name: str = "echoer",
        domains: list[str] | None = None,
    ) -> Policy:
        counter[0] += 1
        root = tmp_path / f"import-{counter[0]}"
        root.mkdir()
        policy = import_skill(root, agent=owner, files=files or mcp_files(name), name=name)
        policy = policy_update(
            policy=policy, actor=Actor.system("test"), allowed_domains=domains or []
        )
        actor = Actor(user=approver, label=f"admin:{approver.username}")
        policy = policy_review(policy=policy, actor=actor)
        policy = policy_approve(policy=policy, actor=actor)
        policy.refresh_from_db()
        return policy

    return make


@pytest.fixture(autouse=True)
def _stop_servers() -> Iterator[None]:
    """No server of one test outlives it (the pool is per process)."""
    yield
    pool.stop_all()
