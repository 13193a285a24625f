"""The run's tool belt: granted sandbox tools (via the sandbox library), tools of other kinds
described by a registered `ToolManifest`, plus host-side tools.

Sandbox tools run through `sandbox.tools.execute_tool` in a session opened for the run. Host-side
("synthetic") tools never reach the sandbox: `ask_user` pauses the run for the user. A tool of
another kind is registered with its executor (`runs.pipeline.tool_kind_register`); its manifest
is what granting, the offered schemas and the approval rules know of it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from runs.errors import InvalidRunParams
from skills.toolpolicy import manifests

logger = logging.getLogger(__name__)

# The host-side tools' schemas are generated from their manifests (skills.toolpolicy).
ASK_USER = manifests.ASK_USER
ASK_USER_SCHEMA: dict[str, Any] = manifests.MANIFESTS[ASK_USER].function_schema()
REQUEST_APPROVAL = manifests.REQUEST_APPROVAL
REQUEST_APPROVAL_SCHEMA: dict[str, Any] = manifests.MANIFESTS[REQUEST_APPROVAL].function_schema()
SAVE_CREDENTIAL = manifests.SAVE_CREDENTIAL
SAVE_CREDENTIAL_SCHEMA: dict[str, Any] = manifests.MANIFESTS[SAVE_CREDENTIAL].function_schema()

SYNTHETIC_TOOLS: tuple[str, ...] = (ASK_USER, REQUEST_APPROVAL, SAVE_CREDENTIAL)


@dataclass(frozen=True)
class ToolManifest:
    """What the runtime knows of a tool that is not the sandbox's: its name, the function
    schema offered to the model (`description`, JSON-schema `parameters`), and whether running
    it twice is harmless (`idempotent`: a transient failure is retried once, a call caught in
    flight or under the run's approval rule needs no approval)."""

    name: str
    description: str
    parameters: dict[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}, "additionalProperties": False}
    )
    idempotent: bool = False
    #: for a kind whose calls differ (a browser's click that submits a form, its scroll that
    #: does not): True when this call, with these arguments, could do harm if run twice;
    #: None: every call is as `idempotent` says
    risky: Callable[[dict[str, Any]], bool] | None = None

    def schema(self) -> dict[str, Any]:
        """The function schema offered to the model."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


_manifests: dict[str, ToolManifest] = {}
#: callables that register the tools another app keeps in its database (see `tool_source_register`)
_sources: list[Callable[[], None]] = []


def tool_source_register(refresh: Callable[[], None]) -> None:
    """Let an app whose tools live in its database (forge's deployed MCP tools) register them in
    this process on demand: `refresh` is called whenever a tool name comes up that no manifest of
    this process knows, and must make the registry match the app's truth."""
    if refresh not in _sources:
        _sources.append(refresh)


def _unknown(names: Sequence[str]) -> bool:
    return any(
        name not in _manifests
        and name not in manifests.MANIFESTS
        and name not in manifests.ALIASES
        and name not in SYNTHETIC_TOOLS
        for name in names
    )


def tool_sources_refresh(names: Sequence[str] = ()) -> None:
    """Ask every tool source to register its tools, when `names` holds one this process does
    not know (or always, without `names`). A failing source is logged and skipped."""
    if names and not _unknown(names):
        return
    for refresh in list(_sources):
        try:
            refresh()
        except Exception:  # noqa: BLE001 - a source's failure leaves its names unknown
            logger.exception("tool source %r failed to refresh", refresh)


def tool_manifest_register(manifest: ToolManifest) -> None:
    """Make `manifest`'s tool grantable, offered when granted, and known to the approval rules.

    Raises ValueError when the name is a sandbox or host-side tool, an alias, or registered.
    """
    import sandbox.tools as sandbox_tools

    name = manifest.name
    taken = name in SYNTHETIC_TOOLS or name in _manifests
    try:
        sandbox_tools.expand_tools([name])
        taken = True
    except ValueError:
        pass
    if taken:
        raise ValueError(f"tool {name!r} is already known; a tool kind needs a name of its own")
    _manifests[name] = manifest


def tool_manifest_unregister(name: str) -> None:
    """Forget a registered manifest (a run granted it can no longer be started)."""
    _manifests.pop(name, None)


def tool_manifest(name: str) -> ToolManifest | None:
    """The registered manifest of `name`, or None (a sandbox or host-side tool, or unknown)."""
    return _manifests.get(name)


def action_hash(tool: str, arguments: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of a tool call: what an approval is bound to."""
    canonical = json.dumps(
        {"tool": tool, "arguments": arguments}, sort_keys=True, separators=(",", ":")
    )
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def needs_approval(name: str, arguments: dict[str, Any], *, network_enabled: bool) -> bool:
    """True for calls whose repetition could do harm (the sandbox library's idempotency facts)."""
    manifest = _manifests.get(name)
    if manifest is not None:
        if manifest.risky is not None:
            return bool(manifest.risky(arguments))
        return not manifest.idempotent
    import sandbox.tools as sandbox_tools

    try:
        return not sandbox_tools.is_idempotent(name, arguments, network_enabled=network_enabled)
    except ValueError:
        return True


#: error code of a call that was in flight when its worker died (its outcome is unknown)
INTERRUPTED = "interrupted"


def expand_granted(names: Sequence[str]) -> list[str]:
    """Resolve tool names and aliases; InvalidRunParams names every entry that is not
    grantable.

    Sandbox tools come first (aliases resolved by their manifests, skills.toolpolicy);
    registered tools follow in the order given. A host-side tool (ask_user, request_approval,
    save_credential) may be named — a policy approved with it must run — but is not a grant:
    it is offered to every run that may use it, so it is dropped here.
    """
    if not names:
        return []
    tool_sources_refresh(names)
    registered = list(dict.fromkeys(name for name in names if name in _manifests))
    sandboxed = [name for name in names if name not in _manifests]
    try:
        expanded = manifests.expand(sandboxed) if sandboxed else ()
    except manifests.UnknownTool as exc:
        raise InvalidRunParams(f"tools: {exc}", field="tools") from exc
    return [*(name for name in expanded if name not in manifests.HOST_TOOL_IDS), *registered]


def offered_schemas(
    granted: Sequence[str],
    *,
    synthetic: bool = True,
    save_credential: bool = False,
    bash_allowlist: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Function schemas offered to the LLM: the granted tools only, then the host-side ones.

    `save_credential` is offered only where a saved value has somewhere to go (a skill run, or a
    run whose workspace may become a skill) — never to review runs (`synthetic=False`).

    The list is new, but the schemas in it are shared between calls (read-only: they are
    serialized into the request, never changed).
    """
    schemas: list[dict[str, Any]] = []
    tool_sources_refresh(granted)
    # a registered tool that left the registry since the grant (a removed MCP skill) is no
    # longer offered; its calls are refused by the pipeline as for any unknown tool
    sandboxed = [
        name
        for name in granted
        if name not in _manifests and (name in manifests.MANIFESTS or name in manifests.ALIASES)
    ]
    if sandboxed:
        allowlist = tuple(bash_allowlist) if bash_allowlist is not None else None
        schemas.extend(_sandbox_schemas(tuple(sandboxed), allowlist))
    schemas.extend(_manifests[name].schema() for name in granted if name in _manifests)
    if synthetic:
        schemas.extend([ASK_USER_SCHEMA, REQUEST_APPROVAL_SCHEMA])
        if save_credential:
            schemas.append(SAVE_CREDENTIAL_SCHEMA)
    return schemas


@lru_cache(maxsize=256)
def _sandbox_schemas(
    names: tuple[str, ...], bash_allowlist: tuple[str, ...] | None
) -> tuple[dict[str, Any], ...]:
    # The manifests are fixed for the process, so the schemas of a grant are too: each request
    # of a run's loop asks for the same ones (a deep copy of every tool's input schema otherwise).
    return tuple(manifests.function_schemas(names, bash_allowlist=bash_allowlist))


def envelope(
    *,
    ok: bool,
    output: str,
    error_code: str | None = None,
    retryable: bool = False,
    provenance: str = "internal",
    duration_ms: int = 0,
    cost: float = 0.0,
) -> dict[str, Any]:
    """The tool result envelope of ARCHITECTURE.md as stored on a Step."""
    return {
        "ok": ok,
        "output": output,
        "error_code": error_code,
        "retryable": retryable,
        "provenance": provenance,
        "duration_ms": duration_ms,
        "cost": cost,
    }


def parse_arguments(raw: str) -> dict[str, Any] | None:
    """The model's JSON arguments as an object, or None when they are not a JSON object."""
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def tool_message_content(result: dict[str, Any]) -> str:
    """What the LLM reads for a result: the output, marked when it failed or came from the web."""
    output = str(result.get("output", ""))
    if not result.get("ok"):
        output = f"ERROR ({result.get('error_code') or 'error'}): {output}"
    if result.get("provenance") == "web":
        output = f'<untrusted source="web">\n{output}\n</untrusted>'
    return output


class SandboxSlot:
    """The run's sandbox session as one slice sees it: taken from this process's registry of
    run sessions (`runs.sessions`) on first use, so it stays warm across the run's slices.

    A session that cannot be opened fails the call with `sandbox_error`; nothing ever runs
    outside a sandbox. `close()` only lets go of it; `runs.sessions.run_session_close` ends it.
    """

    def __init__(
        self,
        *,
        run_id: str,
        workspace: str,
        allowed_domains: Sequence[str],
        bash_allowlist: Sequence[str] | None = None,
        layer: Path | None = None,
        tools: Sequence[str] = (),
    ) -> None:
        self.run_id = run_id
        # the run's granted tools: the browser's mounts go only to a session of a run granted it
        self.tools = tuple(tools)
        # the run's dependency layer (runs.layers), mounted read-only when the session opens
        self.layer = layer
        self.workspace = workspace
        self.allowed_domains = tuple(allowed_domains)
        # the skill policy's shell allowlist; None: the sandbox's default
        self.bash_allowlist = tuple(bash_allowlist) if bash_allowlist else None
        self._session: Any = None
        self._warming: threading.Thread | None = None

    def prewarm(self) -> None:
        """Start opening the session in the background, so the first call does not wait for
        the sandbox to start (the caller does this while the model thinks). A session that
        cannot open is not an error here: the call then tries again and fails with
        `sandbox_error`."""
        if self._warming is not None or (self._session is not None and not self._session.closed):
            return

        def warm() -> None:
            try:
                self._open()
            except Exception:  # noqa: BLE001 - the call that needs it reports the failure
                logger.info("run %s: the sandbox session could not be opened ahead", self.run_id)

        self._warming = threading.Thread(target=warm, name=f"motor-warm-{self.run_id}", daemon=True)
        self._warming.start()

    def _settled(self) -> None:
        """Wait for a background open to finish (it registers the session when it does)."""
        warming, self._warming = self._warming, None
        if warming is not None:
            warming.join()

    def _open(self) -> Any:
        if self._session is None or self._session.closed:
            from runs.sessions import run_session_get

            self._session = run_session_get(
                run_id=self.run_id,
                workspace=self.workspace,
                allowed_domains=self.allowed_domains,
                layer=self.layer,
                tools=self.tools,
            )
        return self._session

    def execute(
        self, *, name: str, arguments: dict[str, Any], credentials: dict[str, str]
    ) -> dict[str, Any]:
        try:
            import sandbox.tools as sandbox_tools
            from sandbox.types import SandboxError
        except ImportError as exc:  # pragma: no cover - the library ships with the project
            return envelope(
                ok=False, output=f"sandbox unavailable: {exc}", error_code="sandbox_error"
            )
        self._settled()
        try:
            session = self._open()
            extra: dict[str, Any] = {}
            if self.bash_allowlist is not None:
                extra["bash_allowlist"] = self.bash_allowlist
            result = sandbox_tools.execute_tool(
                session,
                name,
                arguments,
                credentials=credentials,
                network_enabled=bool(self.allowed_domains),
                **extra,
            )
        except SandboxError as exc:
            return envelope(
                ok=False, output=f"sandbox error: {exc}", error_code="sandbox_error", retryable=True
            )
        data = result.to_dict()
        return envelope(
            ok=bool(data["ok"]),
            output=str(data["output"]),
            error_code=data.get("error_code"),  # type: ignore[arg-type]
            retryable=bool(data.get("retryable")),
            provenance=str(data.get("provenance") or "internal"),
            duration_ms=int(data.get("duration_ms") or 0),  # type: ignore[call-overload]
            cost=float(data.get("cost") or 0.0),  # type: ignore[arg-type]
        )

    def close(self) -> None:
        """Let go of the session; it stays open in the registry for the run's next slice.

        A background open still in progress is waited for, so whoever closes the run's session
        next (cancel, the run's end) finds it registered."""
        self._settled()
        self._session = None
