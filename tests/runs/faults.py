"""Fault injection for the runtime's process tests: a Redis of the test's own that can be stopped
and started again, a TCP proxy in front of PostgreSQL that can be cut, Celery worker and beat
processes pointed at them, and an LLM stub that answers each run by where its conversation is.

Nothing here touches a shared server: the Redis is a private redis-server on a free port, and
connections are only ever terminated on the test's own database.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import connection

from tests.fixtures.llm import LLMStubServer, reply_text, reply_tools, tool_call

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


# --- a private Redis -----------------------------------------------------------------------------


@dataclass
class RedisServer:
    """A redis-server of the test's own on 127.0.0.1:`port`; `persistent` keeps its data across
    a stop (append-only file), otherwise a restart starts empty."""

    port: int
    data_dir: Path
    persistent: bool
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        persistence = (
            ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
            if self.persistent
            else ["--appendonly", "no", "--save", ""]
        )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--dir",
                str(self.data_dir),
                "--maxmemory-policy",
                "noeviction",
                *persistence,
            ],
            stdout=(self.data_dir / "redis.log").open("a"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.5)
        wait_for(lambda: _pings(client), f"redis-server on port {self.port}", timeout_s=15)

    def stop(self) -> None:
        """Shut the server down (SIGTERM: an append-only file is flushed, nothing else kept)."""
        if self.process is None:
            return
        self.process.terminate()
        self.process.wait(timeout=15)
        self.process = None

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_connect_timeout=1, socket_timeout=2)


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


@pytest.fixture
def private_redis(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    """A private Redis; parametrize indirectly with True for an append-only (persistent) one."""
    server = RedisServer(
        port=free_port(),
        data_dir=tmp_path / "redis",
        persistent=bool(getattr(request, "param", False)),
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def broker_is_private_redis(
    private_redis: RedisServer, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RedisServer]:
    """Point this test process's Celery producer and run mutex at the private Redis."""
    from config.celery import app

    def reset_pools() -> None:
        # Celery keeps a connection pool and a producer pool per app, made from the broker URL
        # once (kombu's pools, keyed by URL, stay open for the next test).
        app._pool = None
        app.amqp._producer_pool = None

    # Celery reads CELERY_BROKER_URL from the environment before its configuration.
    monkeypatch.setenv("CELERY_BROKER_URL", private_redis.url)
    settings.MOTOR_MUTEX_REDIS_URL = private_redis.url
    reset_pools()
    try:
        yield private_redis
    finally:
        monkeypatch.undo()
        reset_pools()


# --- a cuttable TCP path to PostgreSQL -----------------------------------------------------------


class TcpProxy:
    """Forwards 127.0.0.1:`port` to `target`; `cut()` closes every connection and refuses new
    ones (PostgreSQL looks unreachable) until `mend()`."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.mend()

    def _call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=10)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        self._writers -= {writer, up_writer}

    async def _start(self) -> None:
        self._server = await asyncio.start_server(
            self._handle, "127.0.0.1", self.port, reuse_address=True
        )

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def cut(self) -> None:
        self._call(self._stop())

    def mend(self) -> None:
        self._call(self._start())

    def close(self) -> None:
        self.cut()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)


def database_url(*, port: int | None = None) -> str:
    """The test database's URL, through `port` (a proxy) when given."""
    params = connection.settings_dict
    user = params.get("USER") or "postgres"
    password = f":{params['PASSWORD']}" if params.get("PASSWORD") else ""
    host = params.get("HOST") or "127.0.0.1"
    port = port or int(params.get("PORT") or 5432)
    if port != int(params.get("PORT") or 5432):
        host = "127.0.0.1"
    return f"postgres://{user}{password}@{host}:{port}/{params['NAME']}"


@pytest.fixture
def database_proxy() -> Iterator[TcpProxy]:
    params = connection.settings_dict
    proxy = TcpProxy((params.get("HOST") or "127.0.0.1", int(params.get("PORT") or 5432)))
    try:
        yield proxy
    finally:
        proxy.close()


def terminate_connections(application_name: str) -> int:
    """pg_terminate_backend on this test database's connections named `application_name`."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = %s "
            "AND pid <> pg_backend_pid()",
            [application_name],
        )
        return int(cursor.fetchone()[0])


# --- worker and beat processes -------------------------------------------------------------------


@dataclass
class Processes:
    """Celery processes started by a test; every one is stopped (its process group) at the end."""

    llm: LLMStubServer
    logs: Path
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = (self.logs / f"{name}{len(self.started)}.log").open("w")
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", *argv],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.started.append(process)
        return process

    def env(self, *, broker: str, database: str, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "DATABASE_URL": database,
            "REDIS_URL": broker,
            "CELERY_BROKER_URL": broker,
            "CELERY_RESULT_BACKEND": broker,
            "LLM_BASE_URL": self.llm.base_url,
            "LLM_API_KEY": "stub",
            "CELERY_TASK_ALWAYS_EAGER": "false",
            # the worker binds only workspaces inside its own MOTOR_WORKSPACES_DIR: the test's
            "MOTOR_WORKSPACES_DIR": str(settings.MOTOR_WORKSPACES_DIR),
            **extra,
        }

    def worker(
        self,
        *,
        broker: str,
        database: str,
        pool: str = "threads",
        concurrency: int = 8,
        **extra: str,
    ) -> subprocess.Popen[bytes]:
        env = self.env(broker=broker, database=database, CELERY_WORKER_POOL=pool, **extra)
        argv = ["worker", f"--pool={pool}", f"--concurrency={concurrency}", "--loglevel=INFO"]
        argv += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
        return self._spawn("worker", argv, env)

    def beat(self, *, broker: str, database: str, **extra: str) -> subprocess.Popen[bytes]:
        env = self.env(broker=broker, database=database, **extra)
        schedule = self.logs / f"beat-schedule-{len(self.started)}"
        argv = ["beat", "--loglevel=INFO", "--scheduler", "celery.beat:PersistentScheduler"]
        return self._spawn("beat", [*argv, f"--schedule={schedule}"], env)

    def log_text(self) -> str:
        return "".join(path.read_text(errors="replace") for path in self.logs.glob("*.log"))

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()


@pytest.fixture
def processes(llm_stub_server: LLMStubServer, tmp_path: Path) -> Iterator[Processes]:
    logs = tmp_path / "logs"
    logs.mkdir()
    started = Processes(llm=llm_stub_server, logs=logs)
    try:
        yield started
    finally:
        started.stop_all()


# --- an LLM that answers each run by where its conversation is -----------------------------------


def counting_call(seconds: float) -> dict[str, Any]:
    """A `code` call that appends one line to count.txt (the side effect) and then works for
    `seconds`."""
    program = (
        "import time\nwith open('count.txt', 'a') as f:\n    f.write('ran\\n')\n"
        f"time.sleep({seconds})\n"
    )
    return reply_tools(tool_call("code", {"code": program}, call_id="c"))


class ConversationLLM(LLMStubServer):
    """Each run's first request gets `first` (one call), after `first_delay_s`; a request
    answering a call gets a final text. Runs in any number and order share it."""

    def __init__(self, first: dict[str, Any], *, first_delay_s: float = 0.0) -> None:
        super().__init__()
        self.first = first
        self.first_delay_s = first_delay_s

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(body)
        last = (body.get("messages") or [{}])[-1]
        if last.get("role") == "tool":
            return 200, reply_text("Counted.")
        time.sleep(self.first_delay_s)
        return 200, self.first
