"""Starting a run: `run_start` checks the parameters, reserves the agent's one active run
(the mutex, then the database's constraint as the authority) and writes the run, its first
attempt and its first event, sending the first slice's message once they are committed."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TypedDict

from django.apps import apps
from django.db import IntegrityError, transaction
from django.utils import timezone

from runs.domains import check_allowed_domains
from runs.errors import InvalidRunParams, MotorBusy
from runs.ledger_start import ledger_insert
from runs.models import (
    ACTIVE_STATUSES,
    DEFAULT_MAX_ITERATIONS,
    MAX_ITERATIONS_CEILING,
    MAX_RUN_TIMEOUT_S,
    REVIEW_MAX_ITERATIONS,
    REVIEW_TOOLS,
    Attempt,
    MotorRun,
    RunEvent,
    RunStatus,
    Trigger,
    new_run_id,
)
from runs.mutex import mutex_hold, mutex_release, mutex_reserve
from runs.tools import SYNTHETIC_TOOLS, expand_granted
from runs.wakeups import wake_up
from runs.workspaces import RULE as WORKSPACE_RULE
from runs.workspaces import NotAProjectWorkspace, check_run_workspace

_CREDENTIAL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


_ACTIVE_CONSTRAINT = "motorrun_one_active_per_agent"


class RunStarted(TypedDict):
    run_id: str
    status: str


def _validate_start(
    *,
    task: str,
    tools: Sequence[str],
    allowed_domains: Sequence[str],
    credential_names: Sequence[str],
    max_iterations: int,
    timeout_s: int,
    max_attempts: int,
    trigger: str,
) -> list[str]:
    if not task or not task.strip():
        raise InvalidRunParams("task: must not be empty", field="task")
    if not 1 <= max_iterations <= MAX_ITERATIONS_CEILING:
        raise InvalidRunParams(
            f"max_iterations: {max_iterations} is outside 1..{MAX_ITERATIONS_CEILING}",
            field="max_iterations",
        )
    if not 1 <= timeout_s <= MAX_RUN_TIMEOUT_S:
        raise InvalidRunParams(
            f"timeout_s: {timeout_s} is outside 1..{MAX_RUN_TIMEOUT_S} seconds", field="timeout_s"
        )
    if max_attempts < 1:
        raise InvalidRunParams("max_attempts: must be at least 1", field="max_attempts")
    if trigger not in Trigger.values:
        raise InvalidRunParams(
            f"trigger: {trigger!r} is not one of {', '.join(Trigger.values)}", field="trigger"
        )
    check_allowed_domains(allowed_domains)
    for name in credential_names:
        # Any case is accepted; the run keeps the lower-case form (see run_start).
        if not isinstance(name, str) or not _CREDENTIAL_NAME.match(name.lower()):
            raise InvalidRunParams(
                f"credential_names: {name!r} must match {_CREDENTIAL_NAME.pattern}",
                field="credential_names",
            )
    synthetic = [name for name in tools if name in SYNTHETIC_TOOLS]
    if synthetic:
        raise InvalidRunParams(
            f"tools: {', '.join(synthetic)} is host-side and always available; do not grant it",
            field="tools",
        )
    return expand_granted(list(tools))


def run_start(
    *,
    agent_id: int,
    task: str,
    actor: str,
    tools: Sequence[str] = (),
    allowed_domains: Sequence[str] = (),
    credential_names: Sequence[str] = (),
    workspace: str = "",
    skill_id: int | None = None,
    skill_version_id: int | None = None,
    skill_instructions: str = "",
    skill_candidates: str = "",
    max_iterations: int = DEFAULT_MAX_ITERATIONS,
    timeout_s: int = MAX_RUN_TIMEOUT_S,
    approval_required: bool = False,
    trigger: str = Trigger.API,
    parent_run_id: str | None = None,
    max_attempts: int = 3,
    review: bool = False,
    energy_cost: float = 0.0,
) -> RunStarted:
    """Create a run in `created` and enqueue its first slice on commit.

    `energy_cost` is what its start took from the agent (the caller drained it in the same
    transaction); the run adds each paid iteration to it.

    `review=True` starts a skill review run: only read, list, glob and grep (the default when no
    tools are given), no domains, no credentials, no host-side tools, at most 10 iterations and
    a single attempt.

    Raises MotorBusy (naming the active run) when the agent already has an active run,
    InvalidRunParams for a parameter that breaks a rule. Either way nothing is created.
    """
    granted = _validate_start(
        task=task,
        tools=tools,
        allowed_domains=allowed_domains,
        credential_names=credential_names,
        max_iterations=max_iterations,
        timeout_s=timeout_s,
        max_attempts=max_attempts,
        trigger=trigger,
    )
    try:
        workspace = check_run_workspace(workspace)
    except NotAProjectWorkspace as exc:
        raise InvalidRunParams(str(exc), field="workspace", rule=WORKSPACE_RULE) from None
    if review:
        granted = granted or list(REVIEW_TOOLS)
        extra = [name for name in granted if name not in REVIEW_TOOLS]
        if extra:
            raise InvalidRunParams(
                f"tools: a review run may use only {', '.join(REVIEW_TOOLS)}, not "
                f"{', '.join(extra)}",
                field="tools",
            )
        if allowed_domains or credential_names:
            raise InvalidRunParams(
                "allowed_domains/credential_names: a review run has no network and no credentials",
                field="allowed_domains",
            )
        if max_iterations > REVIEW_MAX_ITERATIONS:
            max_iterations = REVIEW_MAX_ITERATIONS
        max_attempts = 1
    agents = apps.get_model("cognition", "Agent").objects
    if transaction.get_connection().in_atomic_block and not agents.filter(pk=agent_id).exists():
        # In a caller's transaction the agent's foreign key is only checked at its commit.
        raise InvalidRunParams(f"agent_id: no agent with id {agent_id}", field="agent_id")
    run_id = new_run_id()
    reserved = mutex_reserve(agent_id=agent_id, run_id=run_id)  # raises MotorBusy
    try:
        run = MotorRun(
            id=run_id,
            agent_id=agent_id,
            task=task,
            tools=granted,
            allowed_domains=list(allowed_domains),
            credential_names=list(dict.fromkeys(n.lower() for n in credential_names)),
            workspace=workspace,
            skill_id=skill_id,
            skill_version_id=skill_version_id,
            skill_instructions=skill_instructions,
            skill_candidates=skill_candidates,
            max_iterations=max_iterations,
            timeout_s=timeout_s,
            approval_required=approval_required,
            trigger=trigger,
            parent_run_id=parent_run_id,
            max_attempts=max_attempts,
            review=review,
            idle_since=timezone.now(),
            energy_cost=energy_cost,
        )
        attempt = Attempt(
            run=run,
            index=0,
            max_iterations=max_iterations,
            messages=[{"role": "user", "content": task}],
        )
        event = RunEvent(run=run, from_status="", to_status=run.status, actor=actor, detail={})
        # The first message goes out once the insert committed (see ledger_insert), whose
        # foreign key checks that the agent exists; so is the fast-path key extended.
        ledger_insert(run, attempt, event, announce=lambda: wake_up(run_id, 0, remember=False))
        transaction.on_commit(lambda: mutex_hold(agent_id=agent_id, run_id=run_id))
    except IntegrityError as exc:
        if reserved:
            mutex_release(agent_id=agent_id, run_id=run_id)
        if _ACTIVE_CONSTRAINT not in str(exc):
            if not agents.filter(pk=agent_id).exists():
                raise InvalidRunParams(
                    f"agent_id: no agent with id {agent_id}", field="agent_id"
                ) from None
            raise
        # The database is the authority: name the run it holds, and repair the fast path.
        active = (
            MotorRun.objects.filter(agent_id=agent_id, status__in=ACTIVE_STATUSES)
            .values_list("id", flat=True)
            .first()
        )
        if active is None:  # it finished in the meantime; the caller may simply try again
            raise MotorBusy(run_id="(finished just now)") from None
        mutex_hold(agent_id=agent_id, run_id=active)
        raise MotorBusy(run_id=active) from None
    except BaseException:
        if reserved:
            mutex_release(agent_id=agent_id, run_id=run_id)
        raise
    return {"run_id": run_id, "status": RunStatus.CREATED}
