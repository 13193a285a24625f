"""``skill.toml``: the manifest of an MCP skill, parsed and validated like every bundle file.

A bundle holding ``skill.toml`` at its top level is an *MCP skill*: its ``scripts/server.py`` (or
whatever ``[server]`` names) is a stdio MCP server that the project runs in a sandbox. The
manifest is content: it is covered by the content hash, and a change to it is a change to the
skill. What it asks for (network domains, vault credentials, sandbox limits) is a *proposal*
shown to the reviewer; it never grants anything by itself.

Accepted keys (anything else is refused with ``manifest-unknown-key``)::

    name = "uptime-checker"          # optional; must equal SKILL.md's name when given
    description = "..."              # optional; SKILL.md's description is the one stored
    version = "1"                    # required: a string or an integer, at most 32 chars
    created_at = "2026-02-15T12:00:00Z"   # optional: a TOML datetime or an ISO 8601 string
    created_by = "agent"             # required: "agent" or "owner"
    label = "public"                 # optional (default "public"): public | internal | private
    allowed_domains = ["status.myapp.io", "*.example.org"]   # optional (default: no network)

    [server]                         # optional (default: python3 scripts/server.py)
    command = "python3"              # python3 | python (the sandbox's skill runtime)
    args = ["scripts/server.py"]     # the first argument must name a bundle file
    working_dir = "."                # optional: a directory of the bundle (relative)

    [auth]                           # ENV_NAME = "vault:<credential name>"
    MY_API_KEY = "vault:myapp_api_key"

    [sandbox]                        # each optional; defaults and caps below
    memory_limit = "128m"            # int bytes, or "<n>k|m|g"
    read_only_fs = true              # must be true: the skill's files are never writable
    allow_tmp = true                 # a size-capped /tmp
    tmp_limit = "16m"
    max_processes = 16
    call_timeout_s = 30
    cpu_seconds = 600

    [search]
    keywords = ["uptime", "status"]
    example_queries = ["is my server up?"]

    [tools.check_uptime]             # the declared semantics of each tool: read | write
    semantics = "read"

A tool the manifest does not declare counts as ``write`` (the conservative reading).

Every problem is a :class:`Problem` on the path ``skill.toml`` with a stable rule id, so a bad
manifest is reported exactly like a bad SKILL.md frontmatter.
"""

from __future__ import annotations

import datetime as dt
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .types import SKILL_TOML, Problem

#: the server an MCP skill runs when ``[server]`` says nothing
DEFAULT_SERVER_SCRIPT = "scripts/server.py"
#: the pytest file the forge runs before a version may be deployed
TEST_SCRIPT = "scripts/test_server.py"

CreatedBy = Literal["agent", "owner"]
Label = Literal["public", "internal", "private"]
Semantics = Literal["read", "write"]

LABELS: tuple[str, ...] = ("public", "internal", "private")
SERVER_COMMANDS: tuple[str, ...] = ("python3", "python")
MAX_VERSION_CHARS = 32
MAX_DOMAINS = 32
MAX_KEYWORDS = 64
MAX_QUERIES = 32
MAX_SEARCH_ITEM_CHARS = 200
MAX_ARGS = 32
MAX_ARG_CHARS = 512
MAX_AUTH = 16
MAX_TOOLS = 64

# env var names a server reads its credentials from; vault names follow the vault's own pattern
ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]{0,63}\Z")
VAULT_REF_RE = re.compile(r"^vault:([A-Za-z_][A-Za-z0-9_]{0,63})\Z")
# a DNS host name, optionally `*.`-prefixed (strict subdomains, as the egress proxy reads it)
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
DOMAIN_RE = re.compile(rf"^(?:\*\.)?{_LABEL}(?:\.{_LABEL})+\Z")
TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}\Z")
_SIZE_RE = re.compile(r"^([0-9]+)\s*([kmg]?)b?\Z", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
# env vars the sandbox sets itself; a credential must not shadow them
_RESERVED_ENV = frozenset(
    {"PATH", "HOME", "LANG", "TMPDIR", "PYTHONPATH", "PYTHONHOME", "LD_PRELOAD", "LD_LIBRARY_PATH"}
    | {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"}
)

_TOP_KEYS = frozenset(
    {
        "name",
        "description",
        "version",
        "created_at",
        "created_by",
        "label",
        "allowed_domains",
        "server",
        "auth",
        "sandbox",
        "search",
        "tools",
    }
)
_SERVER_KEYS = frozenset({"command", "args", "working_dir"})
_TOOL_KEYS = frozenset({"semantics"})
_SEARCH_KEYS = frozenset({"keywords", "example_queries"})


@dataclass(frozen=True)
class SandboxLimits:
    """What the manifest proposes for its server's sandbox. Sizes in bytes, times in seconds.
    ``None`` means "the deployment's default"."""

    memory_bytes: int | None = None
    tmp_bytes: int | None = None
    allow_tmp: bool = True
    max_processes: int | None = None
    call_timeout_s: float | None = None
    cpu_seconds: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "memory_bytes": self.memory_bytes,
            "tmp_bytes": self.tmp_bytes,
            "allow_tmp": self.allow_tmp,
            "max_processes": self.max_processes,
            "call_timeout_s": self.call_timeout_s,
            "cpu_seconds": self.cpu_seconds,
        }


#: bounds (inclusive) a manifest may propose; a value outside is refused, not clamped
LIMIT_BOUNDS: dict[str, tuple[float, float]] = {
    "memory_limit": (16 * 1024**2, 2 * 1024**3),
    "tmp_limit": (1024**2, 512 * 1024**2),
    "max_processes": (1, 256),
    "call_timeout_s": (1, 600),
    "cpu_seconds": (1, 86_400),
}


@dataclass(frozen=True)
class McpManifest:
    """A validated ``skill.toml``. ``auth`` maps an environment variable of the server to the
    vault credential name whose value it gets at spawn (names only, never values)."""

    version: str
    created_by: CreatedBy
    label: Label = "public"
    name: str | None = None
    description: str | None = None
    created_at: str | None = None
    allowed_domains: tuple[str, ...] = ()
    command: str = "python3"
    args: tuple[str, ...] = (DEFAULT_SERVER_SCRIPT,)
    working_dir: str = "."
    auth: Mapping[str, str] = field(default_factory=dict)
    sandbox: SandboxLimits = field(default_factory=SandboxLimits)
    keywords: tuple[str, ...] = ()
    example_queries: tuple[str, ...] = ()
    tool_semantics: Mapping[str, Semantics] = field(default_factory=dict)

    @property
    def server_script(self) -> str:
        """The bundle path of the file the server runs (the first argument)."""
        return self.args[0]

    @property
    def credential_names(self) -> tuple[str, ...]:
        """The vault names the server needs, sorted, without duplicates."""
        return tuple(sorted(set(self.auth.values())))

    def semantics_of(self, tool: str) -> Semantics:
        """The declared semantics of `tool`; an undeclared tool counts as ``write``."""
        return self.tool_semantics.get(tool, "write")

    def proposal(self) -> dict[str, Any]:
        """What the manifest asks for, as the review shows it: a proposal, never an approval."""
        return {
            "allowed_domains": list(self.allowed_domains),
            "credentials": dict(sorted(self.auth.items())),
            "limits": self.sandbox.to_dict(),
            "label": self.label,
            "tool_semantics": dict(sorted(self.tool_semantics.items())),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "version": self.version,
            "created_at": self.created_at,
            "created_by": self.created_by,
            "label": self.label,
            "allowed_domains": list(self.allowed_domains),
            "server": {
                "command": self.command,
                "args": list(self.args),
                "working_dir": self.working_dir,
            },
            "auth": dict(sorted(self.auth.items())),
            "sandbox": self.sandbox.to_dict(),
            "search": {
                "keywords": list(self.keywords),
                "example_queries": list(self.example_queries),
            },
            "tools": {name: {"semantics": s} for name, s in sorted(self.tool_semantics.items())},
        }


class _Collector:
    """Problems found so far, all on skill.toml."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def add(self, rule: str, message: str) -> None:
        self.problems.append(Problem(SKILL_TOML, rule, message))

    def unknown(self, table: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
        for key in sorted(set(table) - allowed):
            self.add(
                "manifest-unknown-key",
                f"unknown key {where}{key!r}; allowed: {', '.join(sorted(allowed))}",
            )


def _string_list(
    value: Any, key: str, out: _Collector, *, max_items: int, max_chars: int
) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        out.add("manifest-type", f"{key!r} must be a list of strings")
        return ()
    if len(value) > max_items:
        out.add("manifest-too-many", f"{key!r} has {len(value)} items; the limit is {max_items}")
        return ()
    for item in value:
        if not item.strip() or len(item) > max_chars:
            out.add(
                "manifest-value",
                f"{key!r} holds an empty item or one longer than {max_chars} characters",
            )
            return ()
    return tuple(value)


def _size(value: Any, key: str, out: _Collector) -> int | None:
    if isinstance(value, bool):
        out.add("manifest-type", f'[sandbox] {key!r} must be a size (bytes, or like "128m")')
        return None
    if isinstance(value, int):
        size = value
    elif isinstance(value, str) and (match := _SIZE_RE.match(value.strip())):
        size = int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
    else:
        out.add("manifest-type", f'[sandbox] {key!r} must be a size (bytes, or like "128m")')
        return None
    bounded = _bounded(size, key, out)
    return int(bounded) if bounded is not None else None


def _bounded(value: float, key: str, out: _Collector | None) -> float | None:
    low, high = LIMIT_BOUNDS[key]
    if low <= value <= high:
        return value
    if out is not None:
        out.add(
            "manifest-limit-out-of-range",
            f"[sandbox] {key!r} is {value:g}; it must be between {low:g} and {high:g}",
        )
    return None


def _number(value: Any, key: str, out: _Collector, *, integer: bool) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        out.add("manifest-type", f"[sandbox] {key!r} must be a number")
        return None
    if integer and not isinstance(value, int):
        out.add("manifest-type", f"[sandbox] {key!r} must be an integer")
        return None
    return _bounded(value, key, out)


def _sandbox(table: Any, out: _Collector) -> SandboxLimits:
    if not isinstance(table, dict):
        out.add("manifest-type", "[sandbox] must be a table")
        return SandboxLimits()
    out.unknown(
        table,
        frozenset({"memory_limit", "read_only_fs", "allow_tmp", "tmp_limit"})
        | frozenset({"max_processes", "call_timeout_s", "cpu_seconds"}),
        "[sandbox] ",
    )
    if "read_only_fs" in table and table["read_only_fs"] is not True:
        out.add(
            "manifest-read-only-fs",
            "[sandbox] 'read_only_fs' must be true: a skill's files are always read-only in the "
            "sandbox (only /tmp is writable)",
        )
    allow_tmp = table.get("allow_tmp", True)
    if not isinstance(allow_tmp, bool):
        out.add("manifest-type", "[sandbox] 'allow_tmp' must be true or false")
        allow_tmp = True
    memory = _size(table["memory_limit"], "memory_limit", out) if "memory_limit" in table else None
    tmp = _size(table["tmp_limit"], "tmp_limit", out) if "tmp_limit" in table else None
    procs = table.get("max_processes")
    timeout = table.get("call_timeout_s")
    cpu = table.get("cpu_seconds")
    procs_v = _number(procs, "max_processes", out, integer=True) if procs is not None else None
    timeout_v = (
        _number(timeout, "call_timeout_s", out, integer=False) if timeout is not None else None
    )
    cpu_v = _number(cpu, "cpu_seconds", out, integer=True) if cpu is not None else None
    return SandboxLimits(
        memory_bytes=memory,
        tmp_bytes=tmp,
        allow_tmp=allow_tmp,
        max_processes=int(procs_v) if procs_v is not None else None,
        call_timeout_s=float(timeout_v) if timeout_v is not None else None,
        cpu_seconds=int(cpu_v) if cpu_v is not None else None,
    )


def _server(
    table: Any, files: Mapping[str, Any] | None, out: _Collector
) -> tuple[str, tuple[str, ...], str]:
    default = ("python3", (DEFAULT_SERVER_SCRIPT,), ".")
    if table is None:
        command, args, working_dir = default
    elif not isinstance(table, dict):
        out.add("manifest-type", "[server] must be a table")
        return default
    else:
        out.unknown(table, _SERVER_KEYS, "[server] ")
        command = table.get("command", "python3")
        if command not in SERVER_COMMANDS:
            out.add(
                "manifest-server-command",
                f"[server] 'command' {command!r} is not available in the skill runtime; use "
                f"one of: {', '.join(SERVER_COMMANDS)}",
            )
            command = "python3"
        args = _string_list(
            table.get("args", [DEFAULT_SERVER_SCRIPT]),
            "[server] args",
            out,
            max_items=MAX_ARGS,
            max_chars=MAX_ARG_CHARS,
        )
        if not args:
            out.add("manifest-server-args", "[server] 'args' must name the server script first")
            return default
        working_dir = table.get("working_dir", ".")
        if not isinstance(working_dir, str) or not _relative_inside(working_dir):
            out.add(
                "manifest-server-working-dir",
                "[server] 'working_dir' must be a relative directory inside the skill",
            )
            working_dir = "."
    script = args[0]
    if not _relative_inside(script) or not script.endswith(".py"):
        out.add(
            "manifest-server-args",
            f"[server] the first argument {script!r} must be a .py file of the skill "
            "(a relative path, no '..')",
        )
    elif files is not None and script not in files:
        out.add(
            "manifest-server-missing",
            f"[server] runs {script!r}, but the skill has no such file",
        )
    return command, tuple(args), working_dir


def _relative_inside(path: str) -> bool:
    if not path or path.startswith(("/", "~")) or "\\" in path:
        return False
    return all(part not in ("..", "") for part in path.split("/")) or path == "."


def _auth(table: Any, out: _Collector) -> dict[str, str]:
    if not isinstance(table, dict):
        out.add("manifest-type", '[auth] must be a table of ENV_NAME = "vault:<name>"')
        return {}
    if len(table) > MAX_AUTH:
        out.add("manifest-too-many", f"[auth] has {len(table)} entries; the limit is {MAX_AUTH}")
        return {}
    auth: dict[str, str] = {}
    for env_name, ref in sorted(table.items()):
        if not ENV_NAME_RE.match(env_name) or env_name in _RESERVED_ENV:
            out.add(
                "manifest-auth-env-name",
                f"[auth] {env_name!r} is not a usable environment variable name (uppercase "
                "letters, digits, '_'; not one the sandbox sets itself)",
            )
            continue
        match = VAULT_REF_RE.match(ref) if isinstance(ref, str) else None
        if match is None:
            # the value is never echoed: a literal secret pasted here must not reach a message
            out.add(
                "manifest-auth-not-vault",
                f'[auth] {env_name} must be a vault reference "vault:<name>"; credentials are '
                "never written into a skill",
            )
            continue
        auth[env_name] = match.group(1)
    return auth


def _domains(value: Any, out: _Collector) -> tuple[str, ...]:
    domains = _string_list(value, "allowed_domains", out, max_items=MAX_DOMAINS, max_chars=253)
    good: list[str] = []
    for domain in domains:
        if domain != domain.lower() or not DOMAIN_RE.match(domain):
            out.add(
                "manifest-domain",
                f"allowed_domains: {domain!r} is not a lowercase host name (optionally '*.'-"
                "prefixed); no scheme, port, path or IP address",
            )
        elif domain not in good:
            good.append(domain)
    return tuple(good)


def _tools(table: Any, out: _Collector) -> dict[str, Semantics]:
    if not isinstance(table, dict):
        out.add("manifest-type", "[tools] must hold one table per tool: [tools.<name>]")
        return {}
    if len(table) > MAX_TOOLS:
        out.add("manifest-too-many", f"[tools] has {len(table)} tools; the limit is {MAX_TOOLS}")
        return {}
    semantics: dict[str, Semantics] = {}
    for name, spec in sorted(table.items()):
        if not TOOL_NAME_RE.match(name):
            out.add("manifest-tool-name", f"[tools] {name!r} is not a valid tool name")
            continue
        if not isinstance(spec, dict):
            out.add("manifest-type", f"[tools.{name}] must be a table")
            continue
        out.unknown(spec, _TOOL_KEYS, f"[tools.{name}] ")
        value = spec.get("semantics")
        if value not in ("read", "write"):
            out.add(
                "manifest-tool-semantics",
                f'[tools.{name}] \'semantics\' must be "read" or "write"',
            )
            continue
        semantics[name] = value
    return semantics


def parse_manifest(
    data: bytes | str, *, files: Mapping[str, Any] | None = None, skill_name: str | None = None
) -> tuple[McpManifest | None, list[Problem]]:
    """Parse and validate a ``skill.toml``.

    ``files`` (the bundle's content paths) lets the check see that the server script exists;
    ``skill_name`` (SKILL.md's name) must equal the manifest's ``name`` when both are given.
    Returns the manifest and no problems, or ``None`` and every problem found."""
    out = _Collector()
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError:
        out.add("manifest-encoding", "skill.toml is not valid UTF-8")
        return None, out.problems
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        out.add("manifest-syntax", f"skill.toml is not valid TOML: {exc}")
        return None, out.problems
    out.unknown(raw, _TOP_KEYS, "")

    version = raw.get("version")
    if isinstance(version, int) and not isinstance(version, bool):
        version = str(version)
    if not isinstance(version, str) or not version.strip() or len(version) > MAX_VERSION_CHARS:
        out.add(
            "manifest-version",
            f"'version' is required: a string or integer of at most {MAX_VERSION_CHARS} chars",
        )
    created_by = raw.get("created_by")
    if created_by not in ("agent", "owner"):
        out.add("manifest-created-by", '\'created_by\' is required: "agent" or "owner"')
    label = raw.get("label", "public")
    if label not in LABELS:
        out.add("manifest-label", f"'label' must be one of: {', '.join(LABELS)}")
    name = raw.get("name")
    if name is not None and not isinstance(name, str):
        out.add("manifest-type", "'name' must be a string")
    elif name is not None and skill_name is not None and name != skill_name:
        out.add(
            "manifest-name-mismatch",
            f"'name' {name!r} differs from SKILL.md's name {skill_name!r}",
        )
    description = raw.get("description")
    if description is not None and not isinstance(description, str):
        out.add("manifest-type", "'description' must be a string")
    created_at = raw.get("created_at")
    if isinstance(created_at, dt.datetime | dt.date):
        created_at = created_at.isoformat()
    elif created_at is not None:
        if not isinstance(created_at, str):
            out.add("manifest-type", "'created_at' must be a date-time")
        else:
            try:
                dt.datetime.fromisoformat(created_at.replace("Z", "+00:00"))
            except ValueError:
                out.add("manifest-created-at", "'created_at' is not an ISO 8601 date-time")

    domains = _domains(raw.get("allowed_domains", []), out)
    command, args, working_dir = _server(raw.get("server"), files, out)
    auth = _auth(raw.get("auth", {}), out)
    sandbox = _sandbox(raw.get("sandbox", {}), out)
    search = raw.get("search", {})
    keywords: tuple[str, ...] = ()
    queries: tuple[str, ...] = ()
    if not isinstance(search, dict):
        out.add("manifest-type", "[search] must be a table")
    else:
        out.unknown(search, _SEARCH_KEYS, "[search] ")
        keywords = _string_list(
            search.get("keywords", []),
            "[search] keywords",
            out,
            max_items=MAX_KEYWORDS,
            max_chars=MAX_SEARCH_ITEM_CHARS,
        )
        queries = _string_list(
            search.get("example_queries", []),
            "[search] example_queries",
            out,
            max_items=MAX_QUERIES,
            max_chars=MAX_SEARCH_ITEM_CHARS,
        )
    tools = _tools(raw.get("tools", {}), out)
    if out.problems:
        return None, out.problems
    return (
        McpManifest(
            version=str(version),
            created_by=created_by,
            label=label,
            name=name,
            description=description,
            created_at=created_at,
            allowed_domains=domains,
            command=command,
            args=args,
            working_dir=working_dir,
            auth=auth,
            sandbox=sandbox,
            keywords=keywords,
            example_queries=queries,
            tool_semantics=tools,
        ),
        [],
    )


__all__ = [
    "DEFAULT_SERVER_SCRIPT",
    "LIMIT_BOUNDS",
    "SKILL_TOML",
    "TEST_SCRIPT",
    "McpManifest",
    "SandboxLimits",
    "parse_manifest",
]
