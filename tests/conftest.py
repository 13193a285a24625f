"""Shared fixtures. Tests run against the real PostgreSQL and Redis (see bin/test)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Shared fixture plugins: the namespaced test upstream (egress), headless Chromium, the LLM stub.
pytest_plugins = [
    "tests.fixtures.upstream",
    "tests.fixtures.browser",
    "tests.fixtures.llm",
]


@pytest.fixture
def artifacts_dir() -> Path:
    """Where tests save screenshots and other artefacts worth keeping after the run."""
    path = Path(os.environ.get("MOTOR_TEST_ARTIFACTS", "test-artifacts"))
    path.mkdir(parents=True, exist_ok=True)
    return path
