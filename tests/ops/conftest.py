"""Fixtures of the operations tests: agents, the LLM stub and real worker processes."""

from __future__ import annotations

from tests.cognition.worker_support import (  # noqa: F401 - fixtures
    clean_run_queue,
    start_worker,
    worker,
)
from tests.fixtures.llm import llm_stub_server  # noqa: F401 - fixtures
from tests.runs.conftest import agent, make_agent  # noqa: F401 - fixtures
