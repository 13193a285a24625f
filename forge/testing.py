"""Testing a generated bundle: pytest, then the MCP handshake, in one ephemeral sandbox budget.

Both run in throwaway sandboxes with the production limits and egress to the proposed domains
only (`forge.probe`); together they get TEST_LIMIT_S. Whatever fails becomes the text the model
sees on its next attempt.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: the hard limit of one test (pytest + handshake), seconds (seed 002 §6)
TEST_LIMIT_S = 30.0


@dataclass(frozen=True, slots=True)
class TestReport:
    """What testing showed: `stage` is where it stopped (pytest, handshake, or done)."""

    passed: bool
    stage: str
    output: str
    tools: list[dict[str, Any]] = field(default_factory=list)
    duration_ms: int = 0

    __test__ = False  # not a pytest class

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def feedback(self) -> str:
        """The failure as the model is told it."""
        return f"{self.stage} failed:\n{self.output}"


def bundle_test(
    files: Mapping[str, str], *, allowed_domains: Sequence[str], limit_s: float = TEST_LIMIT_S
) -> TestReport:
    """Run the bundle's tests, then initialize + tools/list against its server."""
    from .probe import probe_server, run_bundle_tests

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="forge-test-") as tmp:
        root = Path(tmp) / "skill"
        for path, text in files.items():
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        tests = run_bundle_tests(root, allowed_domains=list(allowed_domains), timeout_s=limit_s)
        if not tests.passed:
            return TestReport(
                passed=False,
                stage="pytest",
                output=tests.output,
                duration_ms=int((time.monotonic() - started) * 1000),
            )
        left = max(1.0, limit_s - (time.monotonic() - started))
        probe = probe_server(root, allowed_domains=list(allowed_domains), timeout_s=left)
    elapsed = int((time.monotonic() - started) * 1000)
    if probe.error:
        output = f"{probe.error}\n{probe.stderr_tail}".strip()
        return TestReport(passed=False, stage="handshake", output=output, duration_ms=elapsed)
    tools = [dict(tool) for tool in probe.tools]
    if not tools:
        return TestReport(
            passed=False,
            stage="handshake",
            output="the server answered tools/list with no tool",
            duration_ms=elapsed,
        )
    return TestReport(
        passed=True, stage="done", output=tests.output, tools=tools, duration_ms=elapsed
    )
