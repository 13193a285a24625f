"""The brain woken through a real Celery worker process: a run started from the chat completes
in the worker, its committed motor_result signal queues the brain's wake-up task, and the worker
plays the brain's turn. Motor and brain LLM requests both reach the local stub server, in order."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from cognition.brain.models import BrainWake, WakeState
from cognition.brain.services import brain_wake, conversation_post_message
from cognition.brain.tasks import brain_wake_task
from cognition.models import Conversation
from runs.models import MotorRun, RunStatus, Signal
from skills.models import Policy, PolicyStatus
from tests.cognition.conftest import World
from tests.fixtures.llm import LLMStubServer, reply_text, reply_tools, tool_call

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[3]
SKILL = (
    "---\nname: mailer\ndescription: Sends mail.\n---\n# Mailer\n\n"
    "POST https://api.agentmail.to/v0/send with $MAILER_KEY.\n"
)


def _database_url() -> str:
    params = connection.settings_dict
    user = params.get("USER") or "postgres"
    password = f":{params['PASSWORD']}" if params.get("PASSWORD") else ""
    host = params.get("HOST") or "127.0.0.1"
    return f"postgres://{user}{password}@{host}:{params.get('PORT') or 5432}/{params['NAME']}"


@pytest.fixture
def worker(llm_stub_server: LLMStubServer, tmp_path: Path) -> Iterator[subprocess.Popen]:
    from config.celery import app

    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge(settings.COGNITION_BRAIN_QUEUE or "celery")
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "LLM_BASE_URL": llm_stub_server.base_url,
        "LLM_API_KEY": "stub",
        "LLM_FAST_MODEL": "fast-model",
        "LLM_SMART_MODEL": "smart-model",
        "LLM_MOTOR_MODEL": "motor-model",
        "MOTOR_WORKSPACES_DIR": str(tmp_path / "workspaces"),
        "CELERY_TASK_ALWAYS_EAGER": "false",
        # The setting, not only --pool: a configured pool wins over --pool=prefork.
        "CELERY_WORKER_POOL": "prefork",
    }
    log = (tmp_path / "worker.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "--pool=prefork",
            "--concurrency=1",
            "--loglevel=INFO",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def _wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_completed_run_wakes_the_brain_in_the_worker_once(
    world: World, chat: Conversation, scripted_llm, llm_stub_server, worker, settings, tmp_path
) -> None:
    settings.MOTOR_WORKSPACES_DIR = tmp_path / "workspaces"
    settings.MOTOR_WORKSPACES_DIR.mkdir()
    # given the worker's script: the motor writes a skill and finishes; then the brain presents it
    llm_stub_server.add(
        reply_tools(tool_call("write", {"path": "SKILL.md", "content": SKILL})),
        reply_text("Created the mailer skill."),
        reply_text("I learned mailer: it calls api.agentmail.to with MAILER_KEY. Approve it?"),
    )
    # when olivia asks and the brain (in this process) starts the run
    scripted_llm.add(
        reply_tools(
            tool_call(
                "core_act",
                {"mode": "agentic", "task": "Learn mailer", "tools": ["write"], "domains": []},
            )
        ),
        reply_text("On it."),
    )
    added = conversation_post_message(
        conversation_id=chat.pk,
        text="Learn mailer",
        actor=world.olivia,
        client=scripted_llm.client(),
    )
    run_id = added[2].tool_result["result"]["run_id"]
    # then the worker runs it, and the committed signal wakes the brain in the worker
    _wait_for(lambda: MotorRun.objects.get(pk=run_id).status == RunStatus.COMPLETED, "the run")
    done = Signal.objects.get(run_id=run_id, payload__status="completed")
    _wait_for(
        lambda: BrainWake.objects.filter(signal=done, state=WakeState.DONE).exists(),
        "the brain's wake-up",
    )
    wake = BrainWake.objects.get(signal=done)
    assert (wake.outcome, wake.conversation_id) == ("handled", chat.pk)
    assert Policy.objects.get(skill__name="mailer").status == PolicyStatus.REVIEWED
    texts = list(
        chat.messages.filter(trigger="motor_result").values_list("role", "event__type", "text")
    )
    assert texts[0] == (
        "event",
        "motor_result",
        f"Run {run_id} completed: Created the mailer skill.",
    )
    assert texts[-1] == (
        "assistant",
        None,
        "I learned mailer: it calls api.agentmail.to with MAILER_KEY. Approve it?",
    )
    assert (
        "event",
        "skill_review",
        "Skill 'mailer' is reviewed and waits for your approval.",
    ) in texts
    models = [request["model"] for request in llm_stub_server.requests]
    assert models == ["motor-model", "motor-model", "smart-model"]
    # and the same signal again is a no-op, through the hook and through the task
    assert brain_wake(done.pk) is False
    assert brain_wake_task.apply_async(args=[done.pk], priority=0).get(timeout=60) == "duplicate"
    assert len(llm_stub_server.requests) == 3
    assert chat.messages.filter(signal=done).count() == 1
