"""Shared fixtures. Tests run against the real PostgreSQL and Redis (see bin/test)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

# Shared fixture plugins: the namespaced test upstream (egress), headless Chromium, the LLM stub,
# a real package index (pypiserver) in the upstream's namespace.
pytest_plugins = [
    "tests.fixtures.upstream",
    "tests.fixtures.browser",
    "tests.fixtures.llm",
    "tests.fixtures.embeddings",
    "tests.fixtures.package_index",
    "tests.fixtures.npm_index",
    "tests.fixtures.registry",
]


@pytest.fixture
def artifacts_dir() -> Path:
    """Where tests save screenshots and other artefacts worth keeping after the run."""
    path = Path(os.environ.get("MOTOR_TEST_ARTIFACTS", "test-artifacts"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(autouse=True)
def _run_workspaces_dir(settings: Any, tmp_path: Path) -> Path:
    """Each test's runs get their workspaces inside its own tmp_path: run_start accepts only a
    directory inside MOTOR_WORKSPACES_DIR, and a test's workspaces live under tmp_path."""
    settings.MOTOR_WORKSPACES_DIR = tmp_path
    return tmp_path


@pytest.fixture(autouse=True)
def _audit_rows_purged_before_an_sqlite_flush(request: pytest.FixtureRequest) -> Iterator[None]:
    """A transactional test's database is emptied with DELETE on SQLite (TRUNCATE on
    PostgreSQL, which row triggers do not see), and the audit tables' triggers refuse a DELETE:
    the rows a test wrote leave first (the tool audit's through its retention purge)."""
    yield
    marker = request.node.get_closest_marker("django_db")
    transactional = "transactional_db" in request.fixturenames or bool(
        marker is not None and marker.kwargs.get("transaction")
    )
    if not transactional:
        return
    from django.db import connection

    if connection.vendor != "sqlite":
        return
    from django.utils import timezone

    from runs.audit import retention, tool_audit_purge

    tool_audit_purge(now=timezone.now() + retention() + timedelta(days=1))
    # the skills' policy audit has no retention purge: its rows leave with the one trigger that
    # refuses a DELETE lifted for that statement and put back at once
    from importlib import import_module

    triggers = import_module("skills.migrations.0002_immutability_triggers")
    no_delete = next(t for t in triggers.SQLITE_FORWARD if "policyauditevent_no_delete" in t)
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER IF EXISTS skills_policyauditevent_no_delete")
        cursor.execute("DELETE FROM skills_policyauditevent")
        cursor.execute(no_delete)
