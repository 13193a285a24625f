"""The core.* tools as OpenAI function-calling schemas, and the dispatcher a brain's LLM loop calls.

OpenAI function names allow only letters, digits, underscores and hyphens, so the seeds' dotted
names are spelled with an underscore: core.act → core_act, core.task → core_task,
core.skill → core_skill, core.credential → core_credential. `core_dispatch` accepts either.

`core_dispatch` never raises for a refused call: the domain error comes back as
`{"ok": False, "error": {code, message, details}}` so the model can read it (errors as data);
a success is `{"ok": True, "result": …}`.
"""

from __future__ import annotations

import copy
from typing import Any

from forge.errors import ForgeError
from runs.errors import RunError
from runs.models import (
    DEFAULT_MAX_ITERATIONS,
    MAX_ITERATIONS_CEILING,
    MAX_RUN_TIMEOUT_S,
    RunStatus,
)
from skills.errors import SkillError
from skills.models import PolicyStatus
from skills.toolpolicy import manifests

from .core_act import core_act
from .core_credential import CREDENTIAL_ACTIONS, core_credential
from .core_skill import SKILL_ACTIONS, core_skill
from .core_task import TASK_ACTIONS, core_task
from .errors import AgentRequired, CognitionError
from .principals import Principal
from .selectors import agent_for_human

# What core.act may grant: exactly the manifests' grantable set. Naming a host-side tool
# (ask_user, request_approval, save_credential) is allowed and changes nothing: those are
# offered to every run that may use them.
GRANTABLE_TOOLS = list(manifests.GRANTABLE)

_STR = {"type": "string"}


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


_SCHEMAS: list[dict[str, Any]] = [
    _tool(
        "core_act",
        "Delegate a task to Motor Cortex. mode 'oneshot' runs a short Python program in a bare "
        "sandbox and returns its output at once (max 5 s, no tools, no network). mode 'agentic' "
        "starts an asynchronous multi-step run and returns its run_id; the outcome arrives later "
        "as a motor_result signal. Only one agentic run per agent at a time.",
        {
            "mode": {"type": "string", "enum": ["oneshot", "agentic"]},
            "task": {
                "type": "string",
                "description": "A Python program (oneshot) or what to accomplish (agentic).",
            },
            "skill": {
                "type": "string",
                "description": "Agentic only: a skill to load. An approved skill brings its "
                "policy's tools, domains and credentials; any other status needs explicit tools "
                "and domains.",
            },
            "tools": {
                "type": "array",
                "items": {"type": "string", "enum": GRANTABLE_TOOLS},
                "description": "Agentic only: tools to grant (least privilege). For an approved "
                "skill they may only narrow the policy's tools.",
            },
            "domains": {
                "type": "array",
                "items": _STR,
                "description": "Agentic only: domains the sandbox may reach; [] = no network.",
            },
            "inputs": {"type": "object", "description": "Agentic only: inputs for the skill."},
            "approval_required": {
                "type": "boolean",
                "description": "Pause before irreversible actions for the owner's approval.",
            },
            "max_iterations": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_ITERATIONS_CEILING,
                "description": f"Agentic only: iteration cap (default {DEFAULT_MAX_ITERATIONS}).",
            },
            "timeout_s": {
                "type": "number",
                "description": f"Seconds: at most 5 for oneshot, {MAX_RUN_TIMEOUT_S} for agentic.",
            },
            "skill_review": {
                "type": "boolean",
                "description": "Security review of a skill: read-only tools, no network, 10 "
                "iterations. Only when handling a motor_result.",
            },
        },
        ["mode", "task"],
    ),
    _tool(
        "core_task",
        "Manage Motor Cortex runs. list: recent runs (status filter, limit). status: details with "
        "steps, pending question and pending approval. cancel: stop an active run. respond: "
        "answer the pending question. approve / reject: decide the pending action. log: the last "
        "16 KB of the execution log. retry: a new attempt of a failed run, with guidance. "
        "respond, approve and reject need the user's consent.",
        {
            "action": {"type": "string", "enum": list(TASK_ACTIONS)},
            "run_id": {"type": "string", "description": "The run (all actions but list)."},
            "status": {
                "type": "string",
                "enum": list(RunStatus.values),
                "description": "list only: filter by status.",
            },
            "limit": {"type": "integer", "minimum": 1, "maximum": 100},
            "answer": {"type": "string", "description": "respond: the user's answer."},
            "approval_id": {
                "type": "integer",
                "description": "approve/reject: the pending approval (default: the current one).",
            },
            "note": {"type": "string", "description": "reject: why."},
            "guidance": {"type": "string", "description": "retry: what to do differently."},
        },
        ["action"],
    ),
    _tool(
        "core_skill",
        "Manage skills. list (status filter), search: the skills that fit a request, ranked "
        "(query), describe: a skill's whole SKILL.md (name), review: the deterministic review "
        "facts, import: a pasted SKILL.md (lands pending_review), perceive: what the skill cortex "
        "learned fits a task (query), plan: the execution plan of a skill for a task (name, "
        "query). find: when no installed skill fits, search the configured skill sources "
        "(query: 3-5 English keywords) for at most 3 candidates with their review findings and "
        "an acquisition number. acquire: install and approve one candidate (acquisition, name; "
        "fields.tools narrows what the approval grants) on the user's yes. approve, reject, "
        "update (policy fields), delete, take_up (a released skill), retain (keep) and acquire "
        "need the user's consent. SkillForge builds a new tool as a "
        "sandboxed MCP server: create (request; domains and credentials when known), edit or "
        "improve an existing one (name, request); flows / flow (flow_id) show progress; answer "
        "(flow_id, answer) replies to the flow's question; deploy (flow_id, confirm_domains "
        "when asked) approves it; decline and cancel stop it. create, edit, improve, answer, "
        "deploy and decline need the user's own words.",
        {
            "action": {"type": "string", "enum": list(SKILL_ACTIONS)},
            "name": {
                "type": "string",
                "description": "The skill (all actions but list, search, import).",
            },
            "query": {
                "type": "string",
                "description": "search: what the skill should do; perceive, plan: the task; "
                "find: 3-5 keywords.",
            },
            "acquisition": {
                "type": "integer",
                "description": "acquire: the acquisition number find returned.",
            },
            "keep": {
                "type": "boolean",
                "description": "retain: true keeps the skill long-term, false releases it.",
            },
            "status": {"type": "string", "enum": list(PolicyStatus.values)},
            "note": {"type": "string", "description": "approve/reject: a note (reject: required)."},
            "skill_md": {"type": "string", "description": "import: the full SKILL.md text."},
            "request": {
                "type": "string",
                "description": "create/edit/improve: what the tool should do or what to change.",
            },
            "flow_id": {"type": "string", "description": "A SkillForge flow (forge_…)."},
            "answer": {
                "type": "string",
                "description": "answer: the user's reply to the flow's question (host names, "
                "vault entry names; never a secret value).",
            },
            "domains": {
                "type": "array",
                "items": _STR,
                "description": "create: hosts it may reach.",
            },
            "credentials": {
                "type": "array",
                "items": _STR,
                "description": "create: vault entry names it needs (names, never values).",
            },
            "confirm_domains": {
                "type": "array",
                "items": _STR,
                "description": "deploy: the domains the user confirmed, when the flow asks.",
            },
            "fields": {
                "type": "object",
                "description": "update: any of domains, credentials, tools, dependencies, "
                "inputs, credential_values, clear_credential_values, reason. acquire: tools "
                "(narrows the approval's tools).",
                "properties": {
                    "domains": {"type": "array", "items": _STR},
                    "credentials": {"type": "array", "items": _STR},
                    "tools": {"type": "array", "items": _STR},
                    "dependencies": {"type": "array", "items": _STR},
                    "inputs": {"type": "object"},
                    "credential_values": {"type": "object"},
                    "clear_credential_values": {"type": "array", "items": _STR},
                    "reason": _STR,
                },
                "additionalProperties": False,
            },
        },
        ["action"],
    ),
    _tool(
        "core_credential",
        "Manage the agent's credential vault: set a value, delete one, list names. Values are "
        "never returned; runs see them only as <credential:NAME> placeholders.",
        {
            "action": {"type": "string", "enum": list(CREDENTIAL_ACTIONS)},
            "name": {"type": "string", "description": "set/delete: e.g. API_KEY."},
            "value": {"type": "string", "description": "set: the secret."},
        },
        ["action"],
    ),
]

TOOL_NAMES: dict[str, str] = {
    "core_act": "core.act",
    "core_task": "core.task",
    "core_skill": "core.skill",
    "core_credential": "core.credential",
}


def core_tool_schemas() -> list[dict[str, Any]]:
    """Fresh copies of the four core.* schemas ({"type": "function", "function": {…}})."""
    return copy.deepcopy(_SCHEMAS)


def _pick(arguments: dict[str, Any], *names: str) -> dict[str, Any]:
    return {n: arguments[n] for n in names if n in arguments and arguments[n] is not None}


def core_dispatch(
    *, principal: Principal, tool_name: str, arguments: dict[str, Any], trigger: str
) -> dict[str, Any]:
    """Run one core.* tool call for `principal` (an agent, or a human naming `agent`)."""
    name = tool_name.replace(".", "_")
    try:
        if name not in TOOL_NAMES:
            raise CognitionError(
                f"Unknown tool {tool_name!r}; the core tools are {', '.join(TOOL_NAMES.values())}.",
                details={"tool": tool_name},
            )
        if not isinstance(arguments, dict):
            raise CognitionError("Tool arguments must be a JSON object.", details={})
        args = dict(arguments)
        if principal.agent is not None:
            agent = principal.agent
        else:
            ref = args.pop("agent", None)
            if ref is None:
                raise AgentRequired(
                    "A human calling a core tool must name the agent in 'agent'.",
                    details={"parameter": "agent", "rule": "required"},
                )
            agent = agent_for_human(user=principal.user, ref=str(ref))
        allowed = set(
            _SCHEMAS[list(TOOL_NAMES).index(name)]["function"]["parameters"]["properties"]
        )
        unknown = sorted(set(args) - allowed)
        if unknown:
            raise CognitionError(
                f"{TOOL_NAMES[name]}: unknown argument(s) {', '.join(unknown)}.",
                details={"unknown": unknown},
            )
        if name == "core_act":
            result = core_act(
                principal=principal,
                agent=agent,
                mode=args.get("mode", ""),
                task=args.get("task", ""),
                trigger=trigger,
                **_pick(
                    args,
                    "skill",
                    "tools",
                    "domains",
                    "inputs",
                    "approval_required",
                    "max_iterations",
                    "timeout_s",
                    "skill_review",
                ),
            )
        elif name == "core_task":
            result = core_task(
                principal=principal,
                agent=agent,
                action=args.get("action", ""),
                trigger=trigger,
                **_pick(
                    args,
                    "run_id",
                    "status",
                    "limit",
                    "answer",
                    "approval_id",
                    "note",
                    "guidance",
                ),
            )
        elif name == "core_skill":
            result = core_skill(
                principal=principal,
                agent=agent,
                action=args.get("action", ""),
                trigger=trigger,
                **_pick(
                    args,
                    "name",
                    "status",
                    "note",
                    "skill_md",
                    "fields",
                    "query",
                    "acquisition",
                    "keep",
                    "request",
                    "flow_id",
                    "answer",
                    "domains",
                    "credentials",
                    "confirm_domains",
                ),
            )
        else:
            result = core_credential(
                principal=principal,
                agent=agent,
                action=args.get("action", ""),
                **_pick(args, "name", "value"),
            )
    except (CognitionError, SkillError, ForgeError) as exc:
        return {"ok": False, "error": exc.as_dict() if hasattr(exc, "as_dict") else _as_dict(exc)}
    except RunError as exc:
        return {"ok": False, "error": _as_dict(exc)}
    return {"ok": True, "result": result}


def _as_dict(exc: Any) -> dict[str, Any]:
    details = {
        k: v if isinstance(v, str | int | float | bool | None) else str(v)
        for k, v in dict(exc.details).items()
    }
    return {"code": exc.code, "message": exc.message, "details": details}
