"""Browser tool benchmark: snapshot size, launch cost inside the sandbox, warm actions, memory.

    uv run python -m bench.browser            # default sample counts
    uv run python -m bench.browser --quick    # fewer samples

Needs root, bwrap and Debian's chromium. Four parts, each against a baseline measured here:

1. snapshot size: the accessibility snapshot (sandbox/inside/browser_snapshot.js) of each page
   against the page's HTML, both counted in the same tokens (words and single punctuation
   marks); the portal pages of the tests and three saved real-world-like pages (bench/pages/).
   Target: <= 0.15. Beside it, the page's visible text alone (innerText) against the same
   HTML: the floor of any snapshot that keeps what the page says.
2. launch + first snapshot: the browser resident (browser_host.py) started inside an open bwrap
   session against the same script started as a plain process on the host. Target: <= 1.5x.
3. warm action: a click and the snapshot it answers with, inside the sandbox and plain (p50, p95).
4. memory: the proportional set size (PSS) of every process of one open browser and context.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sandbox.backends.bwrap import BwrapBackend
from sandbox.browser import SandboxBrowser, browser_mounts
from sandbox.reaper import bwrap_sandboxes, descendants
from sandbox.types import SessionSpec

ROOT = Path(__file__).resolve().parents[1]
PAGES = Path(__file__).resolve().parent / "pages"
HOST_SCRIPT = ROOT / "sandbox" / "inside" / "browser_host.py"
SNAPSHOT_JS = (ROOT / "sandbox" / "inside" / "browser_snapshot.js").read_text()
_TOKEN = re.compile(r"\w+|[^\w\s]")
#: a page with a button that changes the page on every click (the warm action's target)
COUNTER = (
    "<h1>Counter</h1><p id=out>0</p>"
    '<button onclick="out.textContent = Number(out.textContent) + 1">Add one</button>'
)


def tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


class PlainBrowser:
    """browser_host.py as a plain host process (the unsandboxed baseline), same frames."""

    def __init__(self) -> None:
        env = {**os.environ, "MOTOR_CHROMIUM": "/usr/lib/chromium/chromium"}
        env.pop("HTTP_PROXY", None)
        env.pop("HTTPS_PROXY", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-I", str(HOST_SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=tempfile.gettempdir(),
        )

    def call(self, request: dict) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        body = json.dumps({**request, "timeout_ms": 10000}).encode()
        self.proc.stdin.write(struct.pack(">I", len(body)) + body)
        self.proc.stdin.flush()
        (size,) = struct.unpack(">I", self.proc.stdout.read(4))
        return json.loads(self.proc.stdout.read(size))

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def load(call, html: str) -> dict:
    """Put `html` into the page (no network needed) and answer with its snapshot."""
    call({"action": "evaluate", "expression": f"document.write({json.dumps(html)}); 1"})
    return call({"action": "snapshot"})


def part_snapshot_size() -> list[tuple[str, int, int, int]]:
    sys.path.insert(0, str(ROOT))
    from tests.fixtures.portal import CONFIRMATION, LOGIN, METERS_PAGE

    pages = {"portal login": LOGIN, "portal meters": METERS_PAGE, "portal done": CONFIRMATION}
    for path in sorted(PAGES.glob("*.html")):
        pages[path.stem] = path.read_text()
    browser = PlainBrowser()
    rows = []
    try:
        for name, html in pages.items():
            browser.call({"action": "evaluate", "expression": "document.open(); 1"})
            shot = load(browser.call, html)
            # the page's visible text alone (what a person reads, no roles, no refs): a
            # snapshot that keeps the text cannot be smaller
            text = browser.call({"action": "evaluate", "expression": "document.body.innerText"})
            rows.append(
                (
                    name,
                    tokens(html),
                    tokens("\n".join(shot["snapshot"])),
                    tokens(str((text.get("data") or {}).get("value") or "")),
                )
            )
    finally:
        browser.close()
    return rows


def sandboxed_session(workspace: Path):
    return BwrapBackend().open(SessionSpec(workspace=workspace, readonly_mounts=browser_mounts()))


def part_launch(samples: int, workspace: Path) -> tuple[list[float], list[float]]:
    plain, inside = [], []
    for _ in range(samples):
        started = time.perf_counter()
        browser = PlainBrowser()
        browser.call({"action": "snapshot"})
        plain.append((time.perf_counter() - started) * 1000)
        browser.close()
        with sandboxed_session(workspace) as session:
            started = time.perf_counter()
            state = SandboxBrowser(session).launch()
            inside.append((time.perf_counter() - started) * 1000)
            assert state.ok, state.message
    return plain, inside


def part_warm(samples: int, workspace: Path) -> tuple[list[float], list[float], float]:
    plain_ms: list[float] = []
    browser = PlainBrowser()
    try:
        shot = load(browser.call, COUNTER)
        ref = next(line.split()[0] for line in shot["snapshot"] if "Add one" in line)
        for _ in range(samples):
            started = time.perf_counter()
            browser.call({"action": "click", "ref": ref})
            plain_ms.append((time.perf_counter() - started) * 1000)
    finally:
        browser.close()
    inside_ms: list[float] = []
    with sandboxed_session(workspace) as session:
        driver = SandboxBrowser(session)
        shot_state = driver.act(
            "evaluate", {"expression": f"document.write({json.dumps(COUNTER)}); 1"}
        )
        ref = next(line.split()[0] for line in shot_state.snapshot if "Add one" in line)
        for _ in range(samples):
            started = time.perf_counter()
            driver.act("click", {"ref": ref})
            inside_ms.append((time.perf_counter() - started) * 1000)
        pss = browser_pss_mb(session.id)
    return plain_ms, inside_ms, pss


def browser_pss_mb(session_id: str) -> float:
    """PSS (MiB) of every process of the session's sandbox but its supervisor: the browser."""
    total_kb = 0
    for bwrap in bwrap_sandboxes().get(session_id[:32], []):
        for pid in descendants(bwrap):
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
                rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
            except OSError:
                continue
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if comm == "python3" and b"browser_host" not in cmdline:
                continue  # the supervisor (and bwrap's init) are there without a browser too
            match = re.search(r"^Pss:\s+(\d+) kB", rollup, re.M)
            total_kb += int(match.group(1)) if match else 0
    return total_kb / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    launches, actions = (3, 30) if args.quick else (8, 100)
    workspace = Path(tempfile.mkdtemp(prefix="bench-browser-"))

    rows = part_snapshot_size()
    print(
        f"{'page':<22} {'HTML tokens':>12} {'snapshot tokens':>16} {'ratio':>7} "
        f"{'visible text':>13} {'text ratio':>11}"
    )
    worst = 0.0
    for name, html_tokens, snap_tokens, text_tokens in rows:
        ratio = snap_tokens / html_tokens
        worst = max(worst, ratio)
        print(
            f"{name:<22} {html_tokens:>12} {snap_tokens:>16} {ratio:>7.3f} "
            f"{text_tokens:>13} {text_tokens / html_tokens:>11.3f}"
        )

    plain, inside = part_launch(launches, workspace)
    plain_ms, inside_ms, pss = part_warm(actions, workspace)
    print()
    print(f"{'measurement':<48} {'n':>4} {'median ms':>10} {'p95 ms':>9}")
    for label, values in (
        ("launch + first snapshot, plain process", plain),
        ("launch + first snapshot, inside a bwrap session", inside),
        ("warm click + snapshot, plain process", plain_ms),
        ("warm click + snapshot, inside a bwrap session", inside_ms),
    ):
        print(
            f"{label:<48} {len(values):>4} {statistics.median(values):>10.1f} "
            f"{pct(values, 0.95):>9.1f}"
        )
    print(f"\nbrowser with one page, PSS of all its processes: {pss:.0f} MiB")
    launch_ratio = statistics.median(inside) / statistics.median(plain)
    warm_ratio = statistics.median(inside_ms) / statistics.median(plain_ms)
    print()
    print(f"{'ratio':<44} {'value':>7} {'target':>7}  verdict")
    print(
        f"{'largest snapshot / HTML (tokens)':<44} {worst:>7.3f} {'<=0.15':>7}  "
        f"{'met' if worst <= 0.15 else 'NOT met'}"
    )
    print(
        f"{'launch inside / launch plain (medians)':<44} {launch_ratio:>7.2f} {'<=1.5':>7}  "
        f"{'met' if launch_ratio <= 1.5 else 'NOT met'}"
    )
    print(f"{'warm action inside / plain (medians)':<44} {warm_ratio:>7.2f} {'—':>7}  (report)")


if __name__ == "__main__":
    main()
