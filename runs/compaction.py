"""History compaction: what the model is sent of an attempt's messages (seed 001, Phase 2).

`compact_messages` rewrites only the *content* of older tool results; it never adds, removes or
reorders a message, so every assistant message with tool calls stays followed by exactly its tool
results, and system and user messages are returned unchanged. It works on the copy sent to the
LLM: the attempt's stored messages and the Step ledger keep every result in full.

How runs record tool results (see `runs.tools.tool_message_content`): the content is the tool's
output text, prefixed with ``ERROR (<error_code>): `` when the call failed, and wrapped in
``<untrusted source="web">`` … ``</untrusted>`` when it came from the web. A JSON envelope
(``{"ok": …, "output": …, "error_code": …}``) is understood as well. A compacted web result stays
wrapped, so text from the web is never presented to the model as trusted.

`roll_up` is the seed's rolling summary: once an attempt has ROLLING_SUMMARY_EVERY iterations
beyond a full window, the oldest whole blocks of ROLLING_SUMMARY_EVERY iterations leave the
conversation sent to the model and are replaced by a digest in the system prompt (runs.prompts):
per iteration the model's own words (shortened), each call's tool, arguments (shortened) and
outcome, and the user's answers to ask_user. Tool outputs are not repeated there: what came from
the web never reaches the system prompt. The digest changes only every ROLLING_SUMMARY_EVERY
iterations, so the prompt prefix stays stable between two roll-ups. Together with the shortened
results this keeps an attempt of up to MAX_ITERATIONS_CEILING (50) iterations within bounds.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from runs.tools import ASK_USER

#: iterations per block of the rolling summary (seed 001 Phase 2: "every 10 iterations")
ROLLING_SUMMARY_EVERY = 10
#: characters of the model's text, and of a call's arguments, kept per iteration in the digest
_DIGEST_TEXT_CHARS = 300
_DIGEST_ARGUMENTS_CHARS = 160

#: first line of a compacted result; content that starts with it is never compacted again
COMPACTED_MARKER = "[compacted tool result"
_WEB_OPEN = '<untrusted source="web">\n'
_WEB_CLOSE = "\n</untrusted>"
_ERROR_PREFIX = "ERROR ("


def compact_messages(
    messages: list[dict[str, Any]],
    *,
    keep_full: int = 3,
    summary_chars: int = 400,
    preserve_tools: Collection[str] = (ASK_USER,),
) -> list[dict[str, Any]]:
    """A copy of `messages` in which tool results older than the last `keep_full` are shortened.

    A shortened result keeps a header (tool name, ok or error with its code, original size in
    characters) and the first and last characters of the output, `summary_chars` in all. A result
    that would not get shorter, a result of a tool in `preserve_tools` (the user's answers to
    ask_user), and a result that is already compacted are left as they are. Pure, deterministic
    and idempotent; the input is not modified (messages that stay as they are are shared with
    it, not copied: treat the result as read-only).
    """
    if keep_full < 0:
        raise ValueError(f"keep_full: {keep_full} must be 0 or more")
    if summary_chars < 2:
        raise ValueError(f"summary_chars: {summary_chars} must be at least 2")
    result = list(messages)
    names = _tool_names(result)
    tool_positions = [i for i, message in enumerate(result) if message.get("role") == "tool"]
    older = tool_positions[: max(0, len(tool_positions) - keep_full)]
    for position in older:
        message = result[position]
        content = message.get("content")
        name = names.get(str(message.get("tool_call_id")), "")
        if not isinstance(content, str) or name in preserve_tools:
            continue
        shorter = summarize_tool_content(content, tool=name, summary_chars=summary_chars)
        if shorter is not None:
            result[position] = {**message, "content": shorter}
    return result


def summarize_tool_content(content: str, *, tool: str = "", summary_chars: int = 400) -> str | None:
    """The compacted form of one tool result, or None when it should stay as it is."""
    web = content.startswith(_WEB_OPEN)
    inner = content
    if web:
        inner = content[len(_WEB_OPEN) :]
        if inner.endswith(_WEB_CLOSE):
            inner = inner[: -len(_WEB_CLOSE)]
    if inner.startswith(COMPACTED_MARKER):
        return None
    status, text = _status_and_text(inner)
    head_chars = summary_chars // 2
    tail_chars = summary_chars - head_chars
    omitted = len(text) - head_chars - tail_chars
    if omitted <= 0:
        excerpt = text
    else:
        excerpt = f"{text[:head_chars]}\n[… {omitted} characters omitted …]\n{text[len(text) - tail_chars :]}"
    label = f" {tool}" if tool else ""
    summary = f"{COMPACTED_MARKER}{label}: {status}, {len(text)} characters]\n{excerpt}"
    if web:
        summary = f"{_WEB_OPEN}{summary}{_WEB_CLOSE}"
    if len(summary) >= len(content):
        return None  # compaction never makes a result longer
    return summary


def _status_and_text(inner: str) -> tuple[str, str]:
    """("ok" | "error (<code>)", the output text) of a recorded tool result."""
    envelope = _json_envelope(inner)
    if envelope is not None:
        output = str(envelope.get("output", ""))
        if envelope["ok"]:
            return "ok", output
        return f"error ({envelope.get('error_code') or 'error'})", output
    if inner.startswith(_ERROR_PREFIX):
        code, sep, _ = inner[len(_ERROR_PREFIX) :].partition("): ")
        if sep and code and "\n" not in code:
            return f"error ({code})", inner
    return "ok", inner


def _json_envelope(text: str) -> dict[str, Any] | None:
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, dict) and isinstance(value.get("ok"), bool) and "output" in value:
        return value
    return None


def _tool_names(messages: list[dict[str, Any]]) -> dict[str, str]:
    """tool_call_id → tool name, from the assistant messages' tool calls."""
    names: dict[str, str] = {}
    for message in messages:
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            names[str(call.get("id"))] = str(function.get("name") or "")
    return names


def roll_up(
    messages: list[dict[str, Any]],
    *,
    every: int = ROLLING_SUMMARY_EVERY,
    preserve_tools: Collection[str] = (ASK_USER,),
) -> tuple[str, list[dict[str, Any]]]:
    """(digest, messages to send) with the oldest whole blocks of `every` iterations rolled up.

    An iteration is an assistant message and the tool results that follow it. Blocks are rolled
    up only while at least `every` iterations stay in full after them, so the latest iterations
    (and any call still waiting for its result) are always sent as they are. Messages before the
    first assistant message (the task) stay first. The digest is "" when nothing is rolled up;
    the messages are then returned unchanged. Pure and deterministic; tool call / result pairs
    are never split: an iteration leaves the conversation whole or not at all.
    """
    if every < 1:
        raise ValueError(f"every: {every} must be at least 1")
    starts = [i for i, message in enumerate(messages) if message.get("role") == "assistant"]
    blocks = max(0, (len(starts) - every) // every)
    if blocks == 0:
        return "", messages
    rolled = blocks * every
    head, cut = messages[: starts[0]], starts[rolled]
    lines: list[str] = []
    for number in range(rolled):
        end = starts[number + 1]
        lines.extend(_digest_iteration(number + 1, messages[starts[number] : end], preserve_tools))
    digest = f"Iterations 1-{rolled} of this attempt, in brief (their messages are not shown):\n"
    return digest + "\n".join(lines), [*head, *messages[cut:]]


def _digest_iteration(
    number: int,
    block: list[dict[str, Any]],
    preserve_tools: Collection[str],
) -> list[str]:
    assistant, results = block[0], block[1:]
    text = " ".join(str(assistant.get("content") or "").split())
    lines = [f"{number}. {_shorten(text, _DIGEST_TEXT_CHARS)}" if text else f"{number}."]
    outcomes = {
        str(message.get("tool_call_id")): str(message.get("content") or "")
        for message in results
        if message.get("role") == "tool"
    }
    for call in assistant.get("tool_calls") or ():
        function = call.get("function") or {}
        name = str(function.get("name") or "")
        arguments = " ".join(str(function.get("arguments") or "").split())
        content = outcomes.get(str(call.get("id")))
        if content is None:
            outcome = "no result"
        elif name in preserve_tools:
            outcome = "answer: " + _shorten(content, _DIGEST_TEXT_CHARS)
        else:
            status, _ = _status_and_text(_unwrapped(content))
            outcome = status
        lines.append(f"   - {name}({_shorten(arguments, _DIGEST_ARGUMENTS_CHARS)}) -> {outcome}")
    return lines


def _unwrapped(content: str) -> str:
    if content.startswith(_WEB_OPEN):
        content = content[len(_WEB_OPEN) :]
        if content.endswith(_WEB_CLOSE):
            content = content[: -len(_WEB_CLOSE)]
    return content


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
