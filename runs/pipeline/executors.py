"""Stage 3, execute: the executor of each tool kind, behind one interface, and their registry.

An `Executor` turns one call (`CallContext`) into a result envelope (`runs.tools.envelope`) or,
for a host-side tool, into a pause (`AwaitInput`, `AwaitApproval`). Two kinds exist:

- world executors (`host = False`): the sandbox today, MCP and browser tools later. They run
  after the call's intent is durable, outside any transaction and without a database
  connection, under the call watch (a cancel kills them); the pipeline hands them the run's
  credential values, retries a transient failure of an idempotent call once, and redacts every
  value from the result before anything stores it (`call_execute`).
- host executors (`host = True`): ask_user, request_approval, save_credential. They change
  nothing outside the database and run inside the fenced transaction that wrote the intent.

`executor_for(name)` picks the executor; a tool name without one of its own goes to the
sandbox. A new tool kind is one `Executor` and one `ToolManifest`, registered together with
`tool_kind_register`: the loop and the other stages do not change.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from runs.crashpoints import crash_point
from runs.credentials import (
    placeholder,
    redact,
    run_credentials_read,
    save_denial,
    save_offered,
    saved_values,
    skill_policy,
)
from runs.db import release_db_connection
from runs.failures import execute_retrying_transient
from runs.lease import Lease
from runs.metrics import tool_call_record
from runs.models import MotorRun, Step
from runs.pipeline.approvals import approval_proposal
from runs.sessions import CallWatch
from runs.tools import (
    ASK_USER,
    REQUEST_APPROVAL,
    SAVE_CREDENTIAL,
    SandboxSlot,
    ToolManifest,
    envelope,
    tool_manifest_register,
    tool_manifest_unregister,
    tool_sources_refresh,
)


@dataclass(frozen=True)
class CallContext:
    """One call as its executor sees it: the run, the call's intent (`step`), the tool and its
    arguments (an object), the run's sandbox slot, and the credential values it may use (world
    executors only; empty for host executors, which never need a value)."""

    run: MotorRun
    step: Step
    name: str
    arguments: dict[str, Any]
    slot: SandboxSlot
    credentials: dict[str, str]


@dataclass(frozen=True)
class AwaitInput:
    """A host executor's answer: pause the run until the user answers `question`."""

    question: str


@dataclass(frozen=True)
class AwaitApproval:
    """A host executor's answer: pause the run until the owner decides on exactly this call."""

    tool: str
    arguments: dict[str, Any]
    summary: str


Outcome = dict[str, Any] | AwaitInput | AwaitApproval


class Executor:
    """Runs the calls of one tool kind.

    `execute` returns the result envelope of the call (a failure is an envelope with `ok`
    False and an `error_code`, never an exception); only a host executor may return a pause.
    It is called at most once per call by the pipeline (twice for a transient failure of an
    idempotent world call), from the slice's thread.
    """

    #: True: runs inside the transaction that wrote the call's intent (see the module)
    host: ClassVar[bool] = False

    def execute(self, call: CallContext) -> Outcome:
        raise NotImplementedError

    def prewarm(self, slot: SandboxSlot) -> None:
        """Get ready for a call that may follow the model's reply (called while the model
        thinks, once per iteration of a run granted this kind); nothing by default."""


class SandboxExecutor(Executor):
    """The sandbox's tools, in the run's warm session (`SandboxSlot`)."""

    def prewarm(self, slot: SandboxSlot) -> None:
        slot.prewarm()

    def execute(self, call: CallContext) -> Outcome:
        return call.slot.execute(
            name=call.name, arguments=call.arguments, credentials=call.credentials
        )


class AskUserExecutor(Executor):
    """ask_user: a non-empty question pauses the run for the user's answer."""

    host = True

    def execute(self, call: CallContext) -> Outcome:
        question = str(call.arguments.get("question") or "").strip()
        if question:
            return AwaitInput(question=question)
        return envelope(
            ok=False, output="ask_user needs a non-empty 'question'", error_code="invalid_args"
        )


class RequestApprovalExecutor(Executor):
    """request_approval: a valid proposal pauses the run for the owner's decision."""

    host = True

    def execute(self, call: CallContext) -> Outcome:
        proposal = approval_proposal(call.run, call.arguments)
        if "ok" in proposal:
            return proposal
        return AwaitApproval(**proposal)


class SaveCredentialExecutor(Executor):
    """save_credential: keep a value the model obtained, within the run's save scope."""

    host = True

    def execute(self, call: CallContext) -> Outcome:
        return _save_credential(call.run, call.arguments)


SANDBOX = SandboxExecutor()

_executors: dict[str, Executor] = {
    ASK_USER: AskUserExecutor(),
    REQUEST_APPROVAL: RequestApprovalExecutor(),
    SAVE_CREDENTIAL: SaveCredentialExecutor(),
}


#: resolvers of names a tool kind owns but no longer offers (see `tool_kind_resolver_register`)
_resolvers: list[Callable[[str], Executor | None]] = []


def tool_kind_resolver_register(resolver: Callable[[str], Executor | None]) -> None:
    """Let a tool source answer the calls of a name it owns but no longer offers (a disabled
    MCP tool, say): `resolver(name)` returns the executor that tells the model why, or None.
    Without it such a call would reach the sandbox as an unknown tool."""
    if resolver not in _resolvers:
        _resolvers.append(resolver)


def executor_for(name: str) -> Executor:
    """The executor of tool `name`: its registered one, else the one a tool source's resolver
    names, else the sandbox. A name no manifest of this process knows first lets the tool
    sources register theirs (runs.tools)."""
    executor = _executors.get(name)
    if executor is None:
        tool_sources_refresh([name])
        executor = _executors.get(name)
    if executor is None:
        for resolve in list(_resolvers):
            executor = resolve(name)
            if executor is not None:
                break
    return executor or SANDBOX


def executors_prewarm(tools: Sequence[str], slot: SandboxSlot) -> None:
    """Let the executor of every granted tool get ready (each executor once): a run granted
    no sandbox tool opens no sandbox session."""
    seen: set[int] = set()
    for name in tools:
        executor = executor_for(name)
        if id(executor) not in seen:
            seen.add(id(executor))
            executor.prewarm(slot)


def tool_kind_register(manifest: ToolManifest, executor: Executor) -> None:
    """Add a tool kind: runs may be granted `manifest.name`, the model is offered its schema,
    and its calls go through every stage of the pipeline to `executor`.

    Raises ValueError when the name is taken (a sandbox or host-side tool, or registered).
    """
    tool_manifest_register(manifest)
    _executors[manifest.name] = executor


def tool_kind_unregister(name: str) -> None:
    """Remove a tool kind added with `tool_kind_register`."""
    tool_manifest_unregister(name)
    _executors.pop(name, None)


def call_execute(
    lease: Lease,
    run: MotorRun,
    step: Step,
    name: str,
    arguments: dict[str, Any],
    executor: Executor,
    slot: SandboxSlot,
    credentials: Callable[[MotorRun], dict[str, str]] | None,
) -> dict[str, Any]:
    """Run a world call whose intent is durable: outside any transaction, without a database
    connection, under the call watch; return its result with every credential value the run
    knows replaced by its placeholder, and its duration."""
    crash_point("after_intent")
    started = time.monotonic()
    values = {**(credentials or run_credentials_read)(run), **saved_values(run)}
    release_db_connection()
    context = CallContext(
        run=run, step=step, name=name, arguments=arguments, slot=slot, credentials=values
    )
    # A cancel (or any newer claim) moves the token; the watch then kills the running call.
    with CallWatch(run_id=lease.run_id, token=lease.token):
        # a transient failure of an idempotent call is retried once before the model sees it
        result = execute_retrying_transient(
            lambda: _envelope_of(executor.execute(context), name),
            name=name,
            arguments=arguments,
            network_enabled=bool(run.allowed_domains),
        )
    # The sandbox already redacts what it was given; this covers every other executor too.
    result = redact(result, values)
    result["duration_ms"] = result.get("duration_ms") or int((time.monotonic() - started) * 1000)
    tool_call_record(
        tool=name,
        duration_s=result["duration_ms"] / 1000,
        ok=bool(result.get("ok")),
        error_code=str(result.get("error_code") or ""),
    )
    crash_point("after_execution")
    return result


def _envelope_of(outcome: Outcome, name: str) -> dict[str, Any]:
    """A world executor's result; a pause is no result there (only host tools may pause)."""
    if isinstance(outcome, dict):
        return outcome
    return envelope(ok=False, output=f"tool {name!r} cannot pause the run", error_code="tool_error")


def _save_credential(run: MotorRun, arguments: dict[str, Any]) -> dict[str, Any]:
    """Apply a save_credential call whose value was moved to the run's store. Caller holds locks.

    For a skill run the value goes into that skill policy's credential values (in this
    transaction); for any other run it stays in the run's encrypted store until extraction.
    """
    if not save_offered(run):
        return envelope(
            ok=False,
            output="save_credential is only available to skill runs and runs that create a skill",
            error_code="denied",
        )
    name = arguments.get("name")
    if not isinstance(name, str) or arguments.get("value") != placeholder(name):
        return envelope(
            ok=False,
            output="save_credential needs 'name' (string) and a non-empty 'value' (string)",
            error_code="invalid_args",
        )
    denial = save_denial(run, name)
    if denial is not None:
        return envelope(ok=False, output=f"save_credential denied: {denial}", error_code="denied")
    values = saved_values(run)
    if name not in values:  # pragma: no cover - the value is stored when the reply is recorded
        return envelope(ok=False, output="the value was not received", error_code="invalid_args")
    if run.skill_id is not None:
        from skills.errors import SkillError
        from skills.policy_edits import policy_update
        from skills.services import Actor

        try:
            policy_update(
                policy=skill_policy(run).pk,
                actor=Actor.system(f"run {run.id}"),
                set_credentials={name: values[name]},
                reason=f"saved by motor run {run.id}",
            )
        except SkillError as exc:
            return envelope(ok=False, output=f"save_credential failed: {exc}", error_code="denied")
        where = "in the skill's policy"
    else:
        where = "for the skill this run creates (stored when it is extracted)"
    return envelope(
        ok=True,
        output=(
            f"Saved {placeholder(name)} {where}. Use the placeholder {placeholder(name)}; "
            f"code, bash and fetch also get it as the environment variable {name}."
        ),
    )
