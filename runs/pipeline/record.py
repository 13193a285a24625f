"""Recording a tool call's result: the Step marked done and its tool message."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from runs.models import (
    Attempt,
    MotorRun,
    Step,
    StepState,
)
from runs.pipeline.audit import audit_call
from runs.tools import tool_message_content


def _complete_step(run: MotorRun, attempt: Attempt, step: Step, result: dict[str, Any]) -> None:
    step.state = StepState.DONE
    step.result = result
    step.duration_ms = int(result.get("duration_ms") or 0)
    step.completed_at = timezone.now()
    step.save(update_fields=["state", "result", "duration_ms", "completed_at"])
    attempt.messages = [*attempt.messages, _tool_message(step, result)]
    attempt.save(update_fields=["messages"])
    # the call's audit row, in the same (fenced) transaction as its result
    audit_call(run, attempt, step, result)


def _tool_message(step: Step, result: dict[str, Any]) -> dict[str, Any]:
    """The tool message that answers `step`'s call in the conversation."""
    return {
        "role": "tool",
        "tool_call_id": step.tool_call_id,
        "content": tool_message_content(result),
    }
