"""History compaction: older tool results shortened, pairs and non-tool messages untouched."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runs.compaction import compact_messages, roll_up
from runs.tools import envelope, tool_message_content


def _assistant(*calls: tuple[str, str], content: str | None = None) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}
            for call_id, name in calls
        ],
    }


def _tool(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


DIGITS = "0123456789" * 20  # 200 characters
FAILED = tool_message_content(
    envelope(ok=False, output="z" * 150 + "END-OF-LOG", error_code="timeout")
)  # "ERROR (timeout): zzz…END-OF-LOG", 177 characters
WEB = tool_message_content(
    envelope(ok=True, output="<html>" + "w" * 180 + "</html>", provenance="web")
)


def _history() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "S" * 500},
        {"role": "user", "content": "U" * 500},
        _assistant(("c1", "read"), ("c2", "code"), content="reading first"),
        _tool("c1", DIGITS),
        _tool("c2", FAILED),
        _assistant(("c3", "fetch")),
        _tool("c3", WEB),
        _assistant(("c4", "ask_user")),
        _tool("c4", "y" * 300),
        _assistant(("c5", "code")),
        _tool("c5", "4"),
        _assistant(("c6", "read"), ("c7", "read")),
        _tool("c6", "a" * 300),
        _tool("c7", "b" * 300),
        _assistant(("c8", "list")),
        _tool("c8", "c" * 300),
        {"role": "assistant", "content": "done"},
    ]


def test_older_results_are_summarised_and_the_last_three_kept_in_full():
    # given a history with eight tool results, some long, one failed, one from the web
    history = _history()
    # when it is compacted to 20 characters of excerpt per older result
    compacted = compact_messages(history, keep_full=3, summary_chars=20)
    # then the five older long results are shortened with header, head and tail
    expected = _history()
    expected[3]["content"] = (
        "[compacted tool result read: ok, 200 characters]\n"
        "0123456789\n[… 180 characters omitted …]\n0123456789"
    )
    expected[4]["content"] = (
        "[compacted tool result code: error (timeout), 177 characters]\n"
        "ERROR (tim\n[… 157 characters omitted …]\nEND-OF-LOG"
    )
    # and a web result stays marked untrusted
    expected[6]["content"] = (
        '<untrusted source="web">\n'
        "[compacted tool result fetch: ok, 193 characters]\n"
        "<html>wwww\n[… 173 characters omitted …]\nwww</html>"
        "\n</untrusted>"
    )
    # while the user's answer to ask_user and a result too short to shrink stay as they are,
    # and so do the last three results (c6, c7, c8) and every non-tool message
    assert compacted == expected


def test_compacting_twice_is_the_same_as_once_and_the_input_is_not_modified():
    # given a history and a pristine copy of it
    history = _history()
    pristine = copy.deepcopy(history)
    # when it is compacted twice
    once = compact_messages(history, summary_chars=20)
    twice = compact_messages(once, summary_chars=20)
    # then the second pass changes nothing and the input is untouched
    assert twice == once
    assert once != pristine
    assert history == pristine


def test_a_json_envelope_result_is_summarised_from_its_output_with_its_error_code():
    # given an older result stored as a JSON envelope of a failed call
    raw = json.dumps(envelope(ok=False, output="q" * 60, error_code="exit_nonzero"))
    history = [
        _assistant(("e1", "bash")),
        _tool("e1", raw),
        _assistant(("e2", "read")),
        _tool("e2", "fine"),
    ]
    # when it is compacted keeping only the last result
    compacted = compact_messages(history, keep_full=1, summary_chars=10)
    # then the summary names the error code and quotes the output, not the JSON
    assert compacted[1]["content"] == (
        "[compacted tool result bash: error (exit_nonzero), 60 characters]\n"
        "qqqqq\n[… 50 characters omitted …]\nqqqqq"
    )
    assert compacted[3] == _tool("e2", "fine")


def test_a_history_with_no_more_results_than_kept_is_returned_unchanged():
    history = _history()[:7]  # three tool results
    assert compact_messages(history, keep_full=3, summary_chars=20) == history


def test_keep_full_zero_summarises_every_long_result():
    history = [_assistant(("k1", "read")), _tool("k1", DIGITS)]
    compacted = compact_messages(history, keep_full=0, summary_chars=20)
    assert compacted[1]["content"].startswith("[compacted tool result read: ok, 200 characters]\n")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"keep_full": -1}, "keep_full: -1 must be 0 or more"),
        ({"summary_chars": 1}, "summary_chars: 1 must be at least 2"),
    ],
)
def test_bad_parameters_are_refused_naming_the_rule(kwargs, message):
    with pytest.raises(ValueError, match=message):
        compact_messages(_history(), **kwargs)


# --- properties ----------------------------------------------------------------------------------

_texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=900)
_results = st.one_of(
    _texts,
    _texts.map(lambda t: tool_message_content(envelope(ok=False, output=t, error_code="timeout"))),
    _texts.map(lambda t: tool_message_content(envelope(ok=True, output=t, provenance="web"))),
)
_tool_names = st.sampled_from(["read", "code", "fetch", "bash", "ask_user"])


@st.composite
def _histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
    messages.append({"role": "user", "content": draw(_texts)})
    for turn in range(draw(st.integers(min_value=0, max_value=8))):
        if draw(st.booleans()):
            messages.append({"role": "user", "content": draw(_texts)})
        calls = [
            (f"t{turn}c{index}", draw(_tool_names))
            for index in range(draw(st.integers(min_value=1, max_value=3)))
        ]
        messages.append(_assistant(*calls, content=draw(st.none() | _texts)))
        messages.extend(_tool(call_id, draw(_results)) for call_id, _ in calls)
    return messages


def _pairs_hold(messages: list[dict[str, Any]]) -> bool:
    """Every assistant message with tool calls is followed by exactly its results, in order."""
    for position, message in enumerate(messages):
        ids = [call["id"] for call in message.get("tool_calls") or ()]
        if not ids:
            continue
        following = messages[position + 1 : position + 1 + len(ids)]
        if [m.get("role") for m in following] != ["tool"] * len(ids):
            return False
        if [m["tool_call_id"] for m in following] != ids:
            return False
    return True


@settings(max_examples=200, deadline=None)
@given(history=_histories(), keep_full=st.integers(min_value=0, max_value=5))
def test_compaction_keeps_pairs_the_last_results_and_everything_but_tool_content(
    history, keep_full
):
    # given any well-formed history
    assert _pairs_hold(history)
    # when it is compacted
    compacted = compact_messages(history, keep_full=keep_full, summary_chars=40)
    # then the structure is the same message for message, and the pairing still holds
    assert len(compacted) == len(history)
    assert _pairs_hold(compacted)
    for before, after in zip(history, compacted, strict=True):
        if before["role"] != "tool":
            assert after == before
        else:
            assert after["tool_call_id"] == before["tool_call_id"]
            assert len(after["content"]) <= len(before["content"])
            if before["content"].startswith('<untrusted source="web">'):
                assert after["content"].startswith('<untrusted source="web">\n')
                assert after["content"].endswith("\n</untrusted>")
    # and the last `keep_full` results are byte-identical
    results_before = [m["content"] for m in history if m["role"] == "tool"]
    results_after = [m["content"] for m in compacted if m["role"] == "tool"]
    kept = results_before[len(results_before) - keep_full :] if keep_full else []
    assert results_after[len(results_after) - len(kept) :] == kept
    assert [c.encode() for c in results_after[len(results_after) - len(kept) :]] == [
        c.encode() for c in kept
    ]
    # and compacting again changes nothing
    assert compact_messages(compacted, keep_full=keep_full, summary_chars=40) == compacted


@settings(max_examples=50, deadline=None)
@given(history=_histories())
def test_with_default_parameters_the_last_three_results_are_byte_identical(history):
    compacted = compact_messages(history)
    before = [m["content"].encode() for m in history if m["role"] == "tool"][-3:]
    after = [m["content"].encode() for m in compacted if m["role"] == "tool"][-3:]
    assert after == before
    assert _pairs_hold(compacted)


# --- the rolling summary (roll_up) ----------------------------------------------------------------


def _iterations(iterations: int) -> list[dict[str, Any]]:
    """The task, then `iterations` iterations: iteration n says "step n" and calls tool_n."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "the task"}]
    for n in range(1, iterations + 1):
        messages.append(_assistant((f"c{n}", "read"), content=f"step {n}"))
        messages.append(_tool(f"c{n}", f"output of {n}"))
    return messages


@pytest.mark.parametrize(("iterations", "rolled"), [(0, 0), (10, 0), (19, 0), (20, 10), (29, 10)])
def test_roll_up_keeps_at_least_ten_iterations_in_full_and_rolls_whole_blocks(iterations, rolled):
    # given an attempt with `iterations` iterations
    messages = _iterations(iterations)
    # when it is rolled up
    digest, sent = roll_up(messages)
    # then the first `rolled` iterations left the conversation, whole, and the task stays first
    assert sent == [messages[0], *messages[1 + 2 * rolled :]]
    if rolled:
        assert digest.startswith(f"Iterations 1-{rolled} of this attempt")
        assert f"{rolled}. step {rolled}\n" in digest + "\n"
        assert f"{rolled + 1}. step" not in digest
    else:
        assert digest == ""
        assert sent is messages


def test_roll_up_at_fifty_iterations_rolls_forty_and_sends_ten():
    digest, sent = roll_up(_iterations(50))
    assert digest.startswith("Iterations 1-40 of this attempt")
    assert [m["content"] for m in sent if m["role"] == "assistant"] == [
        f"step {n}" for n in range(41, 51)
    ]
    assert len(sent) == 1 + 2 * 10


def test_the_digest_names_calls_and_outcomes_keeps_answers_and_never_web_output():
    # given twenty iterations, the first three a failed call, a web fetch and an ask_user answer
    messages = _iterations(20)
    messages[1] = _assistant(("c1", "bash"), content="try  the\nbuild")
    messages[1]["tool_calls"][0]["function"]["arguments"] = '{"command": "make"}'
    messages[2] = _tool("c1", FAILED)
    messages[3] = _assistant(("c2", "fetch"))
    messages[4] = _tool("c2", WEB)
    messages[5] = _assistant(("c3", "ask_user"))
    messages[6] = _tool("c3", "Use port 8080")
    # when it is rolled up
    digest, _ = roll_up(messages)
    # then each call is listed with its outcome; the user's answer is kept; no web text is
    lines = digest.splitlines()
    assert lines[1:7] == [
        "1. try the build",
        '   - bash({"command": "make"}) -> error (timeout)',
        "2.",
        "   - fetch({}) -> ok",
        "3.",
        "   - ask_user({}) -> answer: Use port 8080",
    ]
    assert "<html>" not in digest and "untrusted" not in digest and "zzz" not in digest


def test_a_call_without_a_result_is_never_rolled_up():
    # given 20 complete iterations and a 21st whose call is still waiting for its result
    messages = [*_iterations(20), _assistant(("c21", "read"), content="step 21")]
    digest, sent = roll_up(messages)
    # then only the first block is rolled up and the waiting call is sent, last
    assert digest.startswith("Iterations 1-10 ")
    assert sent[-1] == messages[-1]
    ids = [call["id"] for m in sent if m["role"] == "assistant" for call in m["tool_calls"]]
    assert ids == [f"c{n}" for n in range(11, 22)]


def test_roll_up_refuses_a_block_size_below_one():
    with pytest.raises(ValueError, match="every: 0 must be at least 1"):
        roll_up(_iterations(3), every=0)
