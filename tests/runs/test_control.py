"""Retry with guidance, the reaper, the awaiting-input timeout, re-emitted questions, and
duplicate wake-up messages."""

from __future__ import annotations

import json
import os
from datetime import timedelta

import pytest
from django.utils import timezone

from runs.errors import InvalidTransition, MotorBusy
from runs.models import Attempt, AttemptStatus, MotorRun, RunStatus, Signal
from runs.services import (
    SliceOutcome,
    run_reap,
    run_reemit_pending_questions,
    run_respond,
    run_retry,
    run_start,
    run_step,
)
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import drive, new_workspace, snapshot

pytestmark = pytest.mark.django_db


def _failed_run(agent, scripted_llm, **kw) -> str:
    run_id = run_start(
        agent_id=agent.pk,
        task="Do it",
        max_iterations=1,
        actor="t",
        **{"workspace": new_workspace(), **kw},
    )["run_id"]
    scripted_llm.add(reply_tools(tool_call("nope")))
    drive(run_id, scripted_llm.client())
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.FAILED
    return run_id


def test_retry_starts_a_clean_attempt_with_the_guidance_in_the_system_prompt(agent, scripted_llm):
    # given a run that failed on its iteration cap
    run_id = _failed_run(agent, scripted_llm)
    # when it is retried with guidance
    result = run_retry(run_id=run_id, guidance="Use the other tool.", actor="agent:1")
    assert result == {"run_id": run_id, "previous_status": "failed", "new_status": "running"}
    scripted_llm.add(reply_text("Done the other way."))
    assert drive(run_id, scripted_llm.client()) == [SliceOutcome.FINISHED]
    # then attempt 1 ran with fresh messages and the recovery context in the system prompt only
    first, second = Attempt.objects.filter(run_id=run_id).order_by("index")
    assert (first.status, second.status) == (AttemptStatus.FAILED, AttemptStatus.COMPLETED)
    assert second.max_iterations == 1
    assert second.recovery_context["guidance"] == "Use the other tool."
    assert second.recovery_context["failure"]["category"] == "budget_exhausted"
    request = scripted_llm.requests[-1]
    assert "<recovery_context>" in request["messages"][0]["content"]
    assert "Use the other tool." in request["messages"][0]["content"]
    assert request["messages"][1:] == [{"role": "user", "content": "Do it"}]
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.current_attempt_index, run.result["summary"]) == (
        RunStatus.COMPLETED,
        1,
        "Done the other way.",
    )


def test_a_retry_gets_at_most_15_iterations(agent, scripted_llm):
    # given a run with the full cap of 20 that failed (the model was unreachable)
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="t")["run_id"]
    drive(run_id, scripted_llm.client())
    assert Attempt.objects.get(run_id=run_id, index=0).max_iterations == 20
    # when it is retried, then the new attempt is capped at 15
    run_retry(run_id=run_id, guidance="g", actor="t")
    assert Attempt.objects.get(run_id=run_id, index=1).max_iterations == 15


def test_retry_is_refused_without_attempts_left_or_unless_failed_and_changes_nothing(
    agent, scripted_llm
):
    run_id = _failed_run(agent, scripted_llm, max_attempts=1)
    before = snapshot(run_id)
    with pytest.raises(InvalidTransition, match="has used all 1 attempts"):
        run_retry(run_id=run_id, guidance="g", actor="t")
    assert snapshot(run_id) == before

    active = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="t")["run_id"]
    before = snapshot(active)
    with pytest.raises(InvalidTransition, match="only a failed run can be retried"):
        run_retry(run_id=active, guidance="g", actor="t")
    assert snapshot(active) == before


def test_retry_is_refused_while_the_agent_has_another_active_run(agent, scripted_llm):
    # given a failed run and, since then, a new active run for the same agent
    failed = _failed_run(agent, scripted_llm)
    active = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="t")["run_id"]
    before = snapshot(failed)
    # when the failed run is retried, then the database refuses, naming the active run
    with pytest.raises(MotorBusy) as excinfo:
        run_retry(run_id=failed, guidance="g", actor="t")
    assert excinfo.value.run_id == active
    assert snapshot(failed) == before


def test_unanswered_question_times_out_and_releases_the_agent(agent, scripted_llm, settings):
    # given a run that has waited for an answer longer than the timeout
    settings.MOTOR_AWAITING_INPUT_TIMEOUT_SECONDS = 60
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="t")["run_id"]
    scripted_llm.add(reply_tools(tool_call("ask_user", {"question": "Which?"})))
    drive(run_id, scripted_llm.client())
    MotorRun.objects.filter(pk=run_id).update(updated_at=timezone.now() - timedelta(seconds=61))
    # when the reaper runs
    report = run_reap()
    # then the run failed with the timeout and a failed signal, and the agent is free again
    assert report["timed_out"] == [run_id]
    attempt = Attempt.objects.get(run_id=run_id)
    assert (attempt.failure["category"], attempt.failure["message"]) == (
        "timeout",
        "User response timeout",
    )
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.FAILED
    assert list(Signal.objects.filter(run_id=run_id).values_list("payload__status", flat=True)) == [
        "awaiting_input",
        "failed",
    ]
    assert (
        run_start(workspace=new_workspace(), agent_id=agent.pk, task="next", actor="t")["status"]
        == "created"
    )


def test_a_recent_question_is_not_timed_out(agent, scripted_llm):
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="t")["run_id"]
    scripted_llm.add(reply_tools(tool_call("ask_user", {"question": "Which?"})))
    drive(run_id, scripted_llm.client())
    before = snapshot(run_id)
    assert run_reap() == {"woken": [], "timed_out": []}
    assert snapshot(run_id) == before


def test_reaper_wakes_a_run_whose_message_was_lost_and_only_that_one(make_agent, test_redis):
    # given one run idle beyond the grace period and one just created
    lost = run_start(workspace=new_workspace(), agent_id=make_agent().pk, task="t", actor="t")[
        "run_id"
    ]
    fresh = run_start(workspace=new_workspace(), agent_id=make_agent().pk, task="t", actor="t")[
        "run_id"
    ]
    MotorRun.objects.filter(pk=lost).update(idle_since=timezone.now() - timedelta(minutes=5))
    # when the reaper runs, then only the lost run is woken: one message, for its current token
    assert run_reap()["woken"] == [lost]
    queued = [json.loads(raw) for raw in test_redis.lrange("celery", 0, -1)]
    assert [m["headers"]["argsrepr"] for m in queued] == [f"['{lost}', 0]"]
    assert fresh not in queued[0]["headers"]["argsrepr"]


def test_an_already_served_wake_up_message_is_dropped(agent, scripted_llm, settings):
    settings.MOTOR_SLICE_SECONDS = 0  # one iteration per slice
    # given a run whose first message (token 0) was served: one iteration recorded, lease released
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="t")["run_id"]
    scripted_llm.add(reply_tools(tool_call("nope")))
    assert run_step(run_id=run_id, expected_token=0, client=scripted_llm.client()) is (
        SliceOutcome.CONTINUED
    )
    before = snapshot(run_id)
    # when a duplicate of that message arrives (broker redelivery, reaper)
    outcome = run_step(run_id=run_id, expected_token=0, client=scripted_llm.client())
    # then it does nothing: no LLM call, no change
    assert outcome is SliceOutcome.LEASE_BUSY
    assert snapshot(run_id) == before
    assert len(scripted_llm.requests) == 1


def test_questions_are_re_signalled_at_startup(agent, scripted_llm):
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="t")["run_id"]
    scripted_llm.add(reply_tools(tool_call("ask_user", {"question": "Still there?"})))
    drive(run_id, scripted_llm.client())
    ids = run_reemit_pending_questions()
    assert len(ids) == 1
    assert Signal.objects.get(pk=ids[0]).payload == {
        "run_id": run_id,
        "status": "awaiting_input",
        "question": "Still there?",
    }
    assert Signal.objects.filter(run_id=run_id).count() == 2


def test_a_worker_start_re_signals_only_questions_asked_before_it(agent, scripted_llm):
    # given a run that asked its question after the worker started
    started = timezone.now()
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="t")["run_id"]
    scripted_llm.add(reply_tools(tool_call("ask_user", {"question": "Still there?"})))
    drive(run_id, scripted_llm.client())
    # when that worker's startup re-emission runs, then it adds nothing
    assert run_reemit_pending_questions(asked_before=started) == []
    assert Signal.objects.filter(run_id=run_id).count() == 1
    # and a later start (the question is older than it) re-signals it once
    assert len(run_reemit_pending_questions(asked_before=timezone.now())) == 1
    assert Signal.objects.filter(run_id=run_id).count() == 2


def test_a_run_past_its_timeout_fails_at_its_next_slice_without_calling_the_model(
    agent, scripted_llm
):
    run_id = run_start(
        workspace=new_workspace(), agent_id=agent.pk, task="t", timeout_s=30, actor="t"
    )["run_id"]
    MotorRun.objects.filter(pk=run_id).update(
        status=RunStatus.RUNNING, started_at=timezone.now() - timedelta(seconds=31)
    )
    assert run_step(run_id=run_id, client=scripted_llm.client()) is SliceOutcome.FINISHED
    attempt = Attempt.objects.get(run_id=run_id)
    assert (attempt.failure["category"], attempt.failure["message"]) == (
        "timeout",
        "the run exceeded its timeout of 30 s",
    )
    assert scripted_llm.requests == []


def test_completion_extracts_new_skills_and_lists_artifacts(agent, scripted_llm, tmp_path):
    # given a run whose workspace gained a new skill and an artifact (written by its tools)
    from skills.models import Skill

    workspace = tmp_path / "ws"
    (workspace / "skills" / "demo").mkdir(parents=True)
    (workspace / "skills" / "demo" / "SKILL.md").write_text(
        "---\nname: demo\ndescription: Says hello.\n---\n# Steps\nSay hello.\n"
    )
    run_id = run_start(agent_id=agent.pk, task="t", workspace=str(workspace), actor="t")["run_id"]
    (workspace / "artifacts").mkdir()
    report = workspace / "artifacts" / "report.txt"
    report.write_text("r")
    # (a file's time comes from the kernel's coarse clock, up to a tick (4 ms) behind the run's
    # creation time when written at once: stamp it as a tool writing it later would)
    created = MotorRun.objects.get(pk=run_id).created_at.timestamp()
    os.utime(report, (created + 1, created + 1))
    scripted_llm.add(reply_text("Made a skill."))
    # when the model finishes
    assert drive(run_id, scripted_llm.client()) == [SliceOutcome.FINISHED]
    # then the skill landed in the store and the result names it and the artifact
    run = MotorRun.objects.get(pk=run_id)
    assert run.result["skills"] == {
        "created": ["demo"],
        "updated": [],
        "unchanged": [],
        "failed": [],
    }
    # (the skill's file was there before the run started: not an artifact of it)
    assert run.result["artifacts"] == [
        {
            "name": "report.txt",
            "path": "artifacts/report.txt",
            "size": 1,
            "sha256": "454349e422f05297191ead13e21d3db520e5abef52055e4964b82fb213f593a1",
            "mime": "text/plain",
        }
    ]
    assert Skill.objects.filter(name="demo").count() == 1
    assert Signal.objects.get(run_id=run_id).payload["result"]["skills"]["created"] == ["demo"]


def test_a_crash_after_extraction_finishes_without_extracting_twice(agent, scripted_llm, tmp_path):
    # given a run whose final answer and extraction result were recorded before a crash
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run_id = run_start(agent_id=agent.pk, task="t", workspace=str(workspace), actor="t")["run_id"]
    attempt = Attempt.objects.get(run_id=run_id)
    attempt.messages = [*attempt.messages, {"role": "assistant", "content": "All done."}]
    attempt.iteration = 1
    attempt.save()
    recorded = {"created": ["x"], "updated": [], "unchanged": [], "failed": []}
    MotorRun.objects.filter(pk=run_id).update(
        status=RunStatus.RUNNING, started_at=timezone.now(), result={"skills": recorded}
    )
    # when the slice runs again
    assert run_step(run_id=run_id, client=scripted_llm.client()) is SliceOutcome.FINISHED
    # then it completes with the recorded extraction and the final text, without asking the model
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.result["summary"], run.result["skills"]) == (
        RunStatus.COMPLETED,
        "All done.",
        recorded,
    )
    assert scripted_llm.requests == []


def test_time_spent_waiting_for_an_answer_is_not_counted_against_the_run_timeout(
    agent, scripted_llm
):
    # given a 30 s run that asked the user and then waited 10 minutes (started 10 min ago, too)
    run_id = run_start(
        workspace=new_workspace(), agent_id=agent.pk, task="t", timeout_s=30, actor="t"
    )["run_id"]
    scripted_llm.add(
        reply_tools(tool_call("ask_user", {"question": "Which?"}, call_id="call_q")),
        reply_text("Done with A."),
    )
    assert drive(run_id, scripted_llm.client()) == [SliceOutcome.PAUSED]
    long_ago = timezone.now() - timedelta(minutes=10)
    MotorRun.objects.filter(pk=run_id).update(started_at=long_ago, updated_at=long_ago)
    # when the answer arrives
    run_respond(run_id=run_id, answer="A", actor="t")
    # then the wait is recorded as waited time and the run goes on to complete
    run = MotorRun.objects.get(pk=run_id)
    assert 600 <= run.waited_s <= 660
    assert drive(run_id, scripted_llm.client()) == [SliceOutcome.FINISHED]
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    assert run.result["summary"] == "Done with A."


def test_a_run_that_used_its_budget_before_waiting_still_times_out_after_the_answer(
    agent, scripted_llm
):
    # given a 30 s run that worked 31 s before asking, then waited 10 minutes
    run_id = run_start(
        workspace=new_workspace(), agent_id=agent.pk, task="t", timeout_s=30, actor="t"
    )["run_id"]
    scripted_llm.add(reply_tools(tool_call("ask_user", {"question": "Which?"}, call_id="call_q")))
    assert drive(run_id, scripted_llm.client()) == [SliceOutcome.PAUSED]
    now = timezone.now()
    MotorRun.objects.filter(pk=run_id).update(
        started_at=now - timedelta(minutes=10, seconds=31), updated_at=now - timedelta(minutes=10)
    )
    run_respond(run_id=run_id, answer="A", actor="t")
    # when its next slice runs, then it fails on its timeout without calling the model again
    assert drive(run_id, scripted_llm.client()) == [SliceOutcome.FINISHED]
    attempt = Attempt.objects.get(run_id=run_id)
    assert attempt.failure["category"] == "timeout"
    assert len(scripted_llm.requests) == 1
