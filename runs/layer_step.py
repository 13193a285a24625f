"""A skill run's dependencies, made ready before its sandbox opens, and shown in its trace.

Before a slice of a skill run opens (or reuses) its sandbox session, the layer of the loaded
skill version and its policy's `dependencies` is made ready (runs.layers.layer_ensure): built
the first time, reused afterwards. The session mounts it read-only (runs.sessions).

The first slice of each attempt writes the install into the trace as a Step of its own
(iteration 0, before any LLM call; tool `INSTALL_TOOL`): the packages, whether the layer was
installed or reused, how long it took. A failed install fails the run with the installer's
message, in the same fenced transaction as that Step.

The install runs under the call watch (runs.sessions.CallWatch) and the run's deadline: a
cancel (or any newer claim) or the deadline passing kills the installers mid-way
(runs.layers.LayerStopped; nothing of the build is kept). A cancelled slice then ends as a
lost lease (the cancel already finished the run); a slice past its deadline fails the run as
timed out.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from runs.errors import LeaseLost
from runs.finishing import run_fail_timeout, run_finish_failed
from runs.layers import LayerFailed, LayerReady, LayerStopped, layer_ensure
from runs.lease import Lease, lease_fence
from runs.models import Attempt, FailureCategory, MotorRun, Step, StepState
from runs.records import SliceOutcome
from runs.sessions import CallWatch
from runs.tools import envelope

logger = logging.getLogger(__name__)

#: the trace's name of the install step
INSTALL_TOOL = "install_dependencies"


def run_dependencies(run: MotorRun) -> list[str]:
    """The dependencies of the skill version a run loaded, as the agent's policy for that skill
    declares them now; none for a run without a skill and for review runs (read-only tools)."""
    if run.skill_id is None or run.skill_version_id is None or run.review:
        return []
    from skills.models import Policy

    dependencies = (
        Policy.objects.filter(skill_id=run.skill_id, agent_id=run.agent_id)
        .values_list("dependencies", flat=True)
        .first()
    )
    return list(dependencies or [])


def run_layer_prepare(
    lease: Lease, run: MotorRun, attempt: Attempt, *, owner: str, actor: str
) -> Path | SliceOutcome | None:
    """The directory of the run's dependency layer (None: the run declares none), or FINISHED
    when installing failed (or outlived the run's deadline) and the run was failed for it.
    Raises LeaseLost when the run was cancelled (or claimed anew) during the install."""
    dependencies = run_dependencies(run)
    if not dependencies:
        return None
    version = run.skill_version
    assert version is not None
    # time paused for a human (waited_s) is not part of the run's budget (as runs.loop counts)
    deadline = (run.started_at or run.created_at).timestamp() + run.timeout_s + run.waited_s
    try:
        # a cancel moves the fencing token; the watch then says stop and the install is killed
        with CallWatch(run_id=lease.run_id, token=lease.token) as watch:
            try:
                ready = layer_ensure(
                    version_id=version.pk,
                    version_hash=version.content_hash,
                    dependencies=dependencies,
                    owner=owner,
                    should_stop=lambda: watch.fired or time.time() > deadline,
                )
            except LayerStopped:
                if watch.fired:
                    raise LeaseLost(
                        "the run's fencing token moved during the dependency install",
                        run_id=lease.run_id,
                    ) from None
                return run_fail_timeout(lease, run, attempt, actor=actor)
    except LayerFailed as exc:
        with transaction.atomic():
            lease_fence(lease)
            _trace(attempt, dependencies, failed=exc, ready=None, lease=lease)
            run_finish_failed(
                run,
                attempt,
                category=FailureCategory.TOOL_FAILURE,
                message=f"installing the skill's dependencies failed:\n{exc.message}",
                retryable=exc.retryable,
                actor=actor,
            )
        return SliceOutcome.FINISHED
    if not Step.objects.filter(attempt=attempt, iteration=0, tool=INSTALL_TOOL).exists():
        with transaction.atomic():
            lease_fence(lease)
            _trace(attempt, dependencies, failed=None, ready=ready, lease=lease)
    return ready.path


def _trace(
    attempt: Attempt,
    dependencies: list[str],
    *,
    failed: LayerFailed | None,
    ready: LayerReady | None,
    lease: Lease,
) -> None:
    """The attempt's install Step (written once; a later slice's install is not repeated)."""
    packages = list(ready.packages) if ready is not None else list(dependencies)
    result: dict[str, Any]
    if failed is not None:
        result = envelope(
            ok=False,
            output=f"installing {', '.join(packages)} failed:\n{failed.message}",
            error_code="exit_nonzero" if not failed.retryable else "timeout",
            duration_ms=failed.duration_ms,
        )
        duration = failed.duration_ms
    else:
        assert ready is not None
        how = "installed" if ready.installed else "reused"
        result = envelope(
            ok=True,
            output=(
                f"{how} {len(packages)} package{'s' if len(packages) != 1 else ''} "
                f"({', '.join(packages)}) in {ready.duration_ms / 1000:.1f} s; "
                f"layer {ready.key[:12]}"
            ),
            duration_ms=ready.duration_ms,
        )
        result["layer"] = {"key": ready.key, "reused": not ready.installed}
        duration = ready.duration_ms
    now = timezone.now()
    Step.objects.get_or_create(
        attempt=attempt,
        iteration=0,
        call_index=0,
        defaults={
            "tool_call_id": f"install-{attempt.index}",
            "tool": INSTALL_TOOL,
            "arguments": {"packages": packages},
            "state": StepState.DONE,
            "result": result,
            "duration_ms": duration,
            "lease_token": lease.token,
            "completed_at": now,
        },
    )
