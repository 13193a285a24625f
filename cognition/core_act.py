"""core.act: start a task, as a oneshot program in a bare sandbox or as an agentic run.

core.act decisions (seed 000 "Motor Run Lifecycle", seed 001 "core.act"):
- Approved skill: the policy's tools, domains and credentials apply. Explicit `tools` / `domains`
  may only *narrow* them: every entry must be granted by the policy, otherwise the call is
  refused naming the extras (an approval is never widened by the caller).
- Skill in any other status: no policy default applies; explicit `tools` and `domains` (an empty
  list means "no network") are both required, otherwise the call is refused naming the status.
  No credential of the policy is delivered to an unapproved skill.
- skill_review: only on a motor_result trigger; read/list/glob/grep, no domains, no credentials,
  at most 10 iterations, one attempt, any skill status.
- Credentials the run needs but nobody has set: the run is created and, at its first step,
  waits in awaiting_input with a question naming them and saying to set them in the admin or
  through the API (never as an answer). Setting them (cognition.services.credential_set) resumes
  it; an answer to that question is dropped, never stored.
- Energy: checked before anything is prepared; the start cost (runs.accounting: an agentic run's
  base, a oneshot's flat cost) is drained in the same transaction that creates the run, so a
  refused or busy call drains nothing; an agentic run pays its later iterations as they happen.
"""

from __future__ import annotations

import logging
import math
import secrets
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from runs.domains import check_allowed_domains
from runs.errors import InvalidRunParams
from runs.models import (
    DEFAULT_MAX_ITERATIONS,
    MAX_RUN_TIMEOUT_S,
    REVIEW_MAX_ITERATIONS,
    REVIEW_TOOLS,
    Trigger,
)
from runs.oneshot import ONESHOT_MAX_CODE_CHARS, ONESHOT_MAX_TIMEOUT_S, oneshot_run
from runs.services import run_start
from runs.tools import expand_granted
from skills.errors import SkillNotFound
from skills.extraction import skill_prepare_workspace
from skills.loading import LoadedSkill, skill_load_for_execution
from skills.toolpolicy.inputs import check_inputs, inputs_block

from . import energy
from .core import _SKILL_NAME, _lowercase_map, _require_storable, actor_label, skill_actor
from .errors import CognitionError, ConsentRequired
from .models import Agent
from .motor_skills import SKILL_DESCRIBE, run_skill_candidates
from .principals import Principal

logger = logging.getLogger(__name__)


MOTOR_RESULT = "motor_result"
MODES = ("oneshot", "agentic")


class ActRefused(CognitionError):
    """core.act refused the call before anything was created (`details`: rule, …)."""

    code = "act_refused"


def _str_list(field: str, value: Any) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise InvalidRunParams(f"{field}: must be a list of strings", field=field)
    return list(value)


def _refuse(message: str, **details: Any) -> ActRefused:
    return ActRefused(message, details=details)


def core_act(
    *,
    principal: Principal,
    agent: Agent,
    mode: str,
    task: str,
    skill: str | None = None,
    tools: Sequence[str] | None = None,
    domains: Sequence[str] | None = None,
    inputs: dict[str, Any] | None = None,
    approval_required: bool = False,
    max_iterations: int | None = None,
    timeout_s: float | None = None,
    skill_review: bool = False,
    trigger: str = Trigger.API,
    on_created: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Start a task: oneshot → {ok, result, duration_ms, error}; agentic → {run_id, status}.

    Raises (nothing created, no energy drained): InvalidRunParams (400), ActRefused (400),
    ConsentRequired (403, skill_review off a motor_result trigger), SkillNotFound (404),
    SkillHashMismatch / EnergyTooLow / MotorBusy (409).
    `on_created(result)` runs inside the transaction that creates an agentic run (the API records
    its idempotency key there, so the key and the run commit together).
    """
    if mode not in MODES:
        raise InvalidRunParams(f"mode: {mode!r} is not one of oneshot, agentic", field="mode")
    _require_storable(
        task=task, skill=skill, tools=tools, domains=domains, inputs=inputs, trigger=trigger
    )
    if mode == "oneshot":
        return _core_oneshot(agent=agent, task=task, timeout_s=timeout_s, tools=tools, skill=skill)
    return _core_agentic(
        principal=principal,
        agent=agent,
        task=task,
        skill=skill,
        tools=_str_list("tools", tools),
        domains=_str_list("domains", domains),
        inputs=inputs,
        approval_required=approval_required,
        max_iterations=max_iterations,
        timeout_s=timeout_s,
        skill_review=skill_review,
        trigger=trigger,
        on_created=on_created,
    )


def _core_oneshot(
    *,
    agent: Agent,
    task: str,
    timeout_s: float | None,
    tools: Sequence[str] | None,
    skill: str | None,
) -> dict[str, Any]:
    if tools or skill:
        raise InvalidRunParams(
            "oneshot runs a Python program in a bare sandbox; tools and skill are for agentic "
            "runs only",
            field="tools" if tools else "skill",
        )
    timeout = ONESHOT_MAX_TIMEOUT_S if timeout_s is None else timeout_s
    # The runtime's own rules, checked before energy is taken (oneshot_run would refuse after).
    if not isinstance(task, str) or not task.strip():
        raise InvalidRunParams("task: must be a non-empty Python program", field="task")
    if len(task) > ONESHOT_MAX_CODE_CHARS:
        raise InvalidRunParams(
            f"task: over the oneshot limit of {ONESHOT_MAX_CODE_CHARS} characters", field="task"
        )
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or not 0 < timeout <= ONESHOT_MAX_TIMEOUT_S
    ):
        raise InvalidRunParams(
            f"timeout_s: {timeout!r} must be a number of seconds in (0, {ONESHOT_MAX_TIMEOUT_S:g}]",
            field="timeout_s",
        )
    energy.energy_drain(agent=agent, mode=energy.Mode.ONESHOT)
    return oneshot_run(code=task, timeout_s=float(timeout)).to_dict()


def _core_agentic(
    *,
    principal: Principal,
    agent: Agent,
    task: str,
    skill: str | None,
    tools: list[str] | None,
    domains: list[str] | None,
    inputs: dict[str, Any] | None,
    approval_required: bool,
    max_iterations: int | None,
    timeout_s: float | None,
    skill_review: bool,
    trigger: str,
    on_created: Callable[[dict[str, Any]], None] | None,
) -> dict[str, Any]:
    if not isinstance(task, str) or not task.strip():
        raise InvalidRunParams("task: must not be empty", field="task")
    if trigger not in Trigger.values:
        raise InvalidRunParams(
            f"trigger: {trigger!r} is not one of {', '.join(Trigger.values)}", field="trigger"
        )
    iterations = DEFAULT_MAX_ITERATIONS if max_iterations is None else max_iterations
    if isinstance(iterations, bool) or not isinstance(iterations, int):
        raise InvalidRunParams("max_iterations: must be an integer", field="max_iterations")
    seconds = MAX_RUN_TIMEOUT_S if timeout_s is None else timeout_s
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
        or seconds != int(seconds)
    ):
        raise InvalidRunParams("timeout_s: must be a whole number of seconds", field="timeout_s")
    if inputs is not None and not isinstance(inputs, dict):
        raise InvalidRunParams("inputs: must be a JSON object", field="inputs")
    # the egress policy's own parser, before a skill is loaded or a workspace made
    check_allowed_domains(domains or [], field="domains")
    max_attempts = 3

    if skill_review:
        if trigger != MOTOR_RESULT:
            raise ConsentRequired(
                f"skill_review runs start only on a {MOTOR_RESULT!r} trigger, not {trigger!r}.",
                details={"rule": "skill_review_trigger", "trigger": trigger},
            )
        if not skill:
            raise InvalidRunParams("skill: skill_review needs the skill to review", field="skill")
        extra = [t for t in expand_granted(tools or []) if t not in REVIEW_TOOLS]
        if extra or domains:
            raise _refuse(
                "skill_review runs use only read, list, glob and grep and have no network; "
                f"refusing tools {extra or []} and domains {domains or []}.",
                rule="skill_review_readonly",
            )

    loaded: LoadedSkill | None = None
    credential_map: dict[str, str] = {}
    granted: list[str] = expand_granted(tools or [])
    allowed_domains: list[str] = list(domains or [])
    if skill:
        # Outside any transaction: a hash-mismatch demotion must commit before the refusal.
        if not isinstance(skill, str) or not _SKILL_NAME.fullmatch(skill):
            raise SkillNotFound(
                f"No skill named {str(skill)[:80]!r}.", details={"name": str(skill)[:80]}
            )
        loaded = skill_load_for_execution(
            name=skill, agent=agent, actor=skill_actor(principal), allow_disabled=skill_review
        )
        policy = loaded.policy
        if skill_review:
            granted, allowed_domains = list(REVIEW_TOOLS), []
            iterations = min(iterations, REVIEW_MAX_ITERATIONS)
            max_attempts = 1
        elif loaded.approved:
            policy_tools = expand_granted(list(policy.tools))
            extra_tools = [t for t in granted if t not in policy_tools]
            extra_domains = [d for d in allowed_domains if d not in policy.allowed_domains]
            if extra_tools or extra_domains:
                raise _refuse(
                    f"Skill {skill!r} is approved with tools {policy_tools} and domains "
                    f"{list(policy.allowed_domains)}; a call may narrow them but not add "
                    f"tools {extra_tools} or domains {extra_domains}.",
                    rule="approved_policy_bounds",
                    extra_tools=extra_tools,
                    extra_domains=extra_domains,
                )
            granted = granted if tools is not None else policy_tools
            allowed_domains = (
                allowed_domains if domains is not None else list(policy.allowed_domains)
            )
            # A value nobody has set yet does not refuse the call: the run asks for it.
            credential_map = _lowercase_map(list(policy.required_credentials))
        else:
            if tools is None or domains is None:
                missing = [f for f, v in (("tools", tools), ("domains", domains)) if v is None]
                raise _refuse(
                    f"Skill {skill!r} is {policy.status} for agent {agent.name!r}, not approved: "
                    "its policy does not apply, so explicit tools and domains are required "
                    f"(missing: {', '.join(missing)}). A human approves it in the admin.",
                    rule="unapproved_skill_needs_explicit_grants",
                    status=policy.status,
                    missing=missing,
                )

    if loaded is not None and not skill_review:
        # Before anything is created or drained: a 400 naming every failing field.
        check_inputs(loaded.policy.inputs, inputs or {}, skill=loaded.skill.name)
    candidates = ""
    if loaded is None and not skill_review:
        # Bound to no skill: the approved skills that fit the task, and the tool to read one.
        candidates = run_skill_candidates(agent=agent, task=task)
        if candidates and SKILL_DESCRIBE not in granted:
            granted = [*granted, SKILL_DESCRIBE]
    if inputs:
        # The runtime takes no inputs of its own; they travel with the task as a structured
        # block (not as a file: a new workspace file would be extracted into the skill).
        task = f"{task}\n\n{inputs_block(inputs)}"

    energy.energy_check(agent=agent, mode=energy.Mode.AGENTIC, tools=granted)

    workspace = Path(settings.MOTOR_WORKSPACES_DIR) / f"ws_{secrets.token_hex(8)}"
    instructions = ""
    try:
        if loaded is not None:
            skill_prepare_workspace(version=loaded.version, workspace=workspace)
            instructions = loaded.instructions
        else:
            workspace.mkdir(parents=True, exist_ok=False)
        with transaction.atomic():
            # Lock and drain first, then create: a busy agent or a refused start rolls back both.
            taken = energy.energy_take(agent=agent, mode=energy.Mode.AGENTIC, tools=granted)
            started = run_start(
                energy_cost=taken,
                agent_id=agent.pk,
                task=task,
                actor=actor_label(principal),
                tools=granted,
                allowed_domains=allowed_domains,
                credential_names=list(credential_map),
                workspace=str(workspace),
                skill_id=loaded.skill.pk if loaded else None,
                skill_version_id=loaded.version.pk if loaded else None,
                skill_instructions=instructions,
                skill_candidates=candidates,
                max_iterations=iterations,
                timeout_s=int(seconds),
                approval_required=bool(approval_required),
                trigger=trigger,
                max_attempts=max_attempts,
                review=skill_review,
            )
            result = {"run_id": started["run_id"], "status": str(started["status"])}
            if on_created is not None:
                on_created(result)
    except BaseException:
        shutil.rmtree(workspace, ignore_errors=True)
        raise
    logger.info(
        "core.act: agent=%s run=%s skill=%s tools=%s domains=%s trigger=%s",
        agent.name,
        started["run_id"],
        skill or "-",
        ",".join(granted) or "-",
        ",".join(allowed_domains) or "-",
        trigger,
    )
    return result
