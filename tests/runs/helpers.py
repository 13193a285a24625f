"""Small helpers shared by the runtime tests."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings

from runs.models import Attempt, MotorRun, RunEvent, Signal, Step
from runs.services import SliceOutcome, run_step


def drive(run_id: str, client: Any, *, limit: int = 30) -> list[SliceOutcome]:
    """Call run_step until the run stops making progress; return the outcomes in order."""
    outcomes: list[SliceOutcome] = []
    for _ in range(limit):
        outcome = run_step(run_id=run_id, client=client, owner="test-worker")
        outcomes.append(outcome)
        if outcome is not SliceOutcome.CONTINUED:
            return outcomes
    raise AssertionError(f"run {run_id} did not stop within {limit} slices: {outcomes}")


def snapshot(run_id: str) -> dict[str, Any]:
    """Everything a refused operation must leave untouched."""
    run = MotorRun.objects.get(pk=run_id)
    return {
        "run": {
            f.attname: getattr(run, f.attname)
            for f in MotorRun._meta.concrete_fields
            if f.attname != "updated_at"
        },
        "attempts": list(Attempt.objects.filter(run_id=run_id).values()),
        "steps": list(Step.objects.filter(attempt__run_id=run_id).values()),
        "events": RunEvent.objects.filter(run_id=run_id).count(),
        "signals": Signal.objects.filter(run_id=run_id).count(),
    }


def new_workspace() -> str:
    """A fresh directory inside MOTOR_WORKSPACES_DIR, as the project makes one for each run."""
    root = Path(settings.MOTOR_WORKSPACES_DIR)
    root.mkdir(parents=True, exist_ok=True)
    return tempfile.mkdtemp(prefix="ws_", dir=root)
