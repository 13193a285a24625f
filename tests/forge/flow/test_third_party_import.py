"""A third-party MCP server enters like a generated one: the normal import (pending_review), then
the same sandbox test, whose tools and results the review page shows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from config.celery import app
from skills.models import VersionProbe
from tests.forge.flow.skillfiles import FAILING_TEST, skill_files
from tests.skills.admin_support import import_skill

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


@pytest.fixture
def eager() -> Iterator[None]:
    """Queued tasks run at once in this process (the probe is a Celery task)."""
    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    try:
        yield
    finally:
        app.conf.task_always_eager = before


def test_an_imported_mcp_skill_is_probed_for_its_review(
    agent, tmp_path: Path, eager, django_capture_on_commit_callbacks
):
    # given a bundle written elsewhere, imported through the ordinary directory import
    with django_capture_on_commit_callbacks(execute=True):
        policy = import_skill(tmp_path, agent=agent, files=skill_files("adder"), name="adder")
    # then after the commit it was tested in a sandbox, and what it showed is kept with it
    probe = VersionProbe.objects.get(version=policy.skill.current_version)
    assert (probe.tests_passed, probe.checked_by) == (True, "forge probe")
    assert [(t["name"], t["semantics"]) for t in probe.tools] == [("add", "read")]
    assert "1 passed" in probe.test_output
    assert policy.status == "pending_review"


def test_an_imported_mcp_skill_whose_tests_fail_is_reported_failed(
    agent, tmp_path: Path, eager, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        policy = import_skill(
            tmp_path, agent=agent, files=skill_files("adder", test=FAILING_TEST), name="adder"
        )
    probe = VersionProbe.objects.get(version=policy.skill.current_version)
    assert (probe.tests_passed, probe.tools) == (False, [])
    assert probe.test_output.startswith("pytest failed:")


def test_a_plain_skill_is_not_probed(
    agent, tmp_path: Path, eager, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        policy = import_skill(tmp_path, agent=agent)
    assert not VersionProbe.objects.filter(version=policy.skill.current_version).exists()
