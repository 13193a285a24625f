"""The loop's LLM request: what it asks (system prompt, compacted messages, offered tools), sending
it through the shared client, and a new run's first request sent ahead while its worker claims
the run (`FirstCallAhead`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
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
from runs.prompts import WRITING_TOOLS, build_system_prompt
from runs.tools import offered_schemas

logger = logging.getLogger(__name__)


logger = logging.getLogger(__name__)


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
        recovery_context=attempt.recovery_context,
        progress_summary=progress,
        may_write_skill=save_offered(run) and not WRITING_TOOLS.isdisjoint(run.tools),
    )
    messages = [{"role": "system", "content": system}, *compact_messages(recent)]
    tools = offered_schemas(run.tools, synthetic=not run.review, save_credential=save_offered(run))
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


#: characters of task and skill instructions above which a new run's first message does not
#: carry them (its first LLM request then waits for the claim)
FIRST_CALL_AHEAD_MAX_CHARS = 32_000


#: helper threads per worker process sending first requests ahead (one waits out a request)
FIRST_CALL_AHEAD_THREADS = 16


class FirstCallAhead:
    """A new run's first LLM request, sent while the worker claims the run.

    The first message of a run (token 0) carries what that request is made of — the task, the
    granted tools, the skill instructions and what decides the offered tools; never a credential,
    and not at all for runs with credentials, whose first step may be to ask for them. The
    worker sends the request from a helper thread and claims the run meanwhile; the slice then
    uses the answer only if the claimed run's next request is exactly that one (a run that was
    cancelled, or whose message came again after it moved on, asks something else or nothing),
    and otherwise drops it and asks the model itself. The cost of a drop is one unused LLM call.
    """

    _pool: ThreadPoolExecutor | None = None
    _pool_lock = threading.Lock()

    def __init__(self, request: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> None:
        self.request = request
        self.future: Future[LLMReply | LLMUnavailable] | None = None

    @staticmethod
    def inputs(run: MotorRun) -> dict[str, Any] | None:
        """What the first message of the new `run` carries, or None (see the class)."""
        if (
            run.credential_names
            or len(run.task) + len(run.skill_instructions) > FIRST_CALL_AHEAD_MAX_CHARS
        ):
            return None
        return {
            "task": run.task,
            "tools": list(run.tools),
            "skill_instructions": run.skill_instructions,
            "review": run.review,
            "skill_id": run.skill_id,
            "workspace": run.workspace,
        }

    @classmethod
    def start(cls, ahead: dict[str, Any], client: openai.OpenAI | None) -> FirstCallAhead | None:
        """Send the request `ahead` describes from a helper thread; None if it is malformed."""
        try:
            run = MotorRun(
                task=str(ahead["task"]),
                tools=[str(name) for name in ahead["tools"]],
                skill_instructions=str(ahead["skill_instructions"]),
                review=bool(ahead["review"]),
                skill_id=ahead["skill_id"],
                workspace=str(ahead["workspace"]),
            )
        except (KeyError, TypeError):
            logger.warning("a run's first message carried a malformed first request; ignored")
            return None
        attempt = Attempt(messages=[{"role": "user", "content": run.task}])
        early = cls(_llm_request(run, attempt))
        early.future = cls._executor().submit(_chat, *early.request, client)
        return early

    @classmethod
    def _executor(cls) -> ThreadPoolExecutor:
        with cls._pool_lock:
            if cls._pool is None:
                cls._pool = ThreadPoolExecutor(
                    max_workers=FIRST_CALL_AHEAD_THREADS, thread_name_prefix="motor-first-call"
                )
            return cls._pool

    @classmethod
    def warm(cls) -> None:
        """Start a helper thread now, not on the first run's time."""
        cls._executor().submit(int)

    @classmethod
    def _forget_pool(cls) -> None:
        """In a forked child (a prefork pool process): the parent's helper threads do not exist
        here, and its executor would count them as idle and never start one."""
        cls._pool = None
        cls._pool_lock = threading.Lock()

    def take(self, run: MotorRun, attempt: Attempt) -> LLMReply | LLMUnavailable | None:
        """The answer, if the request sent ahead is the one `run` asks now; else None (dropped)."""
        future, self.future = self.future, None
        if future is None:
            return None
        if future.cancel():  # its thread had not even started: asking now is no slower
            return None
        if _llm_request(run, attempt) != self.request:
            return None
        return future.result()

    def drop(self) -> None:
        """Give the request up: one not started yet is cancelled; one already sent finishes in
        its thread (a worker's shutdown waits for it, as for the slice that sent it) and its
        answer is lost."""
        future, self.future = self.future, None
        if future is not None:
            future.cancel()


_client_cache: dict[str, openai.OpenAI] = {}


def runtime_warm() -> None:
    """Load now what a worker process's first slice would otherwise load on a run's time: the
    sandbox's tool registry with its shell parser, and the LLM client with its HTTP stack and
    TLS context (about a quarter of a second of CPU per process, measured in bench part 3)."""
    import sandbox.tools as sandbox_tools

    sandbox_tools.tool_schemas(list(sandbox_tools.TOOL_NAMES))
    _default_client()
    FirstCallAhead.warm()


os.register_at_fork(after_in_child=FirstCallAhead._forget_pool)


def _default_client() -> openai.OpenAI:
    key = f"{settings.LLM_BASE_URL}|{settings.LLM_API_KEY}"
    if key not in _client_cache:
        _client_cache.clear()
        _client_cache[key] = llm_client()
    return _client_cache[key]
