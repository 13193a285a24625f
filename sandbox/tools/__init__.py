"""Tool executors: the registry of tools a motor can be granted and how each call runs.

Public API: `execute_tool`, `tool_schemas`, `expand_tools`, `is_idempotent`, `TOOLS`,
`TOOL_NAMES`, `ALIASES`, `DEFAULT_BASH_ALLOWLIST`, `validate_bash`, `redact`,
`substitute_placeholders`.
"""

from __future__ import annotations

from sandbox.tools.bash import (
    DEFAULT_BASH_ALLOWLIST,
    NETWORK_COMMANDS,
    BashCheck,
    BashRefused,
    validate_bash,
)
from sandbox.tools.executors import credential_env, execute_tool
from sandbox.tools.redact import (
    UnknownCredential,
    placeholders_in,
    placeholders_to_env_refs,
    redact,
    substitute_placeholders,
)
from sandbox.tools.registry import (
    ALIASES,
    TOOL_NAMES,
    TOOLS,
    ToolSpec,
    UnknownTool,
    expand_tools,
    is_idempotent,
    tool_schemas,
)

__all__ = [
    "ALIASES",
    "DEFAULT_BASH_ALLOWLIST",
    "NETWORK_COMMANDS",
    "TOOLS",
    "TOOL_NAMES",
    "BashCheck",
    "BashRefused",
    "ToolSpec",
    "UnknownCredential",
    "UnknownTool",
    "credential_env",
    "execute_tool",
    "expand_tools",
    "is_idempotent",
    "placeholders_in",
    "placeholders_to_env_refs",
    "redact",
    "substitute_placeholders",
    "tool_schemas",
    "validate_bash",
]
