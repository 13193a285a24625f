"""One call of a deployed MCP tool, for any caller: a motor run's pipeline (forge.registry's
executor) and the built-in brain (cognition.core_mcp) both call `mcp_tool_call`.

The database is asked at every call: a call reaches a server only when its row is deployed and
the calling agent holds an approved policy bound to the deployed content. Any other call gets
an answer naming the tool, the state of its server and why (`tool_unavailable`): disabled by
whom and when, failed with the summary of its last crash, removed, replaced by a version
without that tool, or not approved for this agent. Such a refusal is counted on the tool
(calls, failures, last error) but not in its server's health window: the server never ran.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Case, IntegerField, Value, When

from forge.models import LIVE_STATUSES, DeployedServer, McpTool, Semantics, ServerStatus
from forge.runtime import ServerFailed, pool
from runs.credentials import redact
from runs.db import release_db_connection
from runs.tools import envelope
from sandbox.mcp import McpError, McpTimeout
from skills.models import Policy, PolicyStatus

#: the error code of a call the tool's state refuses (retrying cannot help; the owner can)
UNAVAILABLE_CODE = "denied"
#: most characters of a failed server's summary shown to the model
FAILURE_SUMMARY_CHARS = 400


@dataclass(frozen=True)
class Unavailable:
    """Why a known MCP tool cannot be called now: its `state` (disabled, failed, removed,
    superseded, not_approved) and the sentence the model is given."""

    tool_id: int
    state: str
    message: str


def _when(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S UTC") if at else "an unrecorded time"


def failure_summary(failure: str) -> str:
    """How a failed server ended, in a few lines: the first line (what happened) and the end of
    its stderr tail (where Python puts the exception)."""
    lines = [line.strip() for line in failure.splitlines() if line.strip()]
    if not lines:
        return "no output was recorded"
    head, tail = lines[0], lines[1:][-3:]
    text = " | ".join([head, *tail]) if tail else head
    if len(text) > FAILURE_SUMMARY_CHARS:
        text = "…" + text[-(FAILURE_SUMMARY_CHARS - 1) :]
    return text


def _approved(server: DeployedServer, agent_id: int) -> bool:
    """The agent holds an approved, enabled policy bound to the deployed content."""
    return Policy.objects.filter(
        skill_id=server.skill_id,
        agent_id=agent_id,
        status=PolicyStatus.APPROVED,
        approved_content_hash=server.content_hash,
        disabled_at__isnull=True,
    ).exists()


def _latest_row(name: str) -> McpTool | None:
    """The row of tool `name` on its skill's live server, else on the newest server it had."""
    live_first = Case(
        When(server__status__in=LIVE_STATUSES, then=Value(0)),
        default=Value(1),
        output_field=IntegerField(),
    )
    return (
        McpTool.objects.select_related("server", "server__version", "server__skill")
        .filter(qualified_name=name)
        .order_by(live_first, "-server__created_at", "-server_id")
        .first()
    )


def tool_known(name: str) -> bool:
    """`name` is a tool some deployed server offered, now or before."""
    return McpTool.objects.filter(qualified_name=name).exists()


def tool_unavailable(name: str, *, agent_id: int) -> Unavailable | None:
    """Why tool `name` cannot be called by `agent_id`'s runs now, or None when it can (or when
    no server ever offered it: then it is simply unknown)."""
    tool = _latest_row(name)
    return None if tool is None else _explain(tool, name, agent_id)


def _explain(tool: McpTool, name: str, agent_id: int) -> Unavailable | None:
    server = tool.server
    skill = server.skill.name
    where = f"skill {skill!r} v{server.version.number}"
    status = server.status
    if status == ServerStatus.DEPLOYED:
        if _approved(server, agent_id):
            return None
        policy = (
            Policy.objects.filter(skill_id=server.skill_id, agent_id=agent_id)
            .select_related("disabled_by")
            .first()
        )
        if policy is not None and policy.disabled_at is not None:
            by = policy.disabled_by.get_username() if policy.disabled_by else "the skill cortex"
            reason = f" ({policy.disabled_reason})" if policy.disabled_reason else ""
            return Unavailable(
                tool.pk,
                "skill_disabled",
                f"tool {name} is disabled: {where} was disabled for this agent by {by} at "
                f"{_when(policy.disabled_at)}{reason}. Staff enable it again in the admin.",
            )
        why = (
            "this agent has no policy for it"
            if policy is None
            else f"this agent's policy is {policy.status}"
            if policy.status != PolicyStatus.APPROVED
            else "this agent's approval is bound to other content than the deployed version"
        )
        return Unavailable(
            tool.pk,
            "not_approved",
            f"tool {name} is not approved: {where} is deployed, but {why}. A person approves "
            "the skill for this agent in the skills review.",
        )
    if status == ServerStatus.DISABLED:
        return Unavailable(
            tool.pk,
            status,
            f"tool {name} is disabled by {server.status_by or 'an unrecorded actor'} at "
            f"{_when(server.status_at)}: {where} is not running. The owner can enable it again "
            "(MCP servers: enable).",
        )
    if status == ServerStatus.FAILED:
        return Unavailable(
            tool.pk,
            status,
            f"tool {name} is failed since {_when(server.status_at)} ({where}, marked by "
            f"{server.status_by or 'the worker'}): {failure_summary(server.failure)}. The owner "
            "can improve the skill or enable it again.",
        )
    if status == ServerStatus.REMOVED:
        return Unavailable(
            tool.pk,
            status,
            f"tool {name} was removed by {server.status_by or 'an unrecorded actor'} at "
            f"{_when(server.status_at)} ({where}); it is no longer offered.",
        )
    # superseded: the skill's live version (if any) no longer has this tool
    live = (
        DeployedServer.objects.filter(skill_id=server.skill_id, status__in=LIVE_STATUSES)
        .select_related("version")
        .first()
    )
    if live is None:
        detail = "no version of the skill is deployed now"
    else:
        names = sorted(live.tools.values_list("qualified_name", flat=True))
        detail = (
            f"version {live.version.number} replaced it ({live.status}), with the tools "
            f"{', '.join(names) or 'none'}"
        )
    return Unavailable(
        tool.pk,
        "superseded",
        f"tool {name} no longer exists: {where} was replaced by "
        f"{server.status_by or 'a newer deployment'} at {_when(server.status_at)}; {detail}.",
    )


def mcp_tool_call(
    name: str,
    arguments: dict[str, Any],
    *,
    agent_id: int,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Call tool `name` (`<skill>__<tool>`) for `agent_id` and return its result envelope
    (runs.tools.envelope), with every credential value of its server replaced by its
    placeholder. Never raises for the tool's failures: they are envelopes with `ok` False.
    The database connection is released before the server is called and at the end."""
    started = time.monotonic()
    try:
        return _call(name, arguments, agent_id=agent_id, started=started)
    finally:
        release_db_connection()


def _refused(why: Unavailable) -> dict[str, Any]:
    from forge import services

    services.tool_record_call(why.tool_id, ok=False, error=why.message, refused=True)
    result = envelope(ok=False, output=why.message, error_code=UNAVAILABLE_CODE)
    result["tool_state"] = why.state
    return result


def _call(name: str, arguments: dict[str, Any], *, agent_id: int, started: float) -> dict[str, Any]:
    from forge import services
    from forge.registry import tools_sync

    tool = _latest_row(name)
    if tool is None:
        return envelope(
            ok=False,
            output=f"tool {name!r} is not a deployed MCP tool; list the tools again",
            error_code="not_found",
        )
    why = _explain(tool, name, agent_id)
    if why is not None:
        if tool.server.status != ServerStatus.DEPLOYED:
            tools_sync()  # this process may still offer it
        return _refused(why)
    server = tool.server
    timeout_s = float(
        server.limits.get("call_timeout_s") or getattr(settings, "FORGE_CALL_TIMEOUT_SECONDS", 60)
    )
    secrets: dict[str, str] = {}

    def remember(values: dict[str, str]) -> None:
        secrets.update({server.credentials.get(env, env): v for env, v in values.items()})

    def plan() -> Any:
        built = services.server_plan(server)
        remember(dict(built.credentials))
        return built

    def done(result: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = redact(result, secrets)
        return out

    live = pool.get(server.pk)
    if live is None or not live.alive:
        if server.crash_count:
            # restarted with backoff: 1 s, 2 s, 4 s... after consecutive crashes
            time.sleep(min(2 ** (server.crash_count - 1), 8))
        try:
            live = pool.ensure(plan, server.pk)
        except ServerFailed as exc:
            failed = services.server_record_crash(
                server.pk, message=str(exc), stderr_tail=exc.stderr_tail, secrets=secrets
            )
            services.tool_record_call(tool.pk, ok=False, error=redact(str(exc), secrets))
            note = " It is now marked failed." if failed else ""
            return done(
                envelope(
                    ok=False,
                    output=f"{exc}{note}",
                    error_code="sandbox_error",
                    retryable=not failed,
                )
            )
        except Exception as exc:  # noqa: BLE001 - e.g. credentials that cannot be resolved
            services.tool_record_call(tool.pk, ok=False, error=str(exc))
            return done(
                envelope(
                    ok=False, output=f"the server cannot start: {exc}", error_code="sandbox_error"
                )
            )
    remember(dict(live.plan.credentials))
    release_db_connection()
    try:
        outcome = live.call(tool.name, arguments, timeout_s)
    except McpTimeout as exc:
        pool.stop(server.pk)  # a hung server is not reused
        services.tool_record_call(tool.pk, ok=False, error=str(exc))
        return done(envelope(ok=False, output=str(exc), error_code="timeout", retryable=True))
    except McpError as exc:
        message = str(exc)
        if not live.process.alive:
            pool.stop(server.pk)
            failed = services.server_record_crash(
                server.pk,
                message=message,
                stderr_tail=live.process.stderr_tail(),
                secrets=secrets,
            )
            if failed:
                message += " The server crashed too often and is now marked failed."
        services.tool_record_call(tool.pk, ok=False, error=redact(message, secrets))
        return done(
            envelope(
                ok=False,
                output=message,
                error_code="sandbox_error",
                retryable=tool.semantics == Semantics.READ,
            )
        )
    denied = live.take_denied()
    output = outcome.text
    if denied:
        output += "\n[egress refused: " + ", ".join(denied) + "]"
    services.tool_record_call(
        tool.pk,
        ok=not outcome.is_error,
        error=redact(outcome.text, secrets) if outcome.is_error else "",
    )
    return done(
        envelope(
            ok=not outcome.is_error,
            output=output,
            error_code="tool_error" if outcome.is_error else None,
            # anything the server fetched came from the web; a server without network computed it
            provenance="web" if server.allowed_domains else "internal",
            duration_ms=int((time.monotonic() - started) * 1000),
        )
    )


__all__ = ["Unavailable", "failure_summary", "mcp_tool_call", "tool_known", "tool_unavailable"]
