"""What every log line of a task or a request says about its context (structlog contextvars).

A Celery task binds its name and id, and — when it works on a run — the run's id, agent, skill
and attempt (config/celery.py calls `log_context_for_task` before each task; a slice binds the
last three from the run its claim read, `log_context_bind_claimed`). The runtime adds
the iteration and the step as it reaches them. A web request binds its request id
(cognition.ops.logcontext). Contextvars are per thread, so slices in a threads worker never see
each other's context.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from django.db import DatabaseError, connection
from structlog.contextvars import bind_contextvars, clear_contextvars, unbind_contextvars

logger = logging.getLogger(__name__)


def log_context_clear() -> None:
    clear_contextvars()


def log_context_bind_run(run_id: str) -> None:
    """Bind run_id, and the run's agent, skill and attempt when its row can be read now."""
    bind_contextvars(run_id=run_id)
    from runs.models import MotorRun

    try:
        row = (
            MotorRun.objects.filter(pk=run_id)
            .values("agent__name", "skill__name", "current_attempt_index")
            .first()
        )
    except DatabaseError:
        # The task meets the same outage at once and handles it; the line keeps the run id.
        connection.close_if_unusable_or_obsolete()
        return
    if row is not None:
        bind_contextvars(
            agent=row["agent__name"],
            skill=row["skill__name"] or "",
            attempt=row["current_attempt_index"] + 1,
        )


def log_context_bind_claimed(run: Any, attempt: Any) -> None:
    """Bind the agent, skill and attempt of a run a slice has read (with its agent and skill)."""
    bind_contextvars(
        agent=run.agent.name,
        skill=run.skill.name if run.skill_id is not None else "",
        attempt=attempt.index + 1,
    )


def log_context_bind(**values: Any) -> None:
    """Bind more context (iteration, step, tool) for the rest of the current task or request."""
    bind_contextvars(**values)


def log_context_unbind(*keys: str) -> None:
    """Drop context that no longer holds (the step and tool once the next LLM call starts)."""
    unbind_contextvars(*keys)


def log_context_for_task(task: Any, task_id: str, args: tuple[Any, ...], kwargs: dict) -> None:
    """A task starts: its name and id, and its run when one of its parameters is `run_id`."""
    clear_contextvars()
    bind_contextvars(task=getattr(task, "name", ""), task_id=task_id)
    try:
        bound = inspect.signature(task.run).bind_partial(*args, **kwargs).arguments
    except (TypeError, ValueError):
        return
    run_id = bound.get("run_id")
    if isinstance(run_id, str) and run_id:
        if getattr(task, "binds_run_context", False):
            # the task reads the run anyway and binds the rest itself (runs.loop.run_step)
            bind_contextvars(run_id=run_id)
        else:
            log_context_bind_run(run_id)
