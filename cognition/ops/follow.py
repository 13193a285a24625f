"""Following a run from a terminal through the API (manage.py follow_run).

It reads what a brain reads: the agent's signal event stream (GET /api/v1/signals/stream/) says
when the run paused or ended, and the run's detail (GET /api/v1/runs/<id>/) gives its steps,
iteration and question; it never touches the database. A question or an approval is answered
from the terminal through the same endpoints a brain uses (POST …/respond/, …/approve/,
…/reject/), as the user's own message (X-Motor-Trigger: user_message).
"""

from __future__ import annotations

import json
import select
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, TextIO
from urllib.parse import parse_qsl, urlsplit

import httpx

#: exit status per final run status; FOLLOW_ERROR when the run could not be followed
EXIT_CODES = {"completed": 0, "failed": 1, "cancelled": 2}
FOLLOW_ERROR = 3
TERMINAL = frozenset(EXIT_CODES)
#: seconds between reads of the run's detail while nothing is signalled (steps are not signals)
POLL_S = 1.0
#: characters of an argument or a result shown on a step line
SUMMARY_CHARS = 80
#: agents per page, and pages at most, read to find the followed agent's energy
AGENT_PAGE_SIZE = 200
MAX_AGENT_PAGES = 50


class FollowError(Exception):
    """The run cannot be followed: the API refused or could not be reached."""


def summarize(value: Any, limit: int = SUMMARY_CHARS) -> str:
    """One line of at most `limit` characters for a JSON value."""
    if isinstance(value, dict):
        text = ", ".join(f"{k}={summarize(v, 30)}" for k, v in value.items())
    elif isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
    else:
        text = json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def step_line(step: dict[str, Any]) -> str:
    """`[attempt 1 · iteration 2] write(path="a.txt", …) 12 ms → ok: "Wrote 2 bytes"`: the
    call, its duration, its outcome and the start of its output (the run detail's excerpt)."""
    if step.get("state") != "done":
        outcome = "…running"
    elif step.get("ok"):
        outcome = "ok"
    else:
        outcome = f"error {step.get('error_code') or ''}".strip()
    duration = step.get("duration_ms")
    took = f" {duration} ms" if isinstance(duration, int) else ""
    output = step.get("output_excerpt") or ""
    shown = f": {summarize(output)}" if output and step.get("state") == "done" else ""
    return (
        f"[attempt {step.get('attempt_number')} · iteration {step.get('iteration')}] "
        f"{step.get('tool')}({summarize(step.get('arguments') or {})}){took} → {outcome}{shown}"
    )


@dataclass
class Follower:
    client: httpx.Client
    run_id: str
    out: TextIO
    stdin: TextIO | None
    agent: str | None = None
    interactive: bool = True
    agent_page_size: int = AGENT_PAGE_SIZE
    _printed: set[tuple[Any, ...]] = field(default_factory=set)
    _wake: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _asked: str | None = None
    _started: float = field(default_factory=time.monotonic)
    _progress_shown: bool = False

    # --- the API --------------------------------------------------------------------------------

    def _params(self) -> dict[str, str]:
        return {"agent": self.agent} if self.agent else {}

    def _get(self, path: str) -> Any:
        try:
            response = self.client.get(path, params=self._params())
        except httpx.HTTPError as exc:
            raise FollowError(f"the API cannot be reached: {exc.__class__.__name__}") from None
        if response.status_code != 200:
            raise FollowError(_refusal(response))
        return response.json()

    def _post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return self.client.post(
            path,
            params=self._params(),
            json=body,
            headers={"X-Motor-Trigger": "user_message"},
        )

    def run(self) -> dict[str, Any]:
        data: dict[str, Any] = self._get(f"/api/v1/runs/{self.run_id}/")
        return data

    def energy(self) -> float | None:
        """The followed agent's energy, or None when it cannot be read. A person's token reads
        the list of agents they may act for, every page of it, until the agent is found."""
        try:
            if not self.agent:
                return float(self._get("/api/v1/agents/me/")["energy"])
            params = {"page_size": str(self.agent_page_size)}
            for _ in range(MAX_AGENT_PAGES):
                response = self.client.get("/api/v1/agents/", params=params)
                if response.status_code != 200:
                    return None
                page = response.json()
                for agent in page.get("results", []):
                    if self.agent in (agent.get("name"), str(agent.get("id"))):
                        return float(agent["energy"])
                if not page.get("next"):
                    return None
                # the link's own query (cursor, page size), against the URL this command was
                # given: a proxy in front may name the host differently in the link
                params = dict(parse_qsl(urlsplit(page["next"]).query))
            return None
        except (httpx.HTTPError, KeyError, TypeError, ValueError):
            return None

    # --- the event stream -------------------------------------------------------------------------

    def _listen(self, after: int) -> None:
        """Wake the main loop whenever a signal of this run arrives on the event stream."""
        cursor = after
        while not self._stop.is_set():
            try:
                with self.client.stream(
                    "GET",
                    "/api/v1/signals/stream/",
                    params={**self._params(), "after": str(cursor)},
                    headers={"Accept": "text/event-stream"},
                    timeout=httpx.Timeout(10.0, read=None),
                ) as response:
                    if response.status_code != 200:
                        self._stop.wait(POLL_S)
                        continue
                    for line in response.iter_lines():
                        if self._stop.is_set():
                            return
                        if line.startswith("id: "):
                            cursor = int(line[4:])
                        elif line.startswith("data: "):
                            signal = json.loads(line[6:])
                            if signal.get("run_id") == self.run_id:
                                self._wake.set()
            except (httpx.HTTPError, ValueError):
                self._stop.wait(POLL_S)

    def _signal_cursor(self) -> int:
        """The seq of the agent's newest signal (the stream starts after it)."""
        try:
            page = self.client.get(
                "/api/v1/signals/", params={**self._params(), "after": "0", "limit": "1000"}
            )
            if page.status_code == 200:
                return int(page.json().get("next", 0))
        except (httpx.HTTPError, ValueError):
            pass
        return 0

    # --- output ------------------------------------------------------------------------------------

    def _line(self, text: str) -> None:
        self._clear_progress()
        self.out.write(text + "\n")
        self.out.flush()

    def _clear_progress(self) -> None:
        if self._progress_shown:
            self.out.write("\r\033[K")
            self._progress_shown = False

    def _progress(self, run: dict[str, Any], energy: float | None) -> None:
        if not self.out.isatty():
            return
        attempt = run.get("attempt") or {}
        elapsed = int(time.monotonic() - self._started)
        text = (
            f"{run['status']} · iteration {attempt.get('iteration', 0)}/"
            f"{attempt.get('max_iterations', '?')} · elapsed {elapsed // 60}:{elapsed % 60:02d}"
        )
        if energy is not None:
            text += f" · energy {energy:.2f}"
        self.out.write("\r\033[K" + text)
        self.out.flush()
        self._progress_shown = True

    # --- the loop ----------------------------------------------------------------------------------

    def _show_steps(self, run: dict[str, Any]) -> None:
        for step in run.get("steps", []):
            key = (
                step.get("attempt"),
                step.get("iteration"),
                step.get("call_index"),
                step.get("state"),
            )
            if key in self._printed:
                continue
            if step.get("state") != "done" and step.get("tool") in ("ask_user", "request_approval"):
                continue  # shown as the question or the approval
            self._printed.add(key)
            self._line(step_line(step))

    def _read_answer(self, prompt: str) -> str | None:
        """A line typed on the terminal, or None while nothing was typed (waits up to POLL_S)."""
        if self.stdin is None or not self.interactive:
            return None
        if self._asked != prompt:
            self._asked = prompt
            self._line(prompt)
        ready, _, _ = select.select([self.stdin], [], [], POLL_S)
        if not ready:
            return None
        line = self.stdin.readline()
        if line == "":  # end of input: no one will answer here
            self.interactive = False
            return None
        return line.rstrip("\n")

    def _answer_question(self, run: dict[str, Any]) -> bool:
        question = run.get("pending_question") or "(the run waits for input)"
        missing = run.get("missing_credentials") or []
        if missing and not run.get("pending_question"):
            if self._asked != "credentials":
                self._asked = "credentials"
                self._line(
                    f"? The run waits for credentials: {', '.join(missing)} (set them via /api/v1/credentials/)"
                )
            return False
        answer = self._read_answer(f"? {question}\n  (type your answer and press Enter)")
        if answer is None:
            return False
        response = self._post(f"/api/v1/runs/{self.run_id}/respond/", {"answer": answer})
        self._line(
            f"→ answered ({response.status_code})"
            if response.status_code == 200
            else f"! {_refusal(response)}"
        )
        self._asked = None
        return True

    def _decide_approval(self, run: dict[str, Any]) -> bool:
        approval = run.get("pending_approval") or {}
        action = approval.get("action") or {}
        what = f"{action.get('tool', '?')}({summarize(action.get('arguments') or {})})"
        answer = self._read_answer(
            f"? Approve {what}? [y = approve / anything else = reject with it as the note]"
        )
        if answer is None:
            return False
        if answer.strip().lower() in ("y", "yes"):
            response = self._post(f"/api/v1/runs/{self.run_id}/approve/", {"note": ""})
            verb = "approved"
        else:
            response = self._post(
                f"/api/v1/runs/{self.run_id}/reject/", {"note": answer.strip() or "rejected"}
            )
            verb = "rejected"
        self._line(
            f"→ {verb} ({response.status_code})"
            if response.status_code == 200
            else f"! {_refusal(response)}"
        )
        self._asked = None
        return True

    def follow(self) -> int:
        """Print the run's steps until it ends; the exit status of its outcome."""
        run = self.run()
        self._line(f"Following {self.run_id}: {summarize(run.get('task', ''), 120)}")
        listener = threading.Thread(target=self._listen, args=(self._signal_cursor(),), daemon=True)
        listener.start()
        energy_at, energy = 0.0, None
        try:
            while True:
                self._show_steps(run)
                status = run["status"]
                if status in TERMINAL:
                    self._clear_progress()
                    self._finish(run)
                    return EXIT_CODES[status]
                if time.monotonic() - energy_at > 10:
                    energy, energy_at = self.energy(), time.monotonic()
                self._progress(run, energy)
                acted = False
                if status == "awaiting_input":
                    acted = self._answer_question(run)
                elif status == "awaiting_approval":
                    acted = self._decide_approval(run)
                else:
                    self._asked = None
                if not acted and not (
                    status.startswith("awaiting") and self.interactive and self.stdin
                ):
                    self._wake.wait(POLL_S)
                self._wake.clear()
                run = self.run()
        finally:
            self._stop.set()

    def _finish(self, run: dict[str, Any]) -> None:
        result = run.get("result") or {}
        failure = (run.get("attempt") or {}).get("failure") or {}
        elapsed = time.monotonic() - self._started
        self._line(f"{run['status']} after {elapsed:.1f} s")
        summary = result.get("summary") or failure.get("message") or failure.get("summary")
        if summary:
            text = " ".join(str(summary).split())
            self._line(f"  {text if len(text) <= 400 else text[:399] + '…'}")


def _refusal(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
        return f"{response.status_code} {error['code']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}"


def latest_run_id(client: httpx.Client, *, agent: str | None) -> str:
    """The newest run of the agent (the token's own, or `agent` for a person's token)."""
    params = {"limit": "1", **({"agent": agent} if agent else {})}
    try:
        response = client.get("/api/v1/runs/", params=params)
    except httpx.HTTPError as exc:
        raise FollowError(f"the API cannot be reached: {exc.__class__.__name__}") from None
    if response.status_code != 200:
        raise FollowError(_refusal(response))
    results = response.json().get("results") or []
    if not results:
        raise FollowError("the agent has no run yet")
    return str(results[0]["id"] if "id" in results[0] else results[0]["run_id"])


def stdin_if_terminal_or_pipe() -> TextIO | None:
    return sys.stdin if sys.stdin is not None and not sys.stdin.closed else None
