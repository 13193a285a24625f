"""One manifest per tool a run can call: what it takes and returns, its risk, cost and trust needs.

The manifests are the single source of what a tool *is* for everything above the sandbox: the
function schemas offered to the model (`function_schema`), the grantable set offered by the
admin, the API and policy validation (`GRANTABLE`), the `/api/v1/tools/manifests/` listing, the
README table and the policy decision before every call (`skills.toolpolicy.decide`).

Sandbox tools take their description and input schema from the sandbox library's registry (the
code that executes them validates against the same schema); the manifest adds what the policy
needs. Host-side tools (ask_user, request_approval, save_credential) never reach the sandbox and
are described here in full.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import sandbox.tools as sandbox_tools

from .trust import TrustLevel


class Risk(StrEnum):
    """What the worst outcome of one call is (seed 004)."""

    LOW = "low"  # reads, or asks a human
    MEDIUM = "medium"  # changes the workspace or reaches an approved domain, inside the sandbox
    HIGH = "high"  # irreversible outside the sandbox


class Cost(StrEnum):
    """What one call costs in time and compute."""

    FREE = "free"
    CHEAP = "cheap"
    EXPENSIVE = "expensive"


class Category(StrEnum):
    FS = "fs"
    SHELL = "shell"
    CODE = "code"
    NETWORK = "network"
    INTERACTION = "interaction"
    CREDENTIALS = "credentials"


#: The result envelope every tool returns (ARCHITECTURE.md "tool result envelope").
_ENVELOPE_PROPERTIES: dict[str, Any] = {
    "ok": {"type": "boolean", "description": "Whether the call succeeded."},
    "error_code": {
        "type": ["string", "null"],
        "description": "Why it failed (denied, invalid_args, timeout, ...); null on success.",
    },
    "retryable": {"type": "boolean", "description": "Whether the same call may succeed later."},
    "provenance": {
        "type": "string",
        "enum": ["user", "web", "internal"],
        "description": "Where the output came from; web output is untrusted.",
    },
    "duration_ms": {"type": "integer", "minimum": 0, "description": "Milliseconds the call took."},
    "cost": {"type": "number", "minimum": 0, "description": "What the call cost (units)."},
}


def _outputs(output: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"output": {"type": "string", "description": output}, **_ENVELOPE_PROPERTIES},
        "required": ["ok", "output", "error_code"],
    }


@dataclass(frozen=True, slots=True)
class ToolManifest:
    """The seed-004 manifest of one tool.

    `inputs` and `outputs` are JSON Schema (draft 2020-12) objects. `allowed_directories` are
    relative to the run's workspace (the only directory the sandbox mounts); `command_whitelist`
    is the shell's default allowlist (a skill's policy may name its own). `host_side` tools run
    in the worker, never in the sandbox.
    """

    id: str
    name: str
    description: str
    category: Category
    inputs: Mapping[str, Any]
    outputs: Mapping[str, Any]
    risk: Risk
    cost: Cost
    min_trust_level: TrustLevel
    requires_approval: bool = False
    allowed_directories: tuple[str, ...] = ()
    command_whitelist: tuple[str, ...] = ()
    host_side: bool = False
    idempotent: bool = field(default=False)
    #: a tool whose calls differ by an "action" argument (the browser): the risk of an action
    #: named here replaces `risk` for that call, and a HIGH one is a call whose repetition could
    #: do harm; `submit_risk` is the risk of a call marked ``"submit": true``
    action_risks: Mapping[str, Risk] = field(default_factory=dict)
    submit_risk: Risk | None = None

    def call_risk(self, arguments: Mapping[str, Any] | None) -> Risk:
        """The risk of one call with `arguments` (the manifest's own for most tools)."""
        if not arguments:
            return self.risk
        if self.submit_risk is not None and arguments.get("submit") is True:
            return self.submit_risk
        action = arguments.get("action")
        if isinstance(action, str) and action in self.action_risks:
            return self.action_risks[action]
        return self.risk

    @property
    def side_effects(self) -> bool:
        """True when a call may change anything: an observing agent may not make it."""
        return self.min_trust_level is not TrustLevel.OBSERVE

    def function_schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema offered to the model (a fresh copy)."""
        return {
            "type": "function",
            "function": {
                "name": self.id,
                "description": self.description,
                "parameters": copy.deepcopy(dict(self.inputs)),
            },
        }

    def to_dict(self) -> dict[str, Any]:
        """The manifest as JSON (the API's and the README's form)."""
        return {
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "category": self.category.value,
            "inputs": copy.deepcopy(dict(self.inputs)),
            "outputs": copy.deepcopy(dict(self.outputs)),
            "risk": self.risk.value,
            "cost": self.cost.value,
            "min_trust_level": self.min_trust_level.value,
            "requires_approval": self.requires_approval,
            "allowed_directories": list(self.allowed_directories),
            "command_whitelist": list(self.command_whitelist),
            "host_side": self.host_side,
            "action_risks": {action: risk.value for action, risk in self.action_risks.items()},
            "submit_risk": self.submit_risk.value if self.submit_risk else None,
        }


_WORKSPACE = (".",)


def _sandboxed(
    tool_id: str,
    name: str,
    *,
    category: Category,
    output: str,
    risk: Risk,
    cost: Cost,
    min_trust_level: TrustLevel,
    allowed_directories: tuple[str, ...] = (),
    command_whitelist: tuple[str, ...] = (),
) -> ToolManifest:
    function = sandbox_tools.TOOLS[tool_id].schema()["function"]
    return ToolManifest(
        id=tool_id,
        name=name,
        description=function["description"],
        category=category,
        inputs=function["parameters"],
        outputs=_outputs(output),
        risk=risk,
        cost=cost,
        min_trust_level=min_trust_level,
        allowed_directories=allowed_directories,
        command_whitelist=command_whitelist,
        idempotent=sandbox_tools.TOOLS[tool_id].idempotent,
    )


def _object(properties: dict[str, Any], required: Sequence[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


ASK_USER = "ask_user"
REQUEST_APPROVAL = "request_approval"
SAVE_CREDENTIAL = "save_credential"

_OBSERVE, _SUGGEST = TrustLevel.OBSERVE, TrustLevel.SUGGEST

MANIFESTS: dict[str, ToolManifest] = {
    m.id: m
    for m in (
        _sandboxed(
            "code",
            "Run Python",
            category=Category.CODE,
            output="stdout and stderr of the program (at most 32 KB).",
            risk=Risk.MEDIUM,
            cost=Cost.CHEAP,
            min_trust_level=_SUGGEST,
            allowed_directories=_WORKSPACE,
        ),
        _sandboxed(
            "bash",
            "Run a shell command",
            category=Category.SHELL,
            output="stdout and stderr of the command line (at most 10 KB).",
            risk=Risk.MEDIUM,
            cost=Cost.CHEAP,
            min_trust_level=_SUGGEST,
            allowed_directories=_WORKSPACE,
            command_whitelist=tuple(sandbox_tools.DEFAULT_BASH_ALLOWLIST),
        ),
        _sandboxed(
            "read",
            "Read a file",
            category=Category.FS,
            output="The file's text (at most 256 KB), or the requested lines.",
            risk=Risk.LOW,
            cost=Cost.FREE,
            min_trust_level=_OBSERVE,
            allowed_directories=_WORKSPACE,
        ),
        _sandboxed(
            "write",
            "Write a file",
            category=Category.FS,
            output="The path written and the bytes written.",
            risk=Risk.MEDIUM,
            cost=Cost.FREE,
            min_trust_level=_SUGGEST,
            allowed_directories=_WORKSPACE,
        ),
        _sandboxed(
            "edit",
            "Edit a file",
            category=Category.FS,
            output="Confirmation of the one replacement made.",
            risk=Risk.MEDIUM,
            cost=Cost.FREE,
            min_trust_level=_SUGGEST,
            allowed_directories=_WORKSPACE,
        ),
        _sandboxed(
            "list",
            "List a directory",
            category=Category.FS,
            output="One line per entry: name, type and size.",
            risk=Risk.LOW,
            cost=Cost.FREE,
            min_trust_level=_OBSERVE,
            allowed_directories=_WORKSPACE,
        ),
        _sandboxed(
            "glob",
            "Find files by pattern",
            category=Category.FS,
            output="Matching paths, one a line (at most 1000).",
            risk=Risk.LOW,
            cost=Cost.FREE,
            min_trust_level=_OBSERVE,
            allowed_directories=_WORKSPACE,
        ),
        _sandboxed(
            "grep",
            "Search file contents",
            category=Category.FS,
            output="'path:line: text' for each match (at most 200).",
            risk=Risk.LOW,
            cost=Cost.CHEAP,
            min_trust_level=_OBSERVE,
            allowed_directories=_WORKSPACE,
        ),
        _sandboxed(
            "fetch",
            "HTTP request",
            category=Category.NETWORK,
            output="Status, main headers and body (untrusted web content).",
            risk=Risk.MEDIUM,
            cost=Cost.EXPENSIVE,
            min_trust_level=_SUGGEST,
        ),
        ToolManifest(
            id="browser",
            name="Web browser",
            description=(
                "Drive a headless web browser inside the sandbox (navigate, click, type, select, "
                "scroll, wait, extract, evaluate, screenshot, back). Every action answers with "
                "the page's accessibility snapshot; elements are named by ref. Page content is "
                "untrusted web content. Mark a click that submits something with submit=true."
            ),
            category=Category.NETWORK,
            inputs=_object(
                {
                    "action": {"type": "string", "description": "What to do on the page."},
                    "url": {"type": "string", "description": "navigate: an http(s) URL."},
                    "ref": {"type": "string", "description": "An element's ref (e.g. e12)."},
                    "text": {"type": "string", "description": "type: text; wait: text."},
                    "submit": {"type": "boolean", "description": "The call submits something."},
                },
                ["action"],
            ),
            outputs=_outputs(
                "URL, title, refused requests, extracted data and the accessibility snapshot "
                "(untrusted web content)."
            ),
            risk=Risk.MEDIUM,
            cost=Cost.EXPENSIVE,
            min_trust_level=_SUGGEST,
            # read-only JavaScript can still read whatever the page shows; a submit is final
            action_risks={"evaluate": Risk.HIGH},
            submit_risk=Risk.HIGH,
        ),
        ToolManifest(
            id=ASK_USER,
            name="Ask the user",
            description=(
                "Ask the user a question when you cannot continue without their answer "
                "(clarification, a choice, missing information). The run pauses until they reply."
            ),
            category=Category.INTERACTION,
            inputs=_object(
                {"question": {"type": "string", "description": "The question."}}, ["question"]
            ),
            outputs=_outputs("The user's answer."),
            risk=Risk.LOW,
            cost=Cost.FREE,
            min_trust_level=_OBSERVE,
            host_side=True,
        ),
        ToolManifest(
            id=REQUEST_APPROVAL,
            name="Request approval",
            description=(
                "Ask the owner to approve one exact tool call before you make it (for anything "
                "irreversible: submitting, paying, deleting, sending). The run pauses until they "
                "decide. An approval lets exactly that call, with exactly those arguments, run once."
            ),
            category=Category.INTERACTION,
            inputs=_object(
                {
                    "tool": {"type": "string", "description": "The tool you want to call."},
                    "arguments": {"type": "object", "description": "Its exact arguments."},
                    "reason": {"type": "string", "description": "What it does, for the owner."},
                },
                ["tool", "arguments", "reason"],
            ),
            outputs=_outputs("The owner's decision."),
            risk=Risk.LOW,
            cost=Cost.FREE,
            min_trust_level=_OBSERVE,
            host_side=True,
        ),
        ToolManifest(
            id=SAVE_CREDENTIAL,
            name="Save a credential",
            description=(
                "Store a secret you obtained during the task (an API key from a signup page, a "
                "password you created) so that later runs of this skill can use it. The value is "
                "kept encrypted and never shown again: afterwards refer to it only as "
                "<credential:NAME>; it is also available to code, bash and fetch as the "
                "environment variable NAME. For a loaded skill, only the names in its required "
                "credentials may be saved."
            ),
            category=Category.CREDENTIALS,
            inputs=_object(
                {
                    "name": {
                        "type": "string",
                        "description": "Credential name: lower-case letters, digits and _.",
                    },
                    "value": {"type": "string", "description": "The secret value."},
                },
                ["name", "value"],
            ),
            outputs=_outputs("Confirmation naming the saved credential (never its value)."),
            risk=Risk.MEDIUM,
            cost=Cost.FREE,
            min_trust_level=_SUGGEST,
            host_side=True,
        ),
    )
}

TOOL_IDS: tuple[str, ...] = tuple(MANIFESTS)
#: the tools of the sandbox library's registry (the browser is a tool kind of its own)
SANDBOX_TOOL_IDS: tuple[str, ...] = tuple(
    i for i, m in MANIFESTS.items() if not m.host_side and i in sandbox_tools.TOOL_NAMES
)
HOST_TOOL_IDS: tuple[str, ...] = tuple(i for i, m in MANIFESTS.items() if m.host_side)

#: Names that stand for several tools (the sandbox library's aliases).
ALIASES: dict[str, tuple[str, ...]] = {k: tuple(v) for k, v in sandbox_tools.ALIASES.items()}

#: What a policy, the admin and the API may grant: every tool and every alias, nothing else.
GRANTABLE: tuple[str, ...] = TOOL_IDS + tuple(ALIASES)


class UnknownTool(ValueError):
    """A name that is neither a tool nor an alias; the message names the grantable set."""


def expand(names: Iterable[str]) -> tuple[str, ...]:
    """Tool ids for `names` (aliases resolved), in manifest order, without duplicates.

    Raises UnknownTool naming every unknown entry and the grantable set.
    """
    wanted: set[str] = set()
    unknown: list[str] = []
    for name in names:
        if name in MANIFESTS:
            wanted.add(name)
        elif name in ALIASES:
            wanted.update(ALIASES[name])
        else:
            unknown.append(str(name))
    if unknown:
        raise UnknownTool(
            f"unknown tool(s): {', '.join(repr(n) for n in unknown)}; grantable: "
            + ", ".join(GRANTABLE)
        )
    return tuple(i for i in TOOL_IDS if i in wanted)


def manifest(tool_id: str) -> ToolManifest | None:
    """The manifest of `tool_id`, or None for a name that is no tool."""
    return MANIFESTS.get(tool_id)


def function_schemas(
    tool_ids: Iterable[str], *, bash_allowlist: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """The model's function schemas for `tool_ids` (aliases expanded), generated from manifests.

    With `bash_allowlist` the bash description names that list instead of the default one.
    """
    schemas = [MANIFESTS[i].function_schema() for i in expand(tool_ids)]
    if bash_allowlist is not None:
        default = "(by default: " + ", ".join(sandbox_tools.DEFAULT_BASH_ALLOWLIST) + ")"
        for schema in schemas:
            function = schema["function"]
            if function["name"] == "bash":
                function["description"] = function["description"].replace(
                    default, "(in this run: " + ", ".join(bash_allowlist) + ")"
                )
    return schemas
