"""The browser inside a real session on both isolating backends (bwrap, and docker with the
sandbox image's Chromium): Debian's Chromium driven by Playwright as the supervisor's resident, its only network the session's egress proxy, against the test upstream's
portal (tests/fixtures/portal.py). The proxy's connection reports show what was dialled; the
upstream's request log shows what arrived."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sandbox.backends.bwrap import BwrapBackend
from sandbox.backends.docker import DockerBackend
from sandbox.browser import PageState, SandboxBrowser, browser_mounts
from sandbox.types import ConnectionReport, ExecRequest, NetworkPolicy, Session, SessionSpec
from tests.fixtures.portal import CSRF, HOST, INJECTION, METERS, serve_portal
from tests.fixtures.upstream import Upstream, upstream  # noqa: F401 (fixture)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PORTAL = f"http://{HOST}"


@dataclass
class Browsing:
    session: Session
    browser: SandboxBrowser
    upstream: Upstream
    reports: list[ConnectionReport] = field(default_factory=list)

    def ref(self, state: PageState, line_start: str) -> str:
        """The ref of the first snapshot line whose text (after its ref) starts so."""
        for line in state.snapshot:
            found = re.match(r"(e\d+) (.*)", line.strip())
            if found and found.group(2).startswith(line_start):
                return found.group(1)
        raise AssertionError(f"no {line_start!r} in the snapshot:\n" + "\n".join(state.snapshot))

    def denied_hosts(self, expected: int) -> list[str]:
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            denied = sorted({r.host for r in list(self.reports) if r.verdict == "denied"})
            if len(denied) >= expected:
                return denied
            time.sleep(0.05)
        return sorted({r.host for r in list(self.reports) if r.verdict == "denied"})


def open_browsing(upstream: Upstream, workspace: Path, backend: str = "bwrap") -> Browsing:  # noqa: F811
    reports: list[ConnectionReport] = []
    dns = upstream.resolver(extra={HOST: upstream.ip, "evil.test": upstream.ip})
    workspace.mkdir(exist_ok=True)
    engine = (
        BwrapBackend(egress_resolver=dns)
        if backend == "bwrap"
        else DockerBackend(egress_resolver=dns, sweep=False)
    )
    session = engine.open(
        SessionSpec(
            workspace=workspace,
            network=NetworkPolicy(allowed_domains=(HOST,)),
            readonly_mounts=browser_mounts(),
            on_connection=reports.append,
        )
    )
    return Browsing(session, SandboxBrowser(session), upstream, reports)


@pytest.fixture
def web(upstream: Upstream, tmp_path: Path, backend_name: str) -> Iterator[Browsing]:  # noqa: F811
    """The portal in a browser of a fresh session on each backend."""
    upstream.routes_clear()
    serve_portal(upstream)
    browsing = open_browsing(upstream, tmp_path / "ws", backend_name)
    yield browsing
    browsing.session.close()


def log_in(web: Browsing, password: str = "hunter2-portal") -> PageState:
    page = web.browser.navigate(f"{PORTAL}/login")
    assert page.ok, page.message
    web.browser.act("type", {"ref": web.ref(page, "textbox Username"), "text": "tenant67"})
    typed = web.browser.act(
        "type", {"ref": web.ref(page, "textbox Password"), "text": password, "secret": True}
    )
    return web.browser.act("click", {"ref": web.ref(typed, "button Log in")})


def test_login_with_a_csrf_form_then_the_meters_table_is_extracted(web: Browsing) -> None:
    # given the portal's login page
    page = web.browser.navigate(f"{PORTAL}/login")
    # then the snapshot is compact, names the form's controls and gives them refs
    assert (page.ok, page.url, page.title) == (True, f"{PORTAL}/login", "Portal login")
    assert page.snapshot == [
        "h1 Resident portal",
        "e1 textbox Username",
        "e2 textbox Password",
        "e3 button Log in",
    ]

    # when the browser logs in and extracts the table of meters
    meters = log_in(web)
    table = web.browser.act("extract", {"ref": web.ref(meters, "table"), "format": "table"})

    # then the form was posted with its CSRF token, and the cookie came back on the next page
    assert meters.url == f"{PORTAL}/meters"
    posted = [e for e in web.upstream.request_log(HOST) if e["line"] == "POST /session"]
    assert len(posted) == 1
    assert posted[0]["body"] == f"csrf={CSRF}&username=tenant67&password=hunter2-portal"
    after = [e for e in web.upstream.request_log(HOST) if e["line"] == "GET /meters"]
    assert after[-1]["headers"]["cookie"] == "portal_session=s-5521"
    assert table.data == {
        "rows": [["Meter", "Last reading"], *([name, value] for name, value in METERS.items())]
    }


def test_a_password_and_a_secret_field_are_masked_in_every_snapshot(web: Browsing) -> None:
    page = web.browser.navigate(f"{PORTAL}/login")
    typed = web.browser.act(
        "type", {"ref": web.ref(page, "textbox Password"), "text": "hunter2-portal"}
    )
    user = web.browser.act(
        "type",
        {"ref": web.ref(page, "textbox Username"), "text": "tenant67-secret", "secret": True},
    )
    # the password field by its type, the username field because it was filled with a secret
    assert any(line.strip().endswith("textbox Password = ••••••") for line in typed.snapshot)
    assert any(line.strip().endswith("textbox Username = ••••••") for line in user.snapshot)
    assert "hunter2-portal" not in "\n".join(typed.snapshot + user.snapshot)
    assert "tenant67-secret" not in "\n".join(user.snapshot)


def test_a_redirect_and_a_websocket_to_an_undeclared_domain_are_refused(web: Browsing) -> None:
    # when a page redirects to evil.test, and another opens a WebSocket and subresources there
    redirected = web.browser.navigate(f"{PORTAL}/leave")
    live = web.browser.navigate(f"{PORTAL}/socket")
    time.sleep(1.0)
    later = web.browser.act("snapshot", {})

    # then the navigation failed as network_blocked, and the proxy refused every request there
    assert (redirected.ok, redirected.error_code) == (False, "network_blocked")
    assert live.ok and live.title == "Live"
    assert "evil.test" in web.denied_hosts(1)
    evil = [r for r in list(web.reports) if r.host == "evil.test"]
    assert {r.verdict for r in evil} == {"denied"} and len(evil) >= 3
    assert {r.host for r in list(web.reports) if r.verdict == "allowed"} == {HOST}
    refused = " ".join(redirected.refused + live.refused + later.refused)
    assert "evil.test" in refused
    # nothing ever reached the upstream for evil.test
    assert web.upstream.requests("evil.test") == []


def test_the_injected_text_is_part_of_the_snapshot_as_page_content(web: Browsing) -> None:
    meters = log_in(web)
    assert any(INJECTION in line for line in meters.snapshot)


def test_file_and_chrome_urls_are_refused(web: Browsing) -> None:
    for url in ("file:///etc/passwd", "chrome://version"):
        state = web.browser.navigate(url)
        assert (state.ok, state.error_code) == (False, "invalid_args")
    # a link to a file: URL is blocked by Chromium's policy too
    page = web.browser.act("evaluate", {"expression": "location.href = 'file:///etc/hosts'; 1"})
    later = web.browser.act("snapshot", {})
    assert page.ok
    assert not later.url.startswith("file:")


def test_the_browser_survives_a_command_in_the_same_session_and_runs_inside_it(
    web: Browsing,
) -> None:
    web.browser.navigate(f"{PORTAL}/login")
    # a command's end sweeps its processes; the browser is spared
    listing = web.session.exec(ExecRequest(argv=["/bin/sh", "-c", "cat /proc/[0-9]*/comm"]))
    state = web.browser.act("snapshot", {})
    assert state.url == f"{PORTAL}/login"
    names = listing.stdout.decode().split()
    assert "chromium" in names and "node" in " ".join(names) or "node-MainThread" in names
    # the browser runs as the sandbox's uid in its PID namespace
    uid = web.browser.act("evaluate", {"expression": "1"})
    assert uid.ok


def test_each_session_starts_a_fresh_browser_without_the_cookies_of_another(
    upstream: Upstream,  # noqa: F811
    tmp_path: Path,
    backend_name: str,
) -> None:
    upstream.routes_clear()
    serve_portal(upstream)
    first = open_browsing(upstream, tmp_path / "one", backend_name)
    try:
        log_in(first)
        cookie = first.browser.act("evaluate", {"expression": "document.cookie"})
        assert cookie.data == {"value": "portal_session=s-5521"}
    finally:
        first.session.close()
    second = open_browsing(upstream, tmp_path / "two", backend_name)
    try:
        second.browser.navigate(f"{PORTAL}/meters")
        cookie = second.browser.act("evaluate", {"expression": "document.cookie"})
        assert cookie.data == {"value": ""}
        last = [e for e in upstream.request_log(HOST) if e["line"] == "GET /meters"][-1]
        assert "cookie" not in last["headers"]
    finally:
        second.session.close()


def test_an_action_past_its_deadline_kills_the_browser_and_the_next_starts_fresh(
    web: Browsing,
) -> None:
    web.browser.navigate(f"{PORTAL}/login")
    slow = SandboxBrowser(web.session, action_timeout_s=1.0)
    slow.CALL_MARGIN_S = 0.5
    # a page script that never returns holds the browser past the call's deadline
    stuck = slow.act("evaluate", {"expression": "while (true) {}"})
    assert (stuck.ok, stuck.error_code, stuck.timed_out) == (False, "timeout", True)
    listing = web.session.exec(ExecRequest(argv=["/bin/sh", "-c", "cat /proc/[0-9]*/comm"]))
    assert "chromium" not in listing.stdout.decode().split()
    fresh = web.browser.act("snapshot", {})
    assert (fresh.ok, fresh.url) == (True, "about:blank")


def test_the_proxy_sees_only_the_pages_own_requests(web: Browsing) -> None:
    # when the browser starts, logs in, reads the meters and idles a little
    meters = log_in(web)
    web.browser.act("extract", {"ref": web.ref(meters, "table"), "format": "table"})
    time.sleep(3.0)
    web.browser.act("snapshot", {})
    # then every connection the egress proxy saw was the portal's: Chromium's own background
    # traffic (update checks, sign-in, safe browsing, metrics, …) is switched off, not refused
    others = sorted({f"{r.host}:{r.port} {r.verdict}" for r in list(web.reports) if r.host != HOST})
    assert others == []
    assert {r.verdict for r in list(web.reports)} == {"allowed"}
