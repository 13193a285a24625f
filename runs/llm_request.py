"""The loop's LLM request: what it asks (system prompt, compacted messages, offered tools) and
sending it through the shared client.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
from django.conf import settings

from runs.compaction import compact_messages, roll_up
from runs.credentials import save_offered
from runs.errors import LLMUnavailable
from runs.llm import LLMReply, ModelRole, llm_chat, llm_client
from runs.models import (
    Attempt,
    MotorRun,
)
from runs.policy_gate import cached_bash_allowlist
from runs.prompts import WRITING_TOOLS, build_system_prompt
from runs.tools import offered_schemas


def _llm_request(
    run: MotorRun, attempt: Attempt
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The messages and tool schemas of the run's next LLM call."""
    # The oldest iterations of a long attempt go to the system prompt as a digest, older tool
    # results are shortened; the attempt keeps every message in full.
    progress, recent = roll_up(attempt.messages)
    system = build_system_prompt(
        task=run.task,
        granted_tools=run.tools,
        skill_instructions=run.skill_instructions,
        skill_candidates=run.skill_candidates,
        recovery_context=attempt.recovery_context,
        progress_summary=progress,
        may_write_skill=save_offered(run) and not WRITING_TOOLS.isdisjoint(run.tools),
    )
    messages = [{"role": "system", "content": system}, *compact_messages(recent)]
    tools = offered_schemas(
        run.tools,
        synthetic=not run.review,
        save_credential=save_offered(run),
        # Only what the slice already read: this request may be built in another thread
        # with the database connection released, so it must not query.
        bash_allowlist=cached_bash_allowlist(run),
    )
    return messages, tools


def _call_llm(
    run: MotorRun,
    attempt: Attempt,
    client: openai.OpenAI | None,
    *,
    on_sent: Callable[[], None] | None = None,
) -> LLMReply | LLMUnavailable:
    messages, tools = _llm_request(run, attempt)
    return _chat(messages, tools, client, on_sent=on_sent)


def _chat(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    client: openai.OpenAI | None,
    *,
    on_sent: Callable[[], None] | None = None,
) -> LLMReply | LLMUnavailable:
    try:
        return llm_chat(
            client=client or _default_client(),
            messages=messages,
            tools=tools,
            role=ModelRole.MOTOR,
            on_sent=on_sent,
        )
    except LLMUnavailable as exc:
        return exc


_client_cache: dict[str, openai.OpenAI] = {}


def runtime_warm() -> None:
    """Load now what a worker process's first slice would otherwise load on a run's time: the
    sandbox's tool registry with its shell parser, and the LLM client with its HTTP stack and
    TLS context (about a quarter of a second of CPU per process, measured in bench part 3)."""
    import sandbox.tools as sandbox_tools

    sandbox_tools.tool_schemas(list(sandbox_tools.TOOL_NAMES))
    _default_client()


def _default_client() -> openai.OpenAI:
    key = f"{settings.LLM_BASE_URL}|{settings.LLM_API_KEY}"
    if key not in _client_cache:
        _client_cache.clear()
        _client_cache[key] = llm_client()
    return _client_cache[key]
