"""The rules that decide what happens to a requested tool call before it runs."""

from __future__ import annotations

import re
from typing import Any

from runs.models import MotorRun
from runs.policy_gate import decide_call, standing_of
from runs.tools import (
    envelope,
    needs_approval,
)
from skills.toolpolicy.decide import Verdict

#: names save_credential accepts: the skill store's credential-name rule (an env variable name)
_SAVED_CREDENTIAL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")


def _runs_at_once(run: MotorRun, name: str, arguments: dict[str, Any] | None) -> bool:
    """A granted call with arguments that parse, and nothing to decide before it runs (the
    policy decision for the agent's trust level says it runs)."""
    return (
        arguments is not None
        and name in run.tools
        and not (
            run.approval_required
            and needs_approval(name, arguments, network_enabled=bool(run.allowed_domains))
        )
        and decide_call(standing_of(run), name, arguments).verdict is Verdict.RUNS
    )


def _save_offered(run: MotorRun) -> bool:
    """save_credential is offered to skill runs and to runs that may create a skill."""
    return not run.review and (run.skill_id is not None or bool(run.workspace))


def _skill_policy(run: MotorRun) -> Any:
    from skills.models import Policy

    return Policy.objects.filter(skill_id=run.skill_id, agent_id=run.agent_id).first()


def _save_denial(run: MotorRun, name: str) -> str | None:
    """Why `name` may not be saved by this run (seed 001 scope rules), or None when it may."""
    if not _SAVED_CREDENTIAL_NAME.match(name):
        return (
            f"credential name {name!r} must be an environment variable name "
            f"({_SAVED_CREDENTIAL_NAME.pattern})"
        )
    if run.skill_id is None:
        return None  # a new skill: kept as pending until extraction
    policy = _skill_policy(run)
    required = list(policy.required_credentials) if policy is not None else []
    if not required:
        return "this skill declares no required credentials, so it may not save any"
    if name not in required:
        return f"{name!r} is not among this skill's required credentials ({', '.join(required)})"
    return None


def _is_sandbox_call(run: MotorRun, name: str, arguments: dict[str, Any] | None) -> bool:
    return name in run.tools and arguments is not None


def _refusal(run: MotorRun, name: str, arguments: dict[str, Any] | None) -> dict[str, Any] | None:
    if name not in run.tools:
        granted = ", ".join(run.tools) or "none"
        return envelope(
            ok=False,
            output=f"tool {name!r} is not granted to this run (granted: {granted})",
            error_code="denied",
        )
    if arguments is None:
        return envelope(
            ok=False, output="the arguments are not a JSON object", error_code="invalid_args"
        )
    return None
