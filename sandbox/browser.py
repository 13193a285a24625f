"""The browser driver: a headless Chromium that lives inside a session, driven from the host.

`BrowserDriver` is the engine-neutral interface (launch, navigate, act, snapshot, screenshot,
close). `SandboxBrowser` implements it with Playwright running inside the session as the
supervisor's ``browser`` resident (sandbox/inside/browser_host.py): same uid, namespaces, seccomp
refusals and workspace as the session's commands, its only network the session's egress proxy.
The host sends one request per action and gets the page's compact accessibility snapshot back;
no browser process ever runs in the caller's process.

`browser_mounts()` lists the read-only mounts a session needs for it: the Playwright package and
its one dependency (greenlet), taken from this interpreter's installation, and Chromium's
managed policy file (no file:// or chrome:// pages, no DNS-over-HTTPS, downloads into the
workspace). The system Chromium (Debian's ``chromium`` package) comes with /usr.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sandbox.types import ExecRequest, SandboxError, Session

#: the in-sandbox interpreter and the resident's script
PYTHON = "/usr/bin/python3"
BROWSER_HOST = "/opt/motor-cortex/browser_host.py"
#: where the Playwright package is mounted inside
BROWSER_SITE = "/opt/motor-cortex-browser"
#: Chromium's managed policies inside (Debian's chromium reads this directory)
POLICY_TARGET = "/etc/chromium/policies/managed/motor-cortex.json"
POLICY_FILE = Path(__file__).resolve().parent / "browser_policy.json"

#: every action the browser tool accepts
ACTIONS = (
    "navigate",
    "click",
    "type",
    "select",
    "scroll",
    "wait",
    "extract",
    "evaluate",
    "screenshot",
    "back",
    "snapshot",
)


def browser_mounts() -> list[tuple[Path, str]]:
    """(host path, path inside) of what a session needs to run the browser, read-only. Empty
    when Playwright is not installed here (the browser tool then fails with sandbox_error)."""
    try:
        import greenlet
        import playwright
    except ImportError:
        return []
    mounts = [
        (Path(playwright.__file__).resolve().parent, f"{BROWSER_SITE}/playwright"),
        (Path(greenlet.__file__).resolve().parent, f"{BROWSER_SITE}/greenlet"),
        (POLICY_FILE, POLICY_TARGET),
    ]
    for extra in (Path("/etc/fonts"),):
        if extra.is_dir():
            mounts.append((extra, str(extra)))
    return mounts


@dataclass(frozen=True)
class PageState:
    """What an action left: the page, its snapshot, and what the egress proxy refused."""

    ok: bool
    error_code: str | None
    message: str
    url: str
    title: str
    snapshot: list[str]
    truncated: bool
    data: Any = None
    refused: list[str] = field(default_factory=list)
    downloads: list[str] = field(default_factory=list)
    timed_out: bool = False
    duration_ms: int = 0
    #: the element the action was on, when asked (``describe``) or found by ``locator``
    located: dict[str, str] | None = None


class BrowserDriver(Protocol):
    """A browser engine behind the browser tool."""

    def launch(self) -> PageState: ...

    def navigate(self, url: str) -> PageState: ...

    def act(self, action: str, arguments: dict[str, Any]) -> PageState: ...

    def snapshot(self) -> PageState: ...

    def screenshot(self, path: str | None = None) -> PageState: ...

    def close(self) -> None: ...


class SandboxBrowser:
    """The `BrowserDriver` of one session: the session's ``browser`` resident.

    `action_timeout_s` bounds each action inside the page; the call to the sandbox gets a few
    seconds more, past which the browser and all its processes are killed (the next action
    starts a fresh one)."""

    #: what a call to the resident may take beyond the action's own timeout (launch included)
    CALL_MARGIN_S = 20.0

    def __init__(self, session: Session, *, action_timeout_s: float = 10.0) -> None:
        self.session = session
        self.action_timeout_s = action_timeout_s

    def _call(self, request: dict[str, Any]) -> PageState:
        request = {**request, "timeout_ms": int(self.action_timeout_s * 1000)}
        result = self.session.exec(
            ExecRequest(
                argv=[PYTHON, "-I", "-B", BROWSER_HOST],
                stdin=json.dumps(request).encode(),
                timeout_s=self.action_timeout_s + self.CALL_MARGIN_S,
                resident="browser",
            )
        )
        if result.timed_out:
            return PageState(
                ok=False,
                error_code="timeout",
                message=(
                    f"the browser did not answer within {self.action_timeout_s + self.CALL_MARGIN_S:.0f} s"
                    " and was killed; the next action starts a fresh browser"
                ),
                url="",
                title="",
                snapshot=[],
                truncated=False,
                timed_out=True,
                duration_ms=result.duration_ms,
            )
        if result.exit_code != 0:
            raise SandboxError(
                "the browser failed: " + result.stderr.decode("utf-8", "replace")[:500]
            )
        try:
            answer = json.loads(result.stdout)
        except ValueError as exc:
            raise SandboxError(f"the browser answered something that is not JSON: {exc}") from None
        return PageState(
            ok=bool(answer.get("ok")),
            error_code=answer.get("error_code"),
            message=str(answer.get("output") or ""),
            url=str(answer.get("url") or ""),
            title=str(answer.get("title") or ""),
            snapshot=[str(line) for line in answer.get("snapshot") or []],
            truncated=bool(answer.get("truncated")),
            data=answer.get("data"),
            refused=[str(item) for item in answer.get("refused") or []],
            downloads=[str(item) for item in answer.get("downloads") or []],
            duration_ms=result.duration_ms,
            located=_located(answer.get("located")),
        )

    def launch(self) -> PageState:
        return self._call({"action": "snapshot"})

    def navigate(self, url: str) -> PageState:
        return self._call({"action": "navigate", "url": url})

    def act(self, action: str, arguments: dict[str, Any]) -> PageState:
        if action not in ACTIONS:
            raise ValueError(f"unknown browser action {action!r}")
        return self._call({**arguments, "action": action})

    def snapshot(self) -> PageState:
        return self._call({"action": "snapshot"})

    def screenshot(self, path: str | None = None) -> PageState:
        return self._call({"action": "screenshot", **({"path": path} if path else {})})

    def close(self) -> None:
        """Stop the browser and every process it started (the session stays open)."""
        self.session.exec(
            ExecRequest(argv=[PYTHON], timeout_s=10.0, resident="browser", resident_stop=True)
        )


def _located(value: Any) -> dict[str, str] | None:
    if not isinstance(value, dict):
        return None
    return {key: str(value.get(key) or "") for key in ("ref", "role", "name")}


__all__ = [
    "ACTIONS",
    "BrowserDriver",
    "PageState",
    "SandboxBrowser",
    "browser_mounts",
]
