"""Testing a generated bundle: pytest, then the MCP handshake, in one ephemeral sandbox budget.

Both run in throwaway sandboxes with the production limits and egress to the proposed domains
only (`forge.probe`); together they get TEST_LIMIT_S. Whatever fails becomes the text the model
sees on its next attempt.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
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
    files: Mapping[str, str] | Mapping[str, bytes], *, limit_s: float = TEST_LIMIT_S
) -> TestReport:
    """Run the bundle's tests, then ``initialize`` + ``tools/list`` against its server, in
    ephemeral sandboxes egressing to the manifest's proposed domains, within `limit_s` overall."""
    from .bundles import BundleRefused, as_bytes, manifest_of
    from .interfaces import probe_server, run_server_tests

    started = time.monotonic()
    try:
        manifest = manifest_of(files)
    except BundleRefused as exc:
        return TestReport(passed=False, stage="manifest", output=str(exc))
    data = as_bytes(files)
    tests = run_server_tests(data, manifest, timeout_s=limit_s)

    def elapsed_ms() -> int:
        return int((time.monotonic() - started) * 1000)

    if not tests.passed:
        limit = f"\n(stopped at the {limit_s:g} s limit)" if tests.timed_out else ""
        return TestReport(
            passed=False, stage="pytest", output=tests.output + limit, duration_ms=elapsed_ms()
        )
    left = limit_s - (time.monotonic() - started)
    if left <= 0:
        return TestReport(
            passed=False,
            stage="handshake",
            output=f"no time left for the handshake within the {limit_s:g} s limit",
            duration_ms=elapsed_ms(),
        )
    probe = probe_server(data, manifest, timeout_s=left)
    if probe.error:
        output = f"{probe.error}\n{probe.stderr_tail}".strip()
        return TestReport(passed=False, stage="handshake", output=output, duration_ms=elapsed_ms())
    tools = [tool.to_dict() for tool in probe.tools]
    if not tools:
        return TestReport(
            passed=False,
            stage="handshake",
            output="the server answered tools/list with no tool",
            duration_ms=elapsed_ms(),
        )
    return TestReport(
        passed=True, stage="done", output=tests.output, tools=tools, duration_ms=elapsed_ms()
    )
