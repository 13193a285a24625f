"""The core.* service layer: what a brain (REST client, the built-in brain, any LLM through
`cognition.tools`) can ask of Motor Cortex. Views and the tool dispatcher call these functions;
they take the calling `Principal` and the agent the call is for, and return JSON-safe dicts.

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
- Credential names match in any case everywhere (vault, policy, API, runtime). The run records
  the lowercased names and `run_credentials_resolve` (the MOTOR_CREDENTIAL_RESOLVER) maps them
  back, delivering each value under both spellings so ``$API_KEY`` and ``<credential:API_KEY>``
  keep working.
- Energy: checked before anything is prepared; drained (0.15 agentic, 0.05 oneshot) in the same
  transaction that creates the run, so a refused or busy call drains nothing.
"""

from __future__ import annotations

import json
import logging
import math
import re
import secrets
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from runs import selectors as run_selectors
from runs.domains import check_allowed_domains
from runs.errors import InvalidRunParams, RunNotFound
from runs.models import (
    DEFAULT_MAX_ITERATIONS,
    MAX_RUN_TIMEOUT_S,
    REVIEW_MAX_ITERATIONS,
    REVIEW_TOOLS,
    ApprovalRequest,
    ApprovalStatus,
    MotorRun,
    Trigger,
)
from runs.oneshot import ONESHOT_MAX_CODE_CHARS, ONESHOT_MAX_TIMEOUT_S, oneshot_run
from runs.services import (
    run_approve,
    run_cancel,
    run_reject,
    run_respond,
    run_retry,
    run_start,
)
from runs.tools import expand_granted
from skills import bundle as bundle_lib
from skills.approval import approval_proposal, skill_approve
from skills.errors import PolicyTransitionNotAllowed, SkillNotFound
from skills.extraction import skill_prepare_workspace
from skills.imports import skill_import_pasted
from skills.install import skill_delete
from skills.loading import LoadedSkill, skill_load_for_execution
from skills.models import Policy, PolicyStatus
from skills.policy_edits import policy_create, policy_update
from skills.reviewing import policy_reject, policy_review
from skills.selectors import policy_credential_values, policy_detail
from skills.services import Actor

from . import energy
from .consent import consent_check
from .errors import (
    CognitionError,
    ConsentRequired,
    CredentialInvalid,
    CredentialsMissing,
    SkillShared,
)
from .models import Agent, Credential
from .principals import Principal
from .selectors import agents_visible_to, credential_list_names, credentials_resolve
from .services import credential_delete, credential_set

logger = logging.getLogger(__name__)

MOTOR_RESULT = "motor_result"
MODES = ("oneshot", "agentic")
TASK_ACTIONS = ("list", "status", "cancel", "respond", "approve", "reject", "log", "retry")
SKILL_ACTIONS = ("list", "review", "approve", "reject", "update", "delete", "import")
CREDENTIAL_ACTIONS = ("set", "delete", "list")
# The install rule of skill names (skills.models.Skill's constraint), at most 64 characters.
_SKILL_NAME = re.compile(r"[a-z](?:[a-z0-9-]{0,62}[a-z0-9])?")
#: most runs core.task list returns at once (seed 001 `limit`)
TASK_LIST_MAX = 100


class ActRefused(CognitionError):
    """core.act refused the call before anything was created (`details`: rule, …)."""

    code = "act_refused"


class CredentialNameClash(CognitionError):
    code = "credential_name_clash"
    http_status = 409


# --- actors --------------------------------------------------------------------------------------


def actor_label(principal: Principal, *, relayed: bool = False) -> str:
    """The audit label of a runtime change; an agent that passed the consent gate relays."""
    if principal.is_agent and relayed:
        return f"{principal.label} relaying {principal.user.get_username()}"
    return principal.label


def skill_actor(principal: Principal, *, relayed: bool = False) -> Actor:
    """The skills app's Actor for `principal` (see PrincipalAPIView.actor)."""
    if principal.agent is None:
        return Actor(user=principal.user, label=principal.label)  # type: ignore[arg-type]
    if relayed:
        owner = principal.user
        return Actor(user=owner, label=f"{principal.label} relaying {owner.get_username()}")
    return Actor(user=None, label=principal.label)


def gate(*, principal: Principal, action: str, trigger: str | None) -> Actor:
    """The consent gate, then the actor the gated change is recorded under."""
    consent_check(principal=principal, action=action, trigger=trigger)
    return skill_actor(principal, relayed=True)


# --- credential names between the vault and the runtime -----------------------------------------


def _run_credential_name(name: str) -> str:
    """The runtime's spelling of a vault/policy name: lowercase (`API_KEY` → `api_key`)."""
    lowered = name.lower()
    if not lowered[:1].isalpha():
        # `_TOKEN` is a valid vault name but the runtime wants a leading letter.
        raise CredentialInvalid(
            f"Credential name {name!r} cannot be handed to a run: run credential names start "
            "with a letter.",
            details={"field": "credentials", "rule": "run_credential_name", "name": name},
        )
    return lowered


def _lowercase_map(names: Sequence[str]) -> dict[str, str]:
    """{lowercased: original}; refuses two names that differ only in case."""
    mapping: dict[str, str] = {}
    for name in names:
        key = _run_credential_name(name)
        if key in mapping and mapping[key] != name:
            raise CredentialNameClash(
                f"Credentials {mapping[key]!r} and {name!r} differ only in case; a run cannot "
                "tell them apart. Rename one of them.",
                details={"names": sorted([mapping[key], name])},
            )
        mapping[key] = name
    return mapping


def run_credentials_resolve(*, agent_id: int, run_id: str, names: list[str]) -> dict[str, str]:
    """MOTOR_CREDENTIAL_RESOLVER: values for run `run_id`'s (lowercase) credential names.

    Never raises for a missing value: that name is left out, and the runtime asks the human to
    set it (the run waits in awaiting_input). When the run executes an approved skill, the
    policy's stored values come first, then the vault. Names match in any case; each value is
    returned under the run's name and under the policy's spelling (so ``$API_KEY`` and
    ``<credential:API_KEY>`` keep working).
    """
    agent = Agent.objects.get(pk=agent_id)
    run = MotorRun.objects.filter(pk=run_id, agent_id=agent_id).first()
    policy = None
    if run is not None and run.skill_id is not None and not run.review:
        policy = (
            Policy.objects.filter(skill_id=run.skill_id, agent_id=agent_id)
            .filter(status=PolicyStatus.APPROVED)
            .first()
        )
    # The spelling a program reads ($API_KEY): the vault's, overridden by the policy's.
    spelled = list(Credential.objects.filter(agent=agent).values_list("name", flat=True))
    if policy is not None:
        spelled += [*policy.required_credentials, *policy_credential_values(policy=policy)]
    by_lower = {n.lower(): n for n in spelled}
    out: dict[str, str] = {}
    for run_name in names:
        try:
            values = credentials_resolve(agent=agent, names=[run_name], policy=policy)
        except CredentialsMissing:
            continue  # not set anywhere: the run asks for it
        value = next(iter(values.values()))
        out[run_name] = value
        out[by_lower.get(run_name.lower(), run_name)] = value
    if len(out) < len(names):
        logger.info(
            "run credentials not set: agent=%s run=%s names=%s",
            agent.name,
            run_id,
            ",".join(n for n in names if n not in out),
        )
    return out


# --- core.act ------------------------------------------------------------------------------------


def _str_list(field: str, value: Any) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise InvalidRunParams(f"{field}: must be a list of strings", field=field)
    return list(value)


def _require_storable(**values: Any) -> None:
    """Refuse strings PostgreSQL cannot store (NUL, lone surrogates) before anything happens."""
    for field, value in values.items():
        where = bundle_lib.unstorable_text(value, field)
        if where is not None:
            raise InvalidRunParams(
                f"{field}: {where} holds a NUL or an unpaired surrogate character",
                field=field,
            )


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
    if inputs:
        # The runtime takes no inputs of its own; they travel with the task text (not as a file:
        # a new workspace file would be extracted into the skill as a content change).
        task = f"{task}\n\nInputs (JSON): {json.dumps(inputs, sort_keys=True)}"

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
            energy.energy_drain(agent=agent, mode=energy.Mode.AGENTIC, tools=granted)
            started = run_start(
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


# --- core.task -----------------------------------------------------------------------------------


def own_run(*, agent: Agent, run_id: Any) -> MotorRun:
    """The agent's run `run_id`; another agent's run is not found (404), like a missing one."""
    if not isinstance(run_id, str) or not run_id or len(run_id) > 32 or "\x00" in run_id:
        raise RunNotFound(f"no run with id {str(run_id)[:40]!r}", run_id=str(run_id)[:40])
    run = MotorRun.objects.filter(pk=run_id, agent=agent).first()
    if run is None:
        raise RunNotFound(f"no run with id {run_id!r}", run_id=run_id)
    return run


def pending_approval(*, run: MotorRun) -> dict[str, Any] | None:
    approval = (
        ApprovalRequest.objects.filter(run=run, status=ApprovalStatus.PENDING)
        .order_by("-id")
        .first()
    )
    if approval is None:
        return None
    return {
        "id": approval.pk,
        "tool": approval.action.get("tool"),
        "arguments": approval.action.get("arguments"),
        "summary": approval.summary,
        "action_hash": approval.action_hash,
        "expires_at": approval.expires_at.isoformat(),
    }


def run_detail(*, run: MotorRun) -> dict[str, Any]:
    """Status, steps, pending question and pending approval of one run (JSON-safe)."""
    data = run_selectors.run_status(run_id=run.pk)
    assert data is not None
    data["pending_approval"] = pending_approval(run=run)
    data["skill"] = run.skill.name if run.skill_id and run.skill else None
    data["review"] = run.review
    data["trigger"] = run.trigger
    for key in ("created_at", "started_at", "completed_at"):
        data[key] = data[key].isoformat() if data[key] else None
    return data


def core_task(
    *,
    principal: Principal,
    agent: Agent,
    action: str,
    trigger: str | None,
    run_id: str | None = None,
    status: str | None = None,
    limit: int | None = None,
    answer: str | None = None,
    approval_id: int | None = None,
    note: str = "",
    guidance: str = "",
) -> dict[str, Any]:
    """core.task: list, status, cancel, respond, approve, reject, log, retry.

    respond, approve and reject pass the consent gate first; a refusal changes nothing.
    """
    if action not in TASK_ACTIONS:
        raise InvalidRunParams(
            f"action: {action!r} is not one of {', '.join(TASK_ACTIONS)}", field="action"
        )
    if action == "list":
        from runs.models import RunStatus

        if status is not None and status not in RunStatus.values:
            raise InvalidRunParams(
                f"status: {status!r} is not one of {', '.join(RunStatus.values)}", field="status"
            )
        count = 20 if limit is None else limit
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 100:
            raise InvalidRunParams("limit: must be an integer in 1..100", field="limit")
        rows, total = run_selectors.run_list(agent_id=agent.pk, status=status, limit=count)
        for row in rows:
            for key in ("started_at", "completed_at"):
                row[key] = row[key].isoformat() if row[key] else None
        return {"runs": rows, "total": total}
    run = own_run(agent=agent, run_id=run_id)
    if action == "status":
        return run_detail(run=run)
    if action == "log":
        return {"run_id": run.pk, "log": run_selectors.run_log(run_id=run.pk) or ""}
    if action == "cancel":
        return dict(run_cancel(run_id=run.pk, actor=actor_label(principal)))
    if action == "retry":
        if not isinstance(guidance, str):
            raise InvalidRunParams("guidance: must be a string", field="guidance")
        changed = run_retry(run_id=run.pk, guidance=guidance, actor=actor_label(principal))
        run.refresh_from_db()
        return {**changed, "attempt_index": run.current_attempt_index}
    _require_storable(answer=answer, note=note, guidance=guidance)
    gated = {"respond": "task.respond", "approve": "task.approve", "reject": "task.reject"}
    consent_check(principal=principal, action=gated[action], trigger=trigger)
    label = actor_label(principal, relayed=True)
    if action == "respond":
        if not isinstance(answer, str):
            raise InvalidRunParams("answer: must be a non-empty string", field="answer")
        return dict(run_respond(run_id=run.pk, answer=answer, actor=label))
    chosen = approval_id
    if chosen is None:
        current = pending_approval(run=run)
        if current is None:
            from runs.errors import InvalidTransition

            raise InvalidTransition(
                f"run {run.pk} is {run.status}; it has no pending approval",
                run_id=run.pk,
                status=run.status,
            )
        chosen = current["id"]
    if isinstance(chosen, bool) or not isinstance(chosen, int) or not 0 < chosen < 2**63:
        raise InvalidRunParams("approval_id: must be a positive integer", field="approval_id")
    if action == "approve":
        return dict(run_approve(run_id=run.pk, approval_id=chosen, actor=label))
    if not isinstance(note, str):
        raise InvalidRunParams("note: must be a string", field="note")
    return dict(run_reject(run_id=run.pk, approval_id=chosen, actor=label, note=note))


# --- core.skill ----------------------------------------------------------------------------------


def skill_policy(*, agent: Agent, name: Any) -> Policy:
    """The agent's policy for skill `name`; 404 whether the skill or the policy is absent."""
    if not isinstance(name, str) or not _SKILL_NAME.fullmatch(name):
        shown = str(name)[:80]
        raise SkillNotFound(
            f"No skill named {shown!r} for agent {agent.name!r}.", details={"name": shown}
        )
    policy = (
        Policy.objects.select_related("skill", "skill__current_version", "agent", "approved_by")
        .filter(skill__name=name, agent=agent)
        .first()
    )
    if policy is None:
        raise SkillNotFound(
            f"No skill named {name!r} for agent {agent.name!r}.", details={"name": name}
        )
    return policy


def _policy_to_review(*, principal: Principal, agent: Agent, name: Any) -> Policy:
    """The agent's policy for `name`. A skill that another agent of the same owner holds gets a
    policy of this agent's own first (needs_reapproval; seed 000 Scenario 5: each agent approves
    a shared skill itself). Any other skill without a policy is not found."""
    try:
        return skill_policy(agent=agent, name=name)
    except SkillNotFound:
        if not Policy.objects.filter(skill__name=name, agent__owner_id=agent.owner_id).exists():
            raise
    try:
        return policy_create(skill=name, agent=agent, actor=skill_actor(principal))
    except PolicyTransitionNotAllowed:  # created meanwhile
        return skill_policy(agent=agent, name=name)


def skill_detail(*, policy: Policy) -> dict[str, Any]:
    policy = Policy.objects.select_related(
        "skill", "skill__current_version", "agent", "approved_by", "approved_version"
    ).get(pk=policy.pk)
    return {**policy_detail(policy=policy), "description": policy.skill.description}


def skill_review_facts(*, principal: Principal, policy: Policy) -> dict[str, Any]:
    """Run the deterministic review when due; return the stored facts."""
    if policy.status in (PolicyStatus.PENDING_REVIEW, PolicyStatus.NEEDS_REAPPROVAL):
        policy = policy_review(policy=policy, actor=skill_actor(principal))
    return {
        "skill": policy.skill.name,
        "status": policy.status,
        "reviewed_hash": policy.reviewed_hash,
        "reviewed_at": policy.reviewed_at.isoformat() if policy.reviewed_at else None,
        "facts": policy.review_facts,
        "proposal": approval_proposal(policy=policy).to_dict(),
    }


def skill_import_for(
    *, principal: Principal, agent: Agent, text: str, install_as: str | None = None
) -> Policy:
    """Import a pasted SKILL.md for `agent` (pending_review), under `install_as` when given;
    refuses another agent's name, and a name installed from another source."""
    try:
        name = install_as or bundle_lib.bundle_from_pasted(text).name
    except bundle_lib.BundleError:
        name = None  # the import service reports every problem of the text
    if name is not None:
        # Skills are shared by name; new content becomes everyone's current version, so only
        # the admin may put content under a name other agents hold.
        holders = Policy.objects.filter(skill__name=name)
        if principal.agent is not None:
            holders = holders.exclude(agent=principal.agent)
        else:
            holders = holders.exclude(agent__in=agents_visible_to(user=principal.user))
        if holders.exists():
            raise SkillShared(
                f"A skill named {name!r} is already used by other agents; pick another name, "
                "or have an administrator import the new version in the admin.",
                details={"name": name},
            )
    result = skill_import_pasted(
        text=text, actor=skill_actor(principal), agent=agent, source="api", install_as=install_as
    )
    assert result.policy is not None  # an import with an agent always has its policy
    return result.policy


def skill_delete_for(*, principal: Principal, policy: Policy, actor: Actor) -> None:
    """Delete the skill unless agents the caller does not act for hold a policy for it."""
    others = Policy.objects.filter(skill=policy.skill).exclude(agent=policy.agent)
    if principal.agent is None:
        others = others.exclude(agent__in=agents_visible_to(user=principal.user))
    if others.exists():
        raise SkillShared(
            f"Skill {policy.skill.name!r} is also used by other agents; only a superuser or the "
            "admin can delete it for everyone.",
            details={"name": policy.skill.name},
        )
    skill_delete(skill=policy.skill, actor=actor, reason="deleted through the API")


def core_skill(
    *,
    principal: Principal,
    agent: Agent,
    action: str,
    trigger: str | None,
    name: str | None = None,
    status: str | None = None,
    note: str = "",
    skill_md: str | None = None,
    fields: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """core.skill: list, review, approve, reject, update, delete, import (mutations gated)."""
    from .selectors import skills_for_agent

    if action not in SKILL_ACTIONS:
        raise InvalidRunParams(
            f"action: {action!r} is not one of {', '.join(SKILL_ACTIONS)}", field="action"
        )
    if action == "list":
        if status is not None and status not in PolicyStatus.values:
            raise InvalidRunParams(
                f"status: {status!r} is not one of {', '.join(PolicyStatus.values)}",
                field="status",
            )
        return {
            "skills": [
                {
                    "name": s.name,
                    "description": s.description,
                    "status": s.policy_status,
                    "version": s.version_number,
                    "content_hash": s.content_hash,
                }
                for s in skills_for_agent(agent=agent, status=status).order_by("name")[:200]
            ]
        }
    if action == "import":
        if not isinstance(skill_md, str) or not skill_md.strip():
            raise InvalidRunParams("skill_md: the SKILL.md text is required", field="skill_md")
        return skill_detail(
            policy=skill_import_for(principal=principal, agent=agent, text=skill_md)
        )
    if action == "review":
        policy = _policy_to_review(principal=principal, agent=agent, name=name)
        return skill_review_facts(principal=principal, policy=policy)
    policy = skill_policy(agent=agent, name=name)
    actor = gate(principal=principal, action=f"skill.{action}", trigger=trigger)
    if action == "approve":
        return skill_detail(policy=skill_approve(policy=policy, actor=actor, note=note or ""))
    if action == "reject":
        if not isinstance(note, str) or not note.strip():
            raise InvalidRunParams("note: a rejection needs a note", field="note")
        return skill_detail(policy=policy_reject(policy=policy, actor=actor, note=note))
    if action == "delete":
        skill_delete_for(principal=principal, policy=policy, actor=actor)
        return {"deleted": policy.skill.name}
    data = dict(fields or {})
    if not set(data) - {"reason"}:
        raise InvalidRunParams("fields: give at least one policy field to update", field="fields")
    return skill_detail(
        policy=policy_update(
            policy=policy,
            actor=actor,
            allowed_domains=data.get("domains"),
            required_credentials=data.get("credentials"),
            tools=data.get("tools"),
            dependencies=data.get("dependencies"),
            inputs=data.get("inputs"),
            set_credentials=data.get("credential_values"),
            clear_credentials=data.get("clear_credential_values"),
            reason=data.get("reason", "") or "",
        )
    )


# --- core.credential -----------------------------------------------------------------------------


def core_credential(
    *, principal: Principal, agent: Agent, action: str, name: str | None = None, value: Any = None
) -> dict[str, Any]:
    """core.credential: set, delete, list names. Values are never returned."""
    if action not in CREDENTIAL_ACTIONS:
        raise InvalidRunParams(
            f"action: {action!r} is not one of {', '.join(CREDENTIAL_ACTIONS)}", field="action"
        )
    if action == "list":
        return {"names": credential_list_names(agent=agent)}
    if not isinstance(name, str):
        raise CredentialInvalid(
            "A credential name is required.", details={"field": "name", "rule": "required"}
        )
    if action == "set":
        credential = credential_set(agent=agent, name=name, value=value, actor=principal.label)
        return {"name": credential.name, "value": "[set]"}
    credential_delete(agent=agent, name=name, actor=principal.label)
    return {"deleted": name}
