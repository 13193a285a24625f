"""Runs driven by real Celery worker processes, the LLM played by the local stub server."""

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

from runs.models import Attempt, MotorRun, RunStatus, Signal, Step
from runs.mutex import mutex_key, redis_client
from runs.services import run_cancel, run_respond, run_start
from tests.fixtures.llm import LLMStubServer, reply_text, reply_tools, tool_call
from tests.runs.helpers import new_workspace

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]


def _database_url() -> str:
    params = connection.settings_dict
    user = params.get("USER") or "postgres"
    password = f":{params['PASSWORD']}" if params.get("PASSWORD") else ""
    host = params.get("HOST") or "127.0.0.1"
    port = params.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{params['NAME']}"


@pytest.fixture
def start_worker(
    llm_stub_server: LLMStubServer, tmp_path: Path
) -> Iterator[Callable[..., subprocess.Popen]]:
    """Start Celery workers (prefork with one child each, unless `pool`/`concurrency` say
    otherwise) on the test database and the stub LLM.

    Keyword arguments become extra environment variables of the worker.
    """
    started: list[tuple[subprocess.Popen, object]] = []

    def start(*, pool: str = "prefork", concurrency: int = 1, **extra_env: str) -> subprocess.Popen:
        env = {
            **os.environ,
            "DATABASE_URL": _database_url(),
            "LLM_BASE_URL": llm_stub_server.base_url,
            "LLM_API_KEY": "stub",
            "CELERY_TASK_ALWAYS_EAGER": "false",
            # the workspaces the test makes are the ones the worker accepts
            "MOTOR_WORKSPACES_DIR": str(settings.MOTOR_WORKSPACES_DIR),
            # The setting, not only --pool: Celery takes a configured pool over --pool=prefork.
            "CELERY_WORKER_POOL": pool,
            # no failure hints: their LLM calls would take the stub's scripted answers
            "MOTOR_FAILURE_HINT_SECONDS": "0",
            **extra_env,
        }
        log = (tmp_path / f"worker{len(started)}.log").open("w")
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                f"--pool={pool}",
                f"--concurrency={concurrency}",
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
        started.append((process, log))
        return process

    try:
        yield start
    finally:
        for process, log in started:
            if process.poll() is None:  # a test may have killed it already
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
            log.close()  # type: ignore[attr-defined]


@pytest.fixture
def worker(start_worker: Callable[..., subprocess.Popen]) -> subprocess.Popen:
    """One Celery worker process with the default environment."""
    return start_worker()


def _wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _status(run_id: str) -> str:
    return MotorRun.objects.filter(pk=run_id).values_list("status", flat=True).get()


def test_a_worker_process_runs_the_loop_through_a_question_to_completion(
    agent, llm_stub_server, worker, tmp_path
):
    # given a script: write a file, ask the user, then finish
    workspace = tmp_path / "ws"
    workspace.mkdir()
    llm_stub_server.add(
        reply_tools(tool_call("write", {"path": "plan.txt", "content": "draft"}, call_id="w")),
        reply_tools(tool_call("ask_user", {"question": "Ship it?"}, call_id="q")),
        reply_text("Shipped."),
    )
    # when a run starts, the worker drives it until the question
    run_id = run_start(
        agent_id=agent.pk, task="Ship", tools=["write"], workspace=str(workspace), actor="t"
    )["run_id"]
    _wait_for(lambda: _status(run_id) == RunStatus.AWAITING_INPUT, "the question")
    assert (workspace / "plan.txt").read_text() == "draft"
    # and after the answer it finishes
    run_respond(run_id=run_id, answer="yes", actor="t")
    _wait_for(lambda: _status(run_id) == RunStatus.COMPLETED, "completion")
    # then every call was recorded once, and the signals tell the story
    assert list(Step.objects.filter(attempt__run_id=run_id).values_list("tool", "state")) == [
        ("write", "done"),
        ("ask_user", "done"),
    ]
    assert list(Signal.objects.filter(run_id=run_id).values_list("payload__status", flat=True)) == [
        "awaiting_input",
        "completed",
    ]
    assert len(llm_stub_server.requests) == 3
    assert llm_stub_server.requests[2]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "q",
        "content": "yes",
    }
    run = MotorRun.objects.get(pk=run_id)
    assert (run.result["summary"], run.lease_expires_at, run.redelivery_count) == (
        "Shipped.",
        None,
        0,
    )


def test_sigkill_of_the_worker_during_a_tool_call_never_runs_that_call_twice(
    agent, llm_stub_server, worker, tmp_path
):
    # given a run whose first call appends a line (the side effect) and then takes a while
    workspace = tmp_path / "ws"
    workspace.mkdir()
    program = (
        "import time\nwith open('count.txt', 'a') as f:\n    f.write('ran\\n')\ntime.sleep(4)\n"
    )
    llm_stub_server.add(
        reply_tools(tool_call("code", {"code": program}, call_id="c")),
        reply_text("Counted."),
    )
    run_id = run_start(
        agent_id=agent.pk, task="Count", tools=["code"], workspace=str(workspace), actor="t"
    )["run_id"]
    count = workspace / "count.txt"
    # when the worker process executing the call is killed mid-call
    _wait_for(lambda: count.exists() and count.read_text() == "ran\n", "the side effect")
    owner = MotorRun.objects.filter(pk=run_id).values_list("lease_owner", flat=True).get()
    pid = int(owner.split(":")[1])
    os.kill(pid, signal.SIGKILL)
    # then the redelivered slice (a new child) finishes the run without re-running the call
    _wait_for(lambda: _status(run_id) == RunStatus.COMPLETED, "completion after the kill")
    assert count.read_text() == "ran\n"
    step = Step.objects.get(attempt__run_id=run_id)
    assert (step.tool, step.state, step.result["error_code"]) == ("code", "done", "interrupted")
    assert llm_stub_server.requests[1]["messages"][-1]["content"].startswith(
        "ERROR (interrupted): "
    )
    assert MotorRun.objects.get(pk=run_id).result["summary"] == "Counted."


def test_sigkill_of_the_worker_during_the_llm_call_asks_again_and_runs_the_call_once(
    agent, llm_stub_server, worker, tmp_path
):
    # given a run whose first LLM answer is held back until the worker is dead
    workspace = tmp_path / "ws"
    workspace.mkdir()
    program = "with open('count.txt', 'a') as f:\n    f.write('ran\\n')\n"
    gate = llm_stub_server.add_gated(reply_tools(tool_call("code", {"code": program})))
    llm_stub_server.add(
        reply_tools(tool_call("code", {"code": program}), text="again"), reply_text("Counted.")
    )
    run_id = run_start(
        agent_id=agent.pk, task="Count", tools=["code"], workspace=str(workspace), actor="t"
    )["run_id"]

    # when the worker process is killed while it waits for the model (the first request goes
    # out while the run is claimed, so wait for the claim too)
    def owner() -> str:
        return MotorRun.objects.filter(pk=run_id).values_list("lease_owner", flat=True).get()

    _wait_for(lambda: len(llm_stub_server.requests) == 1 and owner() != "", "request and claim")
    os.kill(int(owner().split(":")[1]), signal.SIGKILL)
    gate.set()
    # then the redelivered slice asks the model again and the call runs exactly once
    _wait_for(lambda: _status(run_id) == RunStatus.COMPLETED, "completion after the kill")
    assert (workspace / "count.txt").read_text() == "ran\n"
    assert len(llm_stub_server.requests) == 3
    step = Step.objects.get(attempt__run_id=run_id)
    assert (step.state, step.result["ok"], step.reasoning) == ("done", True, "again")


def _descendants(root: int) -> list[int]:
    """Live (not zombie) processes below `root`, found through the parent pids in /proc."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if stat[0] not in (b"Z", b"X"):
            parents[int(name)] = int(stat[1])
    found: list[int] = []
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found.extend(children)
        frontier.extend(children)
    return found


def _sandbox_processes(worker: subprocess.Popen, run_id: str) -> list[int]:
    """bwrap and everything under it of `run_id`'s sandbox, among the worker's descendants (the
    worker's spare sandboxes, MOTOR_SANDBOX_POOL_SIZE, are no run's)."""
    from sandbox.reaper import bwrap_sandboxes

    below = set(_descendants(worker.pid))
    bwraps = [pid for pid in bwrap_sandboxes().get(run_id, []) if pid in below]
    return [found for pid in bwraps for found in (pid, *_descendants(pid))]


def test_cancel_during_a_long_code_call_kills_it_and_frees_the_agent(
    agent, llm_stub_server, worker, tmp_path
):
    # given a run (network granted, so `code` may run 30 s) whose call sleeps 30 s
    workspace = tmp_path / "ws"
    workspace.mkdir()
    program = (
        "import time\nopen('started', 'w').write('x')\ntime.sleep(30)\n"
        "open('finished', 'w').write('x')\n"
    )
    llm_stub_server.add(reply_tools(tool_call("code", {"code": program}, call_id="c")))
    run_id = run_start(
        agent_id=agent.pk,
        task="Wait",
        tools=["code"],
        allowed_domains=["example.com"],
        workspace=str(workspace),
        actor="t",
    )["run_id"]
    _wait_for(lambda: (workspace / "started").exists(), "the call to start")
    assert _sandbox_processes(worker, run_id) != []
    # when the run is cancelled while the call runs
    run_cancel(run_id=run_id, actor="t")
    # then the worker kills the call: no sandbox process is left, long before the sleep ends
    _wait_for(lambda: _sandbox_processes(worker, run_id) == [], "the sandbox to die", timeout_s=15)
    assert not (workspace / "finished").exists()
    # and the run is cancelled with its call never recorded, and the mutex is free
    assert _status(run_id) == RunStatus.CANCELLED
    step = Step.objects.get(attempt__run_id=run_id)
    assert (step.state, step.result) == ("intent", None)
    assert redis_client().get(mutex_key(agent.pk)) is None
    # and the same agent can start again at once, served by the same worker
    llm_stub_server.add(reply_text("Next."))
    next_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="Next", actor="t")[
        "run_id"
    ]
    _wait_for(lambda: _status(next_id) == RunStatus.COMPLETED, "the next run")
    assert worker.poll() is None


def test_a_worker_start_re_signals_runs_awaiting_input(agent, start_worker):
    # given a run that waits for an answer, signalled once before any worker was up
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="Ask", actor="t")[
        "run_id"
    ]
    MotorRun.objects.filter(pk=run_id).update(status=RunStatus.AWAITING_INPUT)
    Attempt.objects.filter(run_id=run_id).update(
        status="awaiting_input", pending_question="Which size?", pending_tool_call_id="q"
    )
    # when a worker starts
    start_worker()
    # then it re-emits the question once
    _wait_for(lambda: Signal.objects.filter(run_id=run_id).exists(), "the re-emitted signal")
    time.sleep(2)  # let a duplicate (if any) arrive before counting
    payloads = list(Signal.objects.filter(run_id=run_id).values_list("payload", flat=True))
    assert payloads == [{"run_id": run_id, "status": "awaiting_input", "question": "Which size?"}]


def _pool_children(worker: subprocess.Popen) -> set[int]:
    """The worker's pool processes (its direct children)."""
    children: set[int] = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == worker.pid and stat[0] not in (b"Z", b"X"):
                children.add(int(name))
    return children


@pytest.mark.parametrize(
    ("boundary", "count_after", "step_outcome", "asked"),
    [
        # the model answered, neither its reply nor the call's Step row (written together) is
        # recorded: the redelivered slice asks again and runs the call once
        ("before_step", "ran\n", (True, None), 3),
        # the intent was committed, the call never started: reported, never run
        ("after_intent", None, (False, "interrupted"), 2),
        # the call ran, its result was lost: reported as interrupted, not run again
        ("after_execution", "ran\n", (False, "interrupted"), 2),
        # the result was committed: the redelivered slice moves on without running it again
        ("after_commit", "ran\n", (True, None), 2),
    ],
)
def test_sigkill_of_the_worker_at_each_boundary_of_a_call_never_runs_a_committed_call_twice(
    agent, llm_stub_server, start_worker, tmp_path, boundary, count_after, step_outcome, asked
):
    # given a worker that kills itself (SIGKILL, once) when a call reaches `boundary`
    marker = tmp_path / "crashed"
    worker = start_worker(MOTOR_TEST_CRASH_AT=f"{boundary}:{marker}")
    _wait_for(lambda: len(_pool_children(worker)) == 1, "the worker's pool process")
    first_child = _pool_children(worker)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    program = "with open('count.txt', 'a') as f:\n    f.write('ran\\n')\n"
    calls = [reply_tools(tool_call("code", {"code": program}, call_id="c"))] * (asked - 1)
    llm_stub_server.add(*calls, reply_text("Done."))
    # when a run makes that call
    run_id = run_start(
        agent_id=agent.pk, task="Count", tools=["code"], workspace=str(workspace), actor="t"
    )["run_id"]
    # then the process died there, and a new pool process finished the run
    _wait_for(lambda: _status(run_id) == RunStatus.COMPLETED, "completion after the kill")
    assert marker.exists()
    assert _pool_children(worker).isdisjoint(first_child)
    # and the side effect happened at most once, as the ledger says
    count = workspace / "count.txt"
    assert (count.read_text() if count.exists() else None) == count_after
    step = Step.objects.get(attempt__run_id=run_id)
    assert (step.state, step.result["ok"], step.result["error_code"]) == ("done", *step_outcome)
    assert len(llm_stub_server.requests) == asked
    run = MotorRun.objects.get(pk=run_id)
    assert (run.result["summary"], run.lease_expires_at) == ("Done.", None)


def test_a_credential_saved_in_a_worker_process_is_in_no_log_row_key_or_later_request(
    agent, llm_stub_server, worker, tmp_path
):
    # given a run creating a skill, whose model saves a key it got and then uses it
    from skills.models import Policy
    from skills.selectors import policy_credential_values
    from tests.runs.test_credentials import _redis_dump
    from tests.runs.test_save_credential import _rows_containing

    value = "tok-Worker-5d1c7e93aa"
    workspace = tmp_path / "ws"
    (workspace / "skills" / "feed").mkdir(parents=True)
    (workspace / "skills" / "feed" / "SKILL.md").write_text(
        "---\nname: feed\ndescription: Reads a feed.\n---\n# Steps\nRead it.\n"
    )
    llm_stub_server.add(
        reply_tools(tool_call("save_credential", {"name": "FEED_TOKEN", "value": value})),
        reply_tools(tool_call("code", {"code": "import os\nprint(os.environ['FEED_TOKEN'])\n"})),
        reply_text("Saved and used."),
    )
    # when a worker process runs it
    run_id = run_start(
        agent_id=agent.pk, task="Sign up", tools=["code"], workspace=str(workspace), actor="t"
    )["run_id"]
    _wait_for(lambda: _status(run_id) == RunStatus.COMPLETED, "completion")
    # then only the new skill's policy holds the value, encrypted
    policy = Policy.objects.get(skill__name="feed", agent=agent)
    assert policy_credential_values(policy=policy) == {"FEED_TOKEN": value}
    outputs = [s.result["output"].strip() for s in Step.objects.filter(attempt__run_id=run_id)]
    assert outputs[1] == "<credential:FEED_TOKEN>"
    # and the raw value is in no table, no later LLM request, no Redis key, no worker log line
    assert _rows_containing(value) == []
    assert [value in repr(r) for r in llm_stub_server.requests] == [False, False, False]
    assert value not in _redis_dump()
    logs = "".join(p.read_text() for p in tmp_path.glob("worker*.log"))
    assert "Task runs.run_step" in logs
    assert value not in logs


def test_a_threads_worker_killed_mid_call_is_resumed_by_the_next_worker_without_a_rerun(
    agent, llm_stub_server, start_worker, tmp_path
):
    # given a threads worker running a call that appends a line (the side effect), then sleeps
    first = start_worker(pool="threads", concurrency=4)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    program = (
        "import time\nwith open('count.txt', 'a') as f:\n    f.write('ran\\n')\ntime.sleep(4)\n"
    )
    llm_stub_server.add(
        reply_tools(tool_call("code", {"code": program}, call_id="c")),
        reply_text("Counted."),
    )
    run_id = run_start(
        agent_id=agent.pk, task="Count", tools=["code"], workspace=str(workspace), actor="t"
    )["run_id"]
    count = workspace / "count.txt"
    _wait_for(lambda: count.exists() and count.read_text() == "ran\n", "the side effect")
    # when the whole worker process is killed (no parent is left to hand the message back)
    owner = MotorRun.objects.filter(pk=run_id).values_list("lease_owner", flat=True).get()
    assert int(owner.split(":")[1]) == first.pid
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    # and a worker starts again on this host
    start_worker(pool="threads", concurrency=4)
    # then it takes the run over at once and finishes it without re-running the call
    _wait_for(lambda: _status(run_id) == RunStatus.COMPLETED, "completion after the restart")
    assert count.read_text() == "ran\n"
    step = Step.objects.get(attempt__run_id=run_id)
    assert (step.tool, step.state, step.result["error_code"]) == ("code", "done", "interrupted")
    assert MotorRun.objects.get(pk=run_id).result["summary"] == "Counted."


@pytest.mark.parametrize("multi_host", ["false", "true"], ids=["one-host", "multi-host"])
def test_a_threads_worker_keeps_many_runs_waiting_on_the_llm_with_one_database_connection(
    make_agent, llm_stub_server, start_worker, multi_host: str
):
    # given a threads worker whose process may hold a single PostgreSQL connection
    # (libpq names its connections after PGAPPNAME, so they can be told from this test's own);
    # with MOTOR_MULTI_HOST its host's registration and heartbeat use a connection of their own
    # (named mc-test-worker-host), outside that pool
    start_worker(
        pool="threads",
        concurrency=4,
        MOTOR_DB_POOL_MAX_SIZE="1",
        PGAPPNAME="mc-test-worker",
        MOTOR_MULTI_HOST=multi_host,
        MOTOR_HOST_HEARTBEAT_SECONDS="0.2",
    )
    # and four runs whose LLM replies are held back
    gates = [llm_stub_server.add_gated(reply_text(f"done {i}")) for i in range(4)]
    run_ids = [
        run_start(workspace=new_workspace(), agent_id=make_agent().pk, task=f"task {i}", actor="t")[
            "run_id"
        ]
        for i in range(4)
    ]
    try:
        # when all four slices wait for the model at the same time (a slice holding its
        # connection through the wait would leave the others stuck before their first query)
        _wait_for(lambda: len(llm_stub_server.requests) == 4, "four LLM requests at once")
        # (a run's first request may be sent while its claim is still being written)
        _wait_for(
            lambda: set(_status(run_id) for run_id in run_ids) == {RunStatus.RUNNING},
            "four runs claimed",
        )
        # then the worker holds at most its one pooled connection, idle, outside a transaction
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT state FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = 'mc-test-worker'"
            )
            states = [row[0] for row in cursor.fetchall()]
        # (none at all when the pool has let its connection go between two uses)
        assert states in ([], ["idle"])
        # and with several hosts, the host's heartbeat keeps one connection of its own besides
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name = 'mc-test-worker-host'"
            )
            assert cursor.fetchone()[0] == (1 if multi_host == "true" else 0)
    finally:
        for gate in gates:
            gate.set()
    # and every run completes through that one connection
    _wait_for(
        lambda: all(_status(run_id) == RunStatus.COMPLETED for run_id in run_ids), "completion"
    )
    summaries = sorted(
        MotorRun.objects.filter(pk__in=run_ids).values_list("result__summary", flat=True)
    )
    assert summaries == ["done 0", "done 1", "done 2", "done 3"]


def test_a_worker_sigkilled_with_a_full_pool_leaves_nothing_after_the_next_start(start_worker):
    from sandbox.backends.bwrap_runtime import _default_runtime_root
    from sandbox.backends.bwrap_uids import _processes_of_uid
    from sandbox.reaper import bwrap_sandboxes

    slots = Path(settings.MOTOR_WORKSPACES_DIR) / ".pool"
    runtime_root = _default_runtime_root()

    def spares(worker: subprocess.Popen) -> dict[str, list[int]]:
        below = set(_descendants(worker.pid))
        return {
            name: pids
            for name, pids in bwrap_sandboxes().items()
            if name.startswith("pool-") and any(pid in below for pid in pids)
        }

    # given a worker whose process holds its two spare sandboxes
    worker = start_worker(MOTOR_SANDBOX_POOL_SIZE="2")
    _wait_for(lambda: len(spares(worker)) == 2, "the worker's spares", timeout_s=120)
    found = spares(worker)
    old_slots = {path.name for path in slots.iterdir()}
    old_dirs = [d for name in found for d in runtime_root.glob(f"{name}-*")]
    uids = {os.stat(f"/proc/{pids[0]}").st_uid for pids in found.values()}
    assert len(old_slots) == 2 and len(old_dirs) == 2 and len(uids) == 2
    # when the worker is SIGKILLed, every process of it at once
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait()
    # then the spares die with it (no process of their uids is left)
    _wait_for(
        lambda: (
            not any(name in bwrap_sandboxes() for name in found)
            and not any(_processes_of_uid(uid) for uid in uids)
        ),
        "the spares to die with their worker",
        timeout_s=30,
    )
    # and the next worker's start removes their runtime dirs and slots, and starts its own
    second = start_worker(MOTOR_SANDBOX_POOL_SIZE="2")
    _wait_for(lambda: len(spares(second)) == 2, "the next worker's spares", timeout_s=120)
    assert not any(d.exists() for d in old_dirs)
    assert not old_slots & {path.name for path in slots.iterdir()}
    assert len(list(slots.iterdir())) == 2
