"""The browser inside a sandbox: one resident process that owns a headless Chromium.

Started by the supervisor as its resident ``browser`` (see resident.py) with
``/usr/bin/python3 -I -B /opt/motor-cortex/browser_host.py``; it reads length-prefixed JSON
requests on stdin and answers each with one length-prefixed JSON object on stdout (the frames of
protocol.py). The Playwright package comes from the read-only mount ``/opt/motor-cortex-browser``;
the browser is the system Chromium. Its only network is the session's egress bridge: every
request of every page (subresources, redirects, WebSockets, prefetches, service workers) goes to
the proxy at ``127.0.0.1:3128``, which applies the run's domain allowlist; with no network the
proxy address leads nowhere. Nothing outlives the process: the profile is a fresh directory
under /tmp, one context per process.

Request: ``{"action": str, ...arguments, "timeout_ms": int}``. Answer::

    {"ok": bool, "output": str, "error_code": str | null, "url": str, "title": str,
     "snapshot": [str, ...], "truncated": bool, "data": object | null, "refused": [str, ...],
     "located": {"ref": str, "role": str, "name": str} | null}

``refused`` lists the requests the egress proxy turned away since the previous answer;
``located`` is the element an action found by ``locator`` (or by ``ref`` with ``describe``).
"""

from __future__ import annotations

import os
import secrets
import struct
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any

BROWSER_SITE = "/opt/motor-cortex-browser"
CHROMIUM = os.environ.get("MOTOR_CHROMIUM", "/usr/lib/chromium/chromium")
PROXY = "http://127.0.0.1:3128"
DOWNLOADS = "/workspace/downloads"
SNAPSHOT_JS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "browser_snapshot.js")
#: Chromium features switched off. Chromium keeps only the last --disable-features it is given,
#: and ours comes after Playwright's own list, so this is the union: Playwright's (which keeps
#: pages deterministic and stops startup requests such as network-time queries) and ours, every
#: one a source of background traffic to the vendor's services the proxy would otherwise see
#: (and refuse): DNS-over-HTTPS, prediction and preconnects, optimization hints, translation,
#: autofill and certificate-transparency downloads, the media router, sign-in and account checks.
DISABLED_FEATURES = (
    # Playwright's
    "AvoidUnnecessaryBeforeUnloadCheckSync",
    "DestroyProfileOnBrowserClose",
    "HttpsUpgrades",
    "HttpsFirstBalancedModeAutoEnable",
    "LensOverlay",
    "MediaRouter",
    "PaintHolding",
    "ThirdPartyStoragePartitioning",
    "AvoidCorsURLLoaderRestartOnRedirect",
    "OptimizationHints",
    "NetworkTimeServiceQuerying",
    "AimEnabled",
    "PreconnectToSearch",
    # ours
    "DnsOverHttps",
    "NetworkPrediction",
    "OptimizationHintsFetching",
    "OptimizationGuideModelDownloading",
    "Translate",
    "AutofillServerCommunication",
    "CertificateTransparencyComponentUpdater",
    "InterestFeedContentSuggestions",
    "GlobalMediaControls",
    "SafeBrowsingBetterTelemetryAcrossReports",
    "PrivacySandboxSettings4",
    "AcceptCHFrame",
)
#: where the browser's own service requests go: the discard port, which Chromium never connects to
VENDOR_SINK = "http://127.0.0.1:9"
#: flags for Chromium inside the sandbox: the outer sandbox (namespaces, seccomp, no_new_privs)
#: confines it, so its own sandbox (which needs user namespaces and setuid) is off; /dev/shm is
#: small, so shared memory goes to /tmp; no background traffic of its own (updates, sign-in,
#: safe browsing, metrics, pings: the proxy sees the page's requests only), no QUIC (the proxy
#: speaks TCP), no disk cache, every host through the proxy (loopback too)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-dev-shm-usage",
    "--disable-gpu",
    "--no-zygote",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-breakpad",
    "--disable-extensions",
    "--disable-default-apps",
    "--disable-client-side-phishing-detection",
    "--disable-domain-reliability",
    "--safebrowsing-disable-auto-update",
    "--no-pings",
    "--metrics-recording-only",
    "--disable-features=" + ",".join(DISABLED_FEATURES),
    "--dns-prefetch-disable",
    "--disk-cache-size=1",
    # the browser's own services that no switch turns off (the account list of its identity
    # manager, the component updater) are pointed at a port Chromium itself refuses to dial,
    # outside the proxy: they fail inside the browser and the proxy never sees them. Pages are
    # unaffected (a page's request to that port is refused the same way, before any network).
    "--gaia-url=" + VENDOR_SINK,
    "--google-apis-url=" + VENDOR_SINK,
    "--lso-url=" + VENDOR_SINK,
    "--component-updater=url-source=" + VENDOR_SINK + "/",
    "--proxy-bypass-list=<-loopback>;127.0.0.1:9",
]
#: the most snapshot lines an answer carries
SNAPSHOT_LINES = 400
_HEADER = struct.Struct(">I")
#: schemes a navigation may use
_SCHEMES = ("http://", "https://")


class ActionError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _read_frame(stream: Any) -> bytes | None:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    body = stream.read(size)
    return body if len(body) == size else None


def _write_frame(stream: Any, body: bytes) -> None:
    stream.write(_HEADER.pack(len(body)) + body)
    stream.flush()


class BrowserHost:
    """One browser, one context, one page; actions on the page by element ref."""

    def __init__(self, *, proxy: str | None) -> None:
        sys.path.insert(0, BROWSER_SITE)
        from playwright.sync_api import sync_playwright

        self.ref_attr = "data-mc-" + secrets.token_hex(4)
        self.secret_attr = self.ref_attr + "-secret"
        with open(SNAPSHOT_JS, encoding="utf-8") as fh:
            self.snapshot_js = fh.read()
        self.refused: list[str] = []
        self._pw = sync_playwright().start()
        self.browser = self._pw.chromium.launch(
            executable_path=CHROMIUM,
            args=CHROMIUM_ARGS,
            headless=True,
            # no network at all: the address of a proxy nobody listens on
            proxy={"server": proxy or "http://127.0.0.1:9"},
            downloads_path="/tmp/downloads",
        )
        self.context = self.browser.new_context(
            accept_downloads=True,
            service_workers="allow",
            viewport={"width": 1280, "height": 900},
        )
        self.context.on("requestfailed", self._failed)
        self.context.on("response", self._response)
        self.page = self.context.new_page()
        self.page.on("download", self._download)
        self.downloads: list[str] = []
        self.located: dict[str, str] | None = None

    # ------------------------------------------------------------------ events

    def _failed(self, request: Any) -> None:
        failure = request.failure or ""
        if "TUNNEL_CONNECTION_FAILED" in failure or "PROXY" in failure.upper():
            self.refused.append(f"{request.method} {request.url} ({failure})")

    def _response(self, response: Any) -> None:
        try:
            verdict = response.headers.get("x-motor-egress")
        except Exception:  # noqa: BLE001 - an event handler must not fail the action
            return
        if verdict and verdict.startswith("denied"):
            self.refused.append(f"{response.request.method} {response.url} (egress: {verdict})")

    def _download(self, download: Any) -> None:
        os.makedirs(DOWNLOADS, exist_ok=True)
        name = os.path.basename(download.suggested_filename or "download") or "download"
        target = os.path.join(DOWNLOADS, name)
        download.save_as(target)
        self.downloads.append(target)

    # ------------------------------------------------------------------ helpers

    def _locate(self, ref: str) -> Any:
        if not isinstance(ref, str) or not ref.startswith("e") or not ref[1:].isdigit():
            raise ActionError("invalid_args", f"ref must look like e12, not {ref!r}")
        locator = self.page.locator(f"[{self.ref_attr}='{ref}']")
        if locator.count() == 0:
            raise ActionError(
                "not_found", f"no element {ref} on the page any more; take a fresh snapshot"
            )
        return locator.first

    def _index(self) -> dict[str, list[str]]:
        """Every ref on the page (assigning new ones as a snapshot does) with its role and name."""
        shot = self.page.evaluate(
            self.snapshot_js,
            {"attr": self.ref_attr, "secret": self.secret_attr, "limit": 100_000, "index": True},
        )
        return dict(shot.get("index") or {})

    def _element(self, req: dict[str, Any]) -> Any:
        """The element an action is on: by `locator` ({role, name}: a selector remembered for a
        skill, the first element in document order with exactly that role and name), else by
        `ref`. With `describe` (or a locator) the element's role and name are answered as
        ``located``, so the caller can remember them."""
        locator = req.get("locator")
        if isinstance(locator, dict):
            role, name = str(locator.get("role") or ""), str(locator.get("name") or "")
            for ref, (found_role, found_name) in self._index().items():
                if (found_role, found_name) == (role, name):
                    self.located = {"ref": ref, "role": role, "name": name}
                    return self._locate(ref)
            raise ActionError(
                "not_found", f"no {role} named {name!r} on this page (a remembered selector)"
            )
        ref = req.get("ref", "")
        element = self._locate(ref)
        if req.get("describe"):
            described = self._index().get(ref)
            if described:
                self.located = {"ref": ref, "role": described[0], "name": described[1]}
        return element

    def snapshot(self) -> dict[str, Any]:
        try:
            shot = self.page.evaluate(
                self.snapshot_js,
                {"attr": self.ref_attr, "secret": self.secret_attr, "limit": SNAPSHOT_LINES},
            )
        except Exception as exc:  # noqa: BLE001 - a page mid-navigation has no document
            return {"lines": [f"(no snapshot: {str(exc).splitlines()[0]})"], "truncated": False}
        return {"lines": list(shot["lines"]), "truncated": bool(shot["truncated"])}

    # ------------------------------------------------------------------ actions

    def navigate(self, req: dict[str, Any], timeout: int) -> Any:
        url = str(req.get("url") or "")
        if not url.startswith(_SCHEMES):
            raise ActionError("invalid_args", f"only http:// and https:// URLs: {url!r}")
        response = self.page.goto(url, timeout=timeout, wait_until="load")
        if response is None:
            return None
        verdict = response.headers.get("x-motor-egress") or ""
        if verdict.startswith("denied"):
            # a plain-HTTP hop the proxy refused (HTTPS ones fail as a tunnel error)
            raise ActionError(
                "network_blocked",
                f"{response.url}: refused by the egress proxy (domain not allowed: {verdict})",
            )
        return {"status": response.status}

    def click(self, req: dict[str, Any], timeout: int) -> Any:
        self._element(req).click(timeout=timeout)
        try:
            self.page.wait_for_load_state("load", timeout=timeout)
        except Exception:  # noqa: BLE001, S110 - a click that starts no navigation is fine
            pass
        return None

    def type(self, req: dict[str, Any], timeout: int) -> Any:
        target = self._element(req)
        text = req.get("text")
        if not isinstance(text, str):
            raise ActionError("invalid_args", "type needs 'text' (a string)")
        if req.get("secret"):
            target.evaluate("(el, attr) => el.setAttribute(attr, '')", self.secret_attr)
        target.fill(text, timeout=timeout)
        if req.get("submit"):
            target.press("Enter", timeout=timeout)
            self.page.wait_for_load_state("load", timeout=timeout)
        return None

    def select(self, req: dict[str, Any], timeout: int) -> Any:
        value = req.get("value")
        if not isinstance(value, str):
            raise ActionError("invalid_args", "select needs 'value' (an option's label or value)")
        target = self._element(req)
        try:
            target.select_option(label=value, timeout=timeout)
        except Exception:  # noqa: BLE001 - try the option's value next
            target.select_option(value=value, timeout=timeout)
        return None

    def scroll(self, req: dict[str, Any], timeout: int) -> Any:
        if req.get("ref") or req.get("locator"):
            self._element(req).scroll_into_view_if_needed(timeout=timeout)
        else:
            amount = 800 if req.get("direction", "down") == "down" else -800
            self.page.mouse.wheel(0, amount)
        return None

    def wait(self, req: dict[str, Any], timeout: int) -> Any:
        if req.get("text"):
            self.page.get_by_text(str(req["text"])).first.wait_for(timeout=timeout)
        elif req.get("ref"):
            self.page.locator(f"[{self.ref_attr}='{req['ref']}']").first.wait_for(timeout=timeout)
        else:
            self.page.wait_for_load_state("load", timeout=timeout)
        return None

    def extract(self, req: dict[str, Any], timeout: int) -> Any:
        located = req.get("ref") or req.get("locator")
        target = self._element(req) if located else self.page.locator("body")
        if req.get("format") == "table":
            rows = target.evaluate(
                """(el, secret) => {
                  const table = el.tagName === 'TABLE' ? el : el.querySelector('table');
                  if (!table) return null;
                  return Array.from(table.rows).map((row) => Array.from(row.cells).map(
                    (cell) => (cell.innerText || '').replace(/\\s+/g, ' ').trim()));
                }""",
                self.secret_attr,
            )
            if rows is None:
                raise ActionError("not_found", "no table in that element")
            return {"rows": rows}
        text = target.inner_text(timeout=timeout)
        return {"text": text[:20000]}

    def evaluate(self, req: dict[str, Any], timeout: int) -> Any:
        expression = req.get("expression")
        if not isinstance(expression, str) or not expression.strip():
            raise ActionError("invalid_args", "evaluate needs 'expression' (JavaScript)")
        return {"value": self.page.evaluate(expression)}

    def screenshot(self, req: dict[str, Any], timeout: int) -> Any:
        os.makedirs("/workspace/screenshots", exist_ok=True)
        path = str(req.get("path") or f"/workspace/screenshots/{int(time.time() * 1000)}.png")
        if not path.startswith("/workspace/"):
            raise ActionError("invalid_args", "a screenshot is saved under /workspace")
        # every password and credential-filled field is painted over
        mask = [self.page.locator(f"input[type=password], [{self.secret_attr}]")]
        self.page.screenshot(path=path, timeout=timeout, mask=mask)
        return {"path": path}

    def back(self, req: dict[str, Any], timeout: int) -> Any:
        self.page.go_back(timeout=timeout, wait_until="load")
        return None

    def close(self) -> None:
        try:
            self.context.close()
            self.browser.close()
        finally:
            self._pw.stop()

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

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        action = str(req.get("action") or "")
        timeout = int(req.get("timeout_ms") or 10_000)
        data: Any = None
        error: tuple[str, str] | None = None
        self.located = None
        if action not in self.ACTIONS:
            error = ("invalid_args", f"unknown action {action!r}")
        elif action != "snapshot":
            try:
                data = getattr(self, action)(req, timeout)
            except ActionError as exc:
                error = (exc.code, exc.message)
            except Exception as exc:  # noqa: BLE001 - Playwright's errors are the page's state
                message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                code = "timeout" if "Timeout" in type(exc).__name__ else "tool_error"
                if "ERR_TUNNEL_CONNECTION_FAILED" in message or "ERR_PROXY" in message:
                    code = "network_blocked"
                error = (code, message)
        shot = self.snapshot()
        refused, self.refused = self.refused, []
        answer: dict[str, Any] = {
            "ok": error is None,
            "error_code": None if error is None else error[0],
            "output": "" if error is None else error[1],
            "url": self.page.url,
            "title": _safe_title(self.page),
            "snapshot": shot["lines"],
            "truncated": shot["truncated"],
            "data": data,
            "refused": refused,
            "downloads": list(self.downloads),
            "located": self.located,
        }
        self.downloads.clear()
        return answer


def _safe_title(page: Any) -> str:
    try:
        return str(page.title())[:200]
    except Exception:  # noqa: BLE001 - mid-navigation
        return ""


def main() -> int:
    import json

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    # Playwright's driver must not write into the answer stream: frames go to a saved copy of
    # fd 1, and fd 1 itself points at stderr from here on.
    out_fd = os.dup(1)
    os.dup2(2, 1)
    stdout = os.fdopen(out_fd, "wb", buffering=0)
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("HTTP_PROXY")
    try:
        host = BrowserHost(proxy=proxy)
    except Exception as exc:  # noqa: BLE001 - reported to the first request, then we exit
        # the whole error (Playwright appends Chromium's own log) goes to the resident's log
        print(f"the browser could not start: {exc}", file=sys.stderr, flush=True)
        message = f"the browser could not start: {str(exc).splitlines()[0] if str(exc) else exc}"
        while _read_frame(stdin) is not None:
            _write_frame(
                stdout,
                json.dumps(
                    {"ok": False, "error_code": "sandbox_error", "output": message}
                ).encode(),
            )
            return 1
        return 1
    while True:
        raw = _read_frame(stdin)
        if raw is None:
            break
        try:
            req = json.loads(raw)
            if not isinstance(req, dict):
                raise ValueError("a request is a JSON object")
        except ValueError as exc:
            answer: dict[str, Any] = {"ok": False, "error_code": "invalid_args", "output": str(exc)}
        else:
            if req.get("action") == "close":
                _write_frame(stdout, b'{"ok": true, "output": "closed"}')
                break
            answer = host.handle(req)
        _write_frame(stdout, json.dumps(answer, default=str).encode())
    try:
        host.close()
    except Exception:  # noqa: BLE001, S110 - the supervisor kills what is left
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
