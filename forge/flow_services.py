"""SkillForge flow services: the only place a flow changes state.

Each service locks the flow row, calls one transition, saves it and writes a `FlowEvent` (the
audit row), then wakes a worker on commit when the new state has work in it. Keyword-only
arguments, `actor=` a label ("user:alice", "agent:ops-bot", "worker", "system").
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from django.db import IntegrityError, transaction

from skills.models import Policy, Skill

from . import design
from .errors import FlowAlreadyRunning, FlowInvalid, FlowNotFound, FlowWrongState
from .models import WORKER_STATES, FlowEvent, FlowMode, FlowState, ForgeFlow

logger = logging.getLogger(__name__)

_SKILL_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$")
#: most characters of a request
MAX_REQUEST_CHARS = 4000
#: most domains / credentials one skill may ask for
MAX_ITEMS = 20


def flow_wake(flow_id: str) -> None:
    """Queue one slice of the flow. A broker outage is logged; the reaper wakes it later."""
    from .tasks import forge_advance_task

    try:
        forge_advance_task.delay(flow_id)
    except Exception:  # kombu raises several types for an unreachable broker
        logger.warning("flow %s: the wake-up could not be queued; the reaper will", flow_id)


def event_record(
    flow: ForgeFlow, *, from_state: str, actor: str, reason: str = "", **detail: Any
) -> FlowEvent:
    """Write the audit row of the flow's move from `from_state` to its current state."""
    return FlowEvent.objects.create(
        flow=flow,
        from_state=from_state,
        to_state=flow.state,
        actor=actor,
        reason=reason,
        detail=detail,
    )


def save_and_record(
    flow: ForgeFlow, *, from_state: str, actor: str, reason: str = "", **detail: Any
) -> None:
    """Save a transitioned flow (caller holds its lock), audit it, wake a worker on commit
    when the new state has work in it. The move ends the slice that made it: the lease is
    released in the same write, so the next slice may claim at once."""
    flow.lease_owner = ""
    flow.lease_expires_at = None
    flow.save()
    event_record(flow, from_state=from_state, actor=actor, reason=reason, **detail)
    if flow.state in WORKER_STATES and not flow.pending_question:
        flow_id = flow.id
        transaction.on_commit(lambda: flow_wake(flow_id))


def flow_lock(flow_id: str) -> ForgeFlow:
    flow = ForgeFlow.objects.select_for_update().filter(pk=flow_id).first()
    if flow is None:
        raise FlowNotFound(f"No SkillForge flow {flow_id!r}.", details={"flow_id": flow_id})
    return flow


def _clean_list(value: object, *, field: str, valid: Any, example: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_ITEMS:
        raise FlowInvalid(
            f"{field}: must be a list of at most {MAX_ITEMS} items, e.g. [{example!r}].",
            details={"field": field, "rule": "list"},
        )
    out: list[str] = []
    for item in value:
        if not valid(item):
            raise FlowInvalid(
                f"{field}: {str(item)[:80]!r} is not valid (e.g. {example!r}).",
                details={"field": field, "rule": "format", "value": str(item)[:80]},
            )
        if item not in out:
            out.append(item.lower() if field == "allowed_domains" else item)
    return out


def _validated_request(request: object) -> str:
    if not isinstance(request, str) or not request.strip():
        raise FlowInvalid(
            "request: say what the tool should do.",
            details={"field": "request", "rule": "required"},
        )
    if len(request) > MAX_REQUEST_CHARS:
        raise FlowInvalid(
            f"request: at most {MAX_REQUEST_CHARS} characters.",
            details={"field": "request", "rule": "max_length"},
        )
    if "\x00" in request:
        raise FlowInvalid(
            "request: must not contain NUL characters.",
            details={"field": "request", "rule": "storable"},
        )
    return request.strip()


def _edited_skill(*, agent: Any, skill_name: object) -> Skill:
    if not isinstance(skill_name, str) or not skill_name:
        raise FlowNotFound(
            "skill: an edit or an improvement names the skill to change; none was named.",
            details={"field": "skill", "rule": "required"},
        )
    policy = (
        Policy.objects.select_related("skill", "skill__current_version")
        .filter(agent=agent, skill__name=skill_name)
        .first()
    )
    if policy is None or policy.skill.current_version is None:
        raise FlowNotFound(
            f"No skill named {skill_name!r} for agent {agent.name!r}.",
            details={"skill": skill_name},
        )
    return policy.skill


def flow_start(
    *,
    agent: Any,
    request: object,
    actor: str,
    mode: str = FlowMode.CREATE,
    skill_name: object = "",
    allowed_domains: object = None,
    credentials: object = None,
    requirements: Sequence[str] = (),
) -> ForgeFlow:
    """Start a flow for `agent` in designing; a worker asks what is still unknown, then
    generates. Edit and improve modes change skill `skill_name` (its current files, domains
    and credentials are the starting point). Raises FlowInvalid (nothing created) for a bad
    parameter, FlowNotFound for an unknown skill, FlowAlreadyRunning when a flow for that
    skill has not finished."""
    text = _validated_request(request)
    if mode not in FlowMode.values:
        raise FlowInvalid(
            f"mode: one of {', '.join(FlowMode.values)}.", details={"field": "mode", "rule": "enum"}
        )
    domains = _clean_list(
        allowed_domains,
        field="allowed_domains",
        valid=design.valid_domain,
        example="api.example.org",
    )
    names = _clean_list(
        credentials,
        field="credentials",
        valid=lambda v: isinstance(v, str) and bool(design.CREDENTIAL_NAME.match(v)),
        example="MYAPP_API_KEY",
    )
    base_version = None
    name = ""
    if mode != FlowMode.CREATE:
        skill = _edited_skill(agent=agent, skill_name=skill_name)
        name, base_version = skill.name, skill.current_version
        manifest = _current_manifest(base_version)
        if manifest is None:
            raise FlowInvalid(
                f"Skill {name!r} is not an MCP skill (it has no skill.toml); only MCP skills are "
                "edited by SkillForge.",
                details={"skill": name, "rule": "not_an_mcp_skill"},
            )
        if domains is None:
            domains = list(manifest.allowed_domains)
        if names is None:
            names = list(manifest.credential_names)
    elif skill_name:
        # create: the name the new skill should get (the generated files must keep it)
        if not isinstance(skill_name, str) or not _SKILL_NAME.fullmatch(skill_name):
            raise FlowInvalid(
                "skill: lowercase letters, digits and hyphens, at most 64 characters.",
                details={"field": "skill", "rule": "format"},
            )
        name = skill_name
    flow = ForgeFlow(
        agent=agent,
        mode=mode,
        request=text,
        requirements=[str(r)[:500] for r in requirements][:MAX_ITEMS],
        skill_name=name,
        allowed_domains=domains,
        credentials=names,
        base_version=base_version,
        started_by=actor[:200],
    )
    try:
        with transaction.atomic():
            flow.save(force_insert=True)
            event_record(flow, from_state="", actor=actor, reason=f"{mode}: {text[:200]}")
            flow_id = flow.id
            transaction.on_commit(lambda: flow_wake(flow_id))
    except IntegrityError as exc:
        running = ForgeFlow.objects.filter(skill_name=name).exclude(
            state__in=[FlowState.COMPLETE, FlowState.FAILED]
        )
        other = running.values_list("id", flat=True).first()
        if other is None:
            raise
        raise FlowAlreadyRunning(
            f"Skill {name!r} already has a SkillForge flow in progress ({other}); wait for it to "
            "finish or cancel it before changing the skill again.",
            details={"skill": name, "flow_id": other, "rule": "one_flow_per_skill"},
        ) from exc
    logger.info("forge flow %s started (%s) for agent %s by %s", flow.id, mode, agent.name, actor)
    return flow


def _current_manifest(version: Any) -> Any:
    from .bundles import manifest_of_version

    return manifest_of_version(version)


def flow_respond(*, flow_id: str, answer: object, actor: str) -> ForgeFlow:
    """Answer the flow's pending question. An answer that cannot be read keeps the question
    and raises FlowInvalid saying what it needs (nothing changed)."""
    if not isinstance(answer, str) or not answer.strip():
        raise FlowInvalid(
            "answer: must not be empty.", details={"field": "answer", "rule": "required"}
        )
    with transaction.atomic():
        flow = flow_lock(flow_id)
        if flow.state != FlowState.DESIGNING or not flow.pending_question:
            raise FlowWrongState(
                f"flow {flow_id} is {flow.state} and asks nothing; only a pending question takes "
                "an answer.",
                details={"state": flow.state, "rule": "no_pending_question"},
            )
        topic = flow.pending_topic
        try:
            if topic == design.DOMAINS:
                flow.allowed_domains = design.parse_domains(answer)
            else:
                flow.credentials = design.parse_credentials(answer)
        except design.AnswerUnclear as exc:
            raise FlowInvalid(
                str(exc), details={"field": "answer", "rule": f"{topic}_answer"}
            ) from exc
        previous = flow.state
        flow.answer()
        # The answer itself is not audited: only what was read from it (names, hosts).
        read = flow.allowed_domains if topic == design.DOMAINS else flow.credentials
        save_and_record(
            flow, from_state=previous, actor=actor, reason=f"answered {topic}", read=read
        )
    return flow


def flow_cancel(*, flow_id: str, actor: str, reason: str = "cancelled by request") -> ForgeFlow:
    """End an unfinished flow as failed; a finished one raises FlowWrongState."""
    with transaction.atomic():
        flow = flow_lock(flow_id)
        if flow.terminal:
            raise FlowWrongState(
                f"flow {flow_id} is already {flow.state}.",
                details={"state": flow.state, "rule": "finished"},
            )
        previous = flow.state
        flow.fail(error=reason, message=f"SkillForge stopped: {reason}.")
        save_and_record(flow, from_state=previous, actor=actor, reason=reason)
    return flow
