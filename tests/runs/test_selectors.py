"""Reads for core.task: list, status and the execution log."""

from __future__ import annotations

import pytest

from runs.selectors import LOG_TAIL_BYTES, run_list, run_log, run_status, signal_list
from runs.services import run_cancel, run_start
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import drive, new_workspace

pytestmark = pytest.mark.django_db


def test_list_filters_by_status_and_counts_iterations(agent, scripted_llm):
    first = run_start(workspace=new_workspace(), agent_id=agent.pk, task="one", actor="t")["run_id"]
    scripted_llm.add(reply_tools(tool_call("nope")), reply_text("done"))
    drive(first, scripted_llm.client())
    second = run_start(workspace=new_workspace(), agent_id=agent.pk, task="two", actor="t")[
        "run_id"
    ]
    run_cancel(run_id=second, actor="t")

    runs, total = run_list(agent_id=agent.pk)
    assert total == 2
    assert [(r["id"], r["status"], r["iterations"]) for r in runs] == [
        (second, "cancelled", 0),
        (first, "completed", 2),
    ]
    completed, total = run_list(agent_id=agent.pk, status="completed", limit=5)
    assert (total, [r["id"] for r in completed]) == (1, [first])


def test_status_shows_the_pending_question_and_the_steps(agent, scripted_llm):
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="t")["run_id"]
    scripted_llm.add(reply_tools(tool_call("ask_user", {"question": "Which one?"})))
    drive(run_id, scripted_llm.client())
    status = run_status(run_id=run_id)
    assert status["status"] == "awaiting_input"
    assert status["pending_question"] == "Which one?"
    assert [(s["tool"], s["state"]) for s in status["steps"]] == [("ask_user", "intent")]
    assert run_status(run_id="run_missing") is None


def test_status_gives_indexes_from_0_and_numbers_from_1(agent, scripted_llm):
    # given a run whose first attempt made one tool call
    run_id = run_start(agent_id=agent.pk, task="t", actor="t", workspace=new_workspace())["run_id"]
    scripted_llm.add(reply_tools(tool_call("ask_user", {"question": "Which one?"})))
    drive(run_id, scripted_llm.client())

    status = run_status(run_id=run_id)

    # then the indexes keep their meaning and the numbers are what a person reads
    assert (status["attempt"]["index"], status["attempt"]["number"]) == (0, 1)
    assert status["attempts"] == 1
    (step,) = status["steps"]
    assert (step["attempt"], step["attempt_number"]) == (0, 1)
    assert (step["iteration"], step["call_index"], step["call_number"]) == (1, 0, 1)


def test_log_lists_transitions_and_calls(agent, scripted_llm):
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="t")["run_id"]
    scripted_llm.add(reply_tools(tool_call("tool_0", {"a": 1})), reply_text("done"))
    drive(run_id, scripted_llm.client())
    lines = run_log(run_id=run_id).splitlines()
    # timestamps first on each entry line; output lines are indented under their call
    assert [line.split(" ", 1)[1] if line[:1].isdigit() else line for line in lines] == [
        "- -> created by t",
        "created -> running by worker:test-worker",
        'attempt 1, iteration 1, call 1: tool_0 {"a": 1} -> error denied',
        "  tool 'tool_0' is not granted to this run (granted: none)",
        "running -> completed by worker:test-worker",
    ]


def test_log_keeps_only_the_last_16_kb(agent, scripted_llm):
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="t")["run_id"]
    scripted_llm.add(
        *(reply_tools(tool_call(f"tool_{i}", {"pad": "x" * 1900})) for i in range(19)),
        reply_text("done"),
    )
    drive(run_id, scripted_llm.client())
    log = run_log(run_id=run_id)
    assert LOG_TAIL_BYTES - 1000 < len(log.encode()) <= LOG_TAIL_BYTES
    assert "- -> created by t" not in log
    assert log.endswith("running -> completed by worker:test-worker")


def test_signal_cursor_returns_only_newer_rows(agent, scripted_llm):
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="t")["run_id"]
    scripted_llm.add(reply_text("done"))
    drive(run_id, scripted_llm.client())
    (signal,) = signal_list(agent_id=agent.pk)
    assert signal.payload["status"] == "completed"
    assert signal_list(agent_id=agent.pk, after_seq=signal.seq) == []
