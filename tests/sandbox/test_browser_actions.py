"""The browser's actions are named twice: by the host (sandbox.browser, what the tool accepts)
and by the helper inside the sandbox, which imports nothing from the host's package."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import sandbox.browser

INSIDE = Path(sandbox.browser.__file__).resolve().parent / "inside" / "browser_host.py"


def test_the_host_and_the_helper_inside_know_the_same_actions() -> None:
    spec = importlib.util.spec_from_file_location("motor_browser_host_copy", INSIDE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.BrowserHost.ACTIONS == sandbox.browser.ACTIONS
