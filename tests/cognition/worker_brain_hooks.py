"""Brain hooks for the delivery tests' Celery worker (loaded with `celery worker --include`).

`recorder` appends each signal id it is called with to $TEST_HOOK_LOG; `flaky` raises on its
first call for a signal and records the second, so its retry is visible.
"""

from __future__ import annotations

import os
from pathlib import Path

from cognition.brain_hooks import register_brain_hook


def _log() -> Path:
    return Path(os.environ["TEST_HOOK_LOG"])


def recorder(signal_id: int) -> None:
    with _log().open("a") as out:
        out.write(f"recorder {signal_id}\n")


def flaky(signal_id: int) -> None:
    marker = _log().with_name(f"flaky-{signal_id}")
    if not marker.exists():
        marker.write_text("failed once")
        raise RuntimeError(f"brain busy with signal {signal_id}")
    with _log().open("a") as out:
        out.write(f"flaky {signal_id}\n")


if os.environ.get("TEST_HOOK_LOG"):
    register_brain_hook("recorder", recorder)
    register_brain_hook("flaky", flaky)
