"""A failed run's failure class (seed 003 §3.4) and what the brain does about it.

The class is read from the run's failure summary (category, message, hint) and the error codes
and outputs of the attempt's last failed tool calls, checked in this order:

- auth_error: the service refused the credentials (401/403, "unauthorized", "invalid api key");
- dependency_missing: a program or module is absent ("command not found", "No module named");
- api_error: the remote side failed transiently (429, 5xx, timeouts, refused connections) or the
  model endpoint did (category model_failure);
- task_mismatch: the run needed what the skill does not offer (category invalid_task, "not
  supported");
- runtime_error: anything else.

The recovery rules are data (`RECOVERY`), so the brain's prompt and the core.skill plan action
state exactly what the table says.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from runs.models import Attempt, FailureCategory, MotorRun, Step, StepState

from .models import FailureClass

#: failed steps of the attempt whose error code and output are read
FAILED_STEPS_READ = 3
#: characters of each failed step's output read
STEP_OUTPUT_CHARS = 500

_AUTH = re.compile(
    r"\b(401|403)\b|unauthori[sz]ed|forbidden|invalid[ _-]?(api[ _-]?)?(key|token)|"
    r"authenticat|permission denied for (the )?(api|token)|expired token|bad credentials",
    re.IGNORECASE,
)
_DEPENDENCY = re.compile(
    r"command not found|no module named|modulenotfounderror|cannot find module|"
    r"not installed|executable file not found|missing dependency|no such file or directory: "
    r"'?/usr/bin|importerror",
    re.IGNORECASE,
)
_API = re.compile(
    r"\b(429|500|502|503|504)\b|rate.?limit|timed? ?out|timeout|connection (refused|reset|error)|"
    r"service unavailable|bad gateway|temporarily unavailable|network_error|fetch_failed",
    re.IGNORECASE,
)
_MISMATCH = re.compile(
    r"not supported|unsupported|does not support|cannot handle|out of scope|no such (operation|"
    r"feature)",
    re.IGNORECASE,
)
_DEPENDENCY_NAME = (
    re.compile(r"no module named '?([\w.-]+)'?", re.IGNORECASE),
    re.compile(r"cannot find module '([\w@/.-]+)'", re.IGNORECASE),
    re.compile(r"([\w.+-]+): command not found", re.IGNORECASE),
    re.compile(r"command not found: ([\w.+-]+)", re.IGNORECASE),
    re.compile(r"([\w.+-]+): not found", re.IGNORECASE),
    re.compile(r"executable file not found.*?\"?([\w.+-]+)\"?", re.IGNORECASE),
)


@dataclass(frozen=True)
class Classified:
    """The failure class, the text it was read from (trimmed) and, for dependency_missing, the
    missing program or module when the text names it."""

    failure_class: FailureClass
    evidence: str
    dependency: str = ""


def _attempt_text(run: MotorRun) -> tuple[dict[str, Any], str]:
    result = run.result or {}
    failure = result.get("failure") if isinstance(result.get("failure"), dict) else None
    attempt = Attempt.objects.filter(run=run, index=run.current_attempt_index).first()
    if failure is None and attempt is not None:
        failure = attempt.failure or {}
    parts = [str((failure or {}).get(k) or "") for k in ("message", "hint")]
    if attempt is not None:
        steps = Step.objects.filter(attempt=attempt, state=StepState.DONE).order_by(
            "-iteration", "-call_index"
        )
        failed = [s for s in steps[:20] if s.result and not s.result.get("ok")]
        for step in failed[:FAILED_STEPS_READ]:
            parts.append(str(step.result.get("error_code") or ""))
            parts.append(str(step.result.get("output") or "")[:STEP_OUTPUT_CHARS])
    return failure or {}, "\n".join(p for p in parts if p)


def classify_text(*, category: str, text: str) -> Classified:
    """The class of a failure of `category` described by `text` (rules in the module doc)."""
    evidence = " ".join(text.split())[:300]
    if _AUTH.search(text):
        return Classified(FailureClass.AUTH_ERROR, evidence)
    if _DEPENDENCY.search(text):
        return Classified(FailureClass.DEPENDENCY_MISSING, evidence, _dependency_name(text))
    if category == FailureCategory.MODEL_FAILURE or _API.search(text):
        return Classified(FailureClass.API_ERROR, evidence)
    if category == FailureCategory.INVALID_TASK or _MISMATCH.search(text):
        return Classified(FailureClass.TASK_MISMATCH, evidence)
    return Classified(FailureClass.RUNTIME_ERROR, evidence)


def _dependency_name(text: str) -> str:
    for pattern in _DEPENDENCY_NAME:
        match = pattern.search(text)
        if match and match.group(1).lower() not in {"bash", "sh", "error", "file"}:
            return match.group(1)[:100]
    return ""


def classify_run(run: MotorRun) -> Classified:
    """The class of failed `run`'s failure (its current attempt's summary and failed steps)."""
    failure, text = _attempt_text(run)
    return classify_text(category=str(failure.get("category") or ""), text=text)


@dataclass(frozen=True)
class Recovery:
    """What the brain does after a failure of one class (seed 003 §3.4)."""

    failure_class: str
    #: "confirm_dependency", "retry", "check_credentials", "release_and_suggest_next"
    action: str
    #: run the same skill again by itself (api_error only), after `wait_s` seconds (the seed's
    #: value; MOTOR_CORTEX_RETRY_WAIT_SECONDS sets the real wait), at most `max_retries` times;
    #: the cortex does it (cognition.cortex.follow_ups), not the brain
    retry: bool
    wait_s: float
    max_retries: int
    #: release the skill (disable the agent's policy) now
    release: bool
    #: offer the next candidate (switching needs the user's consent)
    suggest_next: bool
    #: what to tell the user
    instruction: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


RECOVERY: dict[str, Recovery] = {
    FailureClass.DEPENDENCY_MISSING: Recovery(
        failure_class=FailureClass.DEPENDENCY_MISSING,
        action="confirm_dependency",
        retry=False,
        wait_s=0,
        max_retries=0,
        release=False,
        suggest_next=False,
        instruction=(
            "Show the user what has to be installed; continue only after they confirm it."
        ),
    ),
    FailureClass.API_ERROR: Recovery(
        failure_class=FailureClass.API_ERROR,
        action="retry",
        retry=True,
        wait_s=3.0,
        max_retries=1,
        release=False,
        suggest_next=False,
        instruction=(
            "The cortex retries the run once by itself after the wait; report if that fails too."
        ),
    ),
    FailureClass.AUTH_ERROR: Recovery(
        failure_class=FailureClass.AUTH_ERROR,
        action="check_credentials",
        retry=False,
        wait_s=0,
        max_retries=0,
        release=False,
        suggest_next=False,
        instruction=(
            "Ask the user to check the skill's credentials (in the admin or the API, never in "
            "the chat); do not retry by yourself."
        ),
    ),
    FailureClass.TASK_MISMATCH: Recovery(
        failure_class=FailureClass.TASK_MISMATCH,
        action="release_and_suggest_next",
        retry=False,
        wait_s=0,
        max_retries=0,
        release=True,
        suggest_next=True,
        instruction=(
            "The skill was released; suggest the next candidate and switch only if the user agrees."
        ),
    ),
    FailureClass.RUNTIME_ERROR: Recovery(
        failure_class=FailureClass.RUNTIME_ERROR,
        action="release_and_suggest_next",
        retry=False,
        wait_s=0,
        max_retries=0,
        release=True,
        suggest_next=True,
        instruction=(
            "The skill was released; suggest the next candidate and switch only if the user agrees."
        ),
    ),
}
