"""Fixtures of the SkillForge tests: an owner who may approve, their agent, and a flow driver."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User

from cognition.models import Agent
from forge.models import ForgeFlow
from forge.steps import flow_run_until_waiting
from tests.fixtures.llm import ScriptedLLM
from tests.runs.faults import processes  # noqa: F401 - fixture (worker processes)
from tests.skills.admin_support import (
    APPROVER_PERMS,
    fast_password_hashing,  # noqa: F401 - autouse fixture
    make_agent,
    make_user,
)


@pytest.fixture
def olivia(db) -> User:
    """The owner: staff, allowed to approve skills."""
    return make_user("olivia", perms=APPROVER_PERMS)


@pytest.fixture
def agent(olivia) -> Agent:
    return make_agent("ops", owner=olivia)


@pytest.fixture
def drive(scripted_llm: ScriptedLLM) -> Callable[[ForgeFlow | str], ForgeFlow]:
    """Advance a flow in this process, the LLM played by `scripted_llm`, until it waits."""

    def run(flow: ForgeFlow | str) -> ForgeFlow:
        flow_id = flow if isinstance(flow, str) else flow.id
        return flow_run_until_waiting(flow_id=flow_id, client=scripted_llm.client())

    return run
