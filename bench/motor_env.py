"""bench/motor.py's world: the stub LLM, a fresh database and Redis db, its worker processes and
its runs (started, awaited, checked)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from socketserver import StreamRequestHandler, ThreadingTCPServer
from typing import Any

from bench.motor_cpu import PG, SCRIPT_APP

REPO = Path(__file__).resolve().parents[1]
_TASK = re.compile(r"bench (?P<tag>\S+) reads=(?P<reads>\d+)")
_TASK_BYTES = re.compile(rb"bench (?P<tag>[^\s\\\"]+) reads=(?P<reads>\d+)")
# a tool result's message in the request's JSON (a quote inside a string value is escaped)
_TOOL_ROLE = re.compile(rb'"role":\s*"tool"')


def say(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------ the stub LLM


@dataclass
class Served:
    tag: str
    tools_seen: int  # tool results in the request = read calls already made by the run
    received: float  # perf_counter() in this process
    answered: float


class StubLLM:
    """A stateless OpenAI-compatible chat server: the task text says how many reads to ask for.

    The task of a run reads ``bench <tag> reads=<k>``; while the conversation holds fewer than k
    tool results the reply asks for `read notes.txt`, then it answers in text. Each request is
    held for `delay_s` (the slow-LLM case). One thread per connection, a deep listen backlog and
    HTTP/1.1 keep-alive, so a hundred workers can wait on it at once.
    """

    def __init__(self) -> None:
        self.delay_s = 0.0
        self.served: list[Served] = []
        self._lock = threading.Lock()
        self._answers: dict[int, bytes] = {}
        stub = self

        class Handler(StreamRequestHandler):
            """HTTP/1.1 keep-alive, parsed only as far as the stub needs: the stub stands in
            for a remote model, so its own CPU (counted in the machine's figure) is kept small:
            no header objects, no JSON parsing of the request, answers built once."""

            # The answer goes out in one write; no Nagle delay on the socket either way.
            disable_nagle_algorithm = True

            def handle(self) -> None:
                rfile, wfile = self.rfile, self.wfile
                while True:
                    line = rfile.readline(65537)
                    if not line:
                        return
                    # The request line has been read: the request has arrived. (The time the
                    # stub then spends reading headers is its own, not the caller's.)
                    received = time.perf_counter()
                    if not line.strip():
                        continue
                    length, close = 0, False
                    while True:
                        header = rfile.readline(65537)
                        if header in (b"\r\n", b"\n", b""):
                            break
                        name, _, value = header.partition(b":")
                        name = name.strip().lower()
                        if name == b"content-length":
                            length = int(value)
                        elif name == b"connection" and value.strip().lower() == b"close":
                            close = True
                    data, tag, seen = stub.answer_raw(rfile.read(length) if length else b"")
                    if stub.delay_s:
                        time.sleep(stub.delay_s)
                    wfile.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(data), data)
                    )
                    with stub._lock:
                        stub.served.append(Served(tag, seen, received, time.perf_counter()))
                    if close:
                        return

        class Server(ThreadingTCPServer):
            daemon_threads = True
            request_queue_size = 1024

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def answer(self, body: dict[str, Any]) -> tuple[dict[str, Any], str, int]:
        messages = body.get("messages") or []
        task = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
        match = _TASK.search(task)
        tag, reads = (match["tag"], int(match["reads"])) if match else ("?", 0)
        seen = sum(1 for m in messages if m.get("role") == "tool")
        return self.answer_for(seen, reads), tag, seen

    @staticmethod
    def answer_for(seen: int, reads: int) -> dict[str, Any]:
        """A `read` call while the run has made fewer than `reads`, then the text answer."""
        from runs.llm import chat_completion_body

        if seen < reads:
            call = {
                "id": f"call_{seen}",
                "type": "function",
                "function": {"name": "read", "arguments": json.dumps({"path": "notes.txt"})},
            }
            return chat_completion_body(tool_calls=[call], model="stub")
        return chat_completion_body(content="done", model="stub")

    def answer_raw(self, raw: bytes) -> tuple[bytes, str, int]:
        """`answer` read off the request's JSON text without parsing it (the task's tag and
        reads, the number of tool messages), the answer's bytes built once per kind."""
        match = _TASK_BYTES.search(raw)
        tag, reads = (match["tag"].decode(), int(match["reads"])) if match else ("?", 0)
        seen = len(_TOOL_ROLE.findall(raw))
        key = seen if seen < reads else -1
        data = self._answers.get(key)
        if data is None:
            data = json.dumps(self.answer_for(seen, reads)).encode()
            self._answers[key] = data
        return data, tag, seen

    def of(self, tag: str) -> list[Served]:
        with self._lock:
            return sorted((s for s in self.served if s.tag == tag), key=lambda s: s.tools_seen)

    def first_request(self, tag: str) -> Served | None:
        with self._lock:
            return next((s for s in self.served if s.tag == tag), None)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# ------------------------------------------------------------------------------ environment


@dataclass
class Env:
    db_name: str
    db_url: str
    redis_url: str
    data_dir: Path
    stub: StubLLM
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    agents: Iterator[int] = iter(())
    #: with --count: the file prefix the workers write their statement counts to
    count_prefix: str = ""

    def child_env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("CELERY_WORKER_") and k != "PGAPPNAME"
        }
        if self.count_prefix:
            env["BENCH_MOTOR_COUNT"] = self.count_prefix
        return env


def pg_admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(sql)


@contextmanager
def environment(redis_db: int) -> Iterator[Env]:
    """A fresh database and Redis db, the stub LLM, Django set up in this process; all undone."""
    from cryptography.fernet import Fernet

    name = f"motor_bench_{os.getpid()}"
    data_dir = Path(tempfile.mkdtemp(prefix="motor-bench-"))
    stub = StubLLM()
    redis_url = f"redis://127.0.0.1:6379/{redis_db}"
    pg_admin(f'CREATE DATABASE "{name}"')
    env = Env(name, f"{PG}/{name}", redis_url, data_dir, stub)
    try:
        os.environ.update(
            {
                "DJANGO_SETTINGS_MODULE": "config.settings",
                "DATABASE_URL": env.db_url,
                "REDIS_URL": redis_url,
                "CELERY_BROKER_URL": redis_url,
                "CELERY_RESULT_BACKEND": redis_url,
                "SECRET_KEY": "bench-only-secret",
                "DEBUG": "false",
                "ALLOWED_HOSTS": "localhost,127.0.0.1",
                "MOTOR_CREDENTIALS_KEY": Fernet.generate_key().decode(),
                "MOTOR_DATA_DIR": str(data_dir),
                "LLM_BASE_URL": stub.base_url,
                "LLM_API_KEY": "stub",
                "CELERY_TASK_ALWAYS_EAGER": "false",
                # this script's own connections are not the system under test (bench.motor_cpu)
                "PGAPPNAME": SCRIPT_APP,
            }
        )
        import django

        django.setup()
        from django.core.management import call_command

        say(f"migrating {name} ...")
        call_command("migrate", verbosity=0)
        redis_flush(redis_url)
        env.agents = agent_ids()
        yield env
    finally:
        stop_workers(env)
        stub.stop()
        try:
            from django.db import connections

            connections.close_all()
        except Exception:  # noqa: BLE001 - cleanup goes on
            pass
        try:
            redis_flush(redis_url)
        except Exception as exc:  # noqa: BLE001
            say(f"could not flush {redis_url}: {exc}")
        try:
            pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        except Exception as exc:  # noqa: BLE001
            say(f"could not drop database {name}: {exc}")
        shutil.rmtree(data_dir, ignore_errors=True)


def redis_flush(url: str) -> None:
    import redis

    redis.Redis.from_url(url).flushdb()


def agent_ids() -> Iterator[int]:
    """Fresh agents on demand (one active run per agent)."""
    from django.contrib.auth import get_user_model

    from cognition.models import Agent

    owner = get_user_model().objects.create_user(username="bench-owner", password=None)
    number = 0
    while True:
        batch = Agent.objects.bulk_create(
            [Agent(name=f"bench-{number + i}", owner=owner) for i in range(50)]
        )
        number += 50
        yield from (agent.pk for agent in batch)


def workspace(env: Env) -> str:
    # inside MOTOR_WORKSPACES_DIR (the data dir's default): the only place a run's workspace may be
    root = Path(env.data_dir) / "workspaces"
    root.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="ws-", dir=root))
    (path / "notes.txt").write_text("benchmark notes\n" * 4)
    return str(path)


# ------------------------------------------------------------------------------ workers


def start_workers(env: Env, *, pool: str, processes: int, concurrency: int) -> None:
    """`processes` worker instances of `pool` with `concurrency` each; waits until all answer."""
    stop_workers(env)
    names = []
    for index in range(processes):
        name = f"bench{index}-{os.getpid()}@%h"
        log = env.data_dir / f"worker-{pool}-{index}-{time.monotonic_ns()}.log"
        env.logs.append(log)
        handle = log.open("w")
        child_env = env.child_env()
        # The setting as well as --pool: Celery takes a configured pool over --pool=prefork.
        child_env["CELERY_WORKER_POOL"] = pool
        argv = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "-I",
            "bench._motor_tasks",
        ]
        argv += [f"--pool={pool}", f"--concurrency={concurrency}", "--loglevel=WARNING"]
        argv += ["--without-gossip", "--without-mingle", "--without-heartbeat", "-n", name]
        env.workers.append(
            subprocess.Popen(
                argv,
                cwd=REPO,
                env=child_env,
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        handle.close()
        names.append(name.split("@")[0])
    from config.celery import app

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        for process, log in zip(env.workers, env.logs[-processes:], strict=True):
            if process.poll() is not None:
                tail = log.read_text()[-600:]
                raise RuntimeError(f"a worker exited with {process.returncode}: {tail}")
        replies = app.control.ping(timeout=1.0) or []
        answered = {next(iter(r)).split("@")[0] for r in replies}
        if all(n in answered for n in names):
            # warm each process (imports, first connections) before anything is timed
            for _ in range(processes * max(2, min(concurrency, 8))):
                app.send_task("bench.noop").get(timeout=30)
            return
    raise RuntimeError(f"workers {names} did not answer a ping within 90 s")


def stop_workers(env: Env) -> None:
    for process in env.workers:
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
    for process in env.workers:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    env.workers.clear()


# ------------------------------------------------------------------------------ runs


def start_run(
    env: Env, tag: str, *, reads: int, iterations: int, prepared: tuple[int, str] | None = None
) -> str:
    """Start a bench run; `prepared` is (agent id, workspace) made beforehand, outside a timing."""
    from runs.services import run_start

    agent_id, path = prepared if prepared is not None else (next(env.agents), workspace(env))
    return run_start(
        agent_id=agent_id,
        task=f"bench {tag} reads={reads}",
        tools=["read"],
        workspace=path,
        max_iterations=iterations,
        actor="bench",
    )["run_id"]


def wait_finished(run_ids: list[str], timeout_s: float, stall_s: float = 90.0) -> float:
    """Blocks until every run is terminal; returns perf_counter() when that was seen.

    Gives up after `timeout_s`, or after `stall_s` without a single new iteration (a lost
    message or a worker that cannot reach the database would otherwise hang the benchmark).
    """
    from django.db.models import Sum

    from runs.models import TERMINAL_STATUSES, Attempt, MotorRun

    deadline = time.monotonic() + timeout_s
    progress, moved = -1, time.monotonic()
    done = 0
    while time.monotonic() < deadline:
        done = MotorRun.objects.filter(pk__in=run_ids, status__in=TERMINAL_STATUSES).count()
        if done == len(run_ids):
            return time.perf_counter()
        now_progress = Attempt.objects.filter(run_id__in=run_ids).aggregate(n=Sum("iteration"))
        current = int(now_progress["n"] or 0) + done
        if current != progress:
            progress, moved = current, time.monotonic()
        elif time.monotonic() - moved > stall_s:
            raise RuntimeError(
                f"stalled: {len(run_ids) - done} of {len(run_ids)} runs made no progress in "
                f"{stall_s:.0f} s (see the worker logs)"
            )
        time.sleep(0.02 if len(run_ids) < 20 else 0.2)
    raise RuntimeError(
        f"{len(run_ids) - done} of {len(run_ids)} runs unfinished after {timeout_s}s"
    )


def last_completion(run_ids: list[str]) -> float:
    """When the last of the finished runs completed (epoch seconds, stamped by the worker): the
    end of the work itself, not the moment a poll noticed it."""
    from django.db.models import Max

    from runs.models import MotorRun

    last = MotorRun.objects.filter(pk__in=run_ids).aggregate(at=Max("completed_at"))["at"]
    if last is None:
        raise RuntimeError("no run has a completion time")
    return float(last.timestamp())


def check_runs(run_ids: list[str]) -> tuple[int, int, str]:
    """(LLM iterations, failed tool calls, status summary) of finished runs."""
    from django.db.models import Sum

    from runs.models import Attempt, MotorRun, Step

    iterations = Attempt.objects.filter(run_id__in=run_ids).aggregate(n=Sum("iteration"))["n"]
    failed = sum(
        1
        for result in Step.objects.filter(attempt__run_id__in=run_ids).values_list(
            "result", flat=True
        )
        if not (result or {}).get("ok")
    )
    statuses: dict[str, int] = {}
    for status in MotorRun.objects.filter(pk__in=run_ids).values_list("status", flat=True):
        statuses[status] = statuses.get(status, 0) + 1
    return int(iterations or 0), failed, ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))


def require_completed(run_ids: list[str]) -> tuple[int, int, str]:
    iterations, failed, summary = check_runs(run_ids)
    if not summary.startswith("completed") or "," in summary:
        raise RuntimeError(f"runs did not all complete: {summary}")
    return iterations, failed, summary
