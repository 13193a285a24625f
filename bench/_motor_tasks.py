"""The no-op Celery task bench/motor.py measures the broker against (loaded with `worker -I`).

With BENCH_MOTOR_COUNT=<file>, the worker also counts what it sends to PostgreSQL and Redis
(statements, round trips, commands) and rewrites the totals to <file> as JSON every 0.25 s;
bench/motor.py's `--count` divides them by the iterations. Counting wraps the client
libraries' send functions (psycopg, redis-py) in this process only: the runtime is unchanged.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from typing import Any

from celery import shared_task


@shared_task(name="bench.noop")
def noop_task() -> None:
    """Does nothing: its round trip is the cost of Celery itself."""
    return None


_counts: Counter[str] = Counter()


def _count_psycopg() -> None:
    import psycopg

    execute = psycopg.Cursor.execute
    pipeline = psycopg.Connection.pipeline

    def counted_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        text = query if isinstance(query, str) else str(getattr(query, "_obj", query))
        _counts["sql " + (text.lstrip().split(None, 1) or ["?"])[0].upper()] += 1
        if self.connection._pipeline is None:
            _counts["sql round trips"] += 1
        return execute(self, query, *args, **kwargs)

    def counted_pipeline(self: Any) -> Any:
        if self._pipeline is None:
            _counts["sql round trips"] += 1
        return pipeline(self)

    psycopg.Cursor.execute = counted_execute  # type: ignore[method-assign]
    psycopg.Connection.pipeline = counted_pipeline  # type: ignore[method-assign]


def _count_redis() -> None:
    from redis.connection import AbstractConnection

    send_command = AbstractConnection.send_command
    send_packed = AbstractConnection.send_packed_command
    pack_commands = AbstractConnection.pack_commands

    def counted_send(self: Any, *args: Any, **kwargs: Any) -> Any:
        _counts[f"redis {str(args[0]).upper()}"] += 1
        return send_command(self, *args, **kwargs)

    def counted_packed(self: Any, *args: Any, **kwargs: Any) -> Any:
        _counts["redis round trips"] += 1
        return send_packed(self, *args, **kwargs)

    def counted_pack(self: Any, commands: Any) -> Any:
        commands = list(commands)
        for command in commands:
            _counts[f"redis {str(command[0]).upper()}"] += 1
        return pack_commands(self, commands)

    AbstractConnection.send_command = counted_send  # type: ignore[method-assign]
    AbstractConnection.send_packed_command = counted_packed  # type: ignore[method-assign]
    AbstractConnection.pack_commands = counted_pack  # type: ignore[method-assign]


def _dump_forever(path: str) -> None:
    event = threading.Event()
    while not event.wait(0.25):
        tmp = f"{path}.tmp"
        with open(tmp, "w") as handle:
            json.dump(dict(_counts), handle)
        os.replace(tmp, path)


if _target := os.environ.get("BENCH_MOTOR_COUNT"):
    _count_psycopg()
    _count_redis()
    threading.Thread(target=_dump_forever, args=(f"{_target}.{os.getpid()}",), daemon=True).start()


_merged: dict[str, Any] = {}
_merge_lock = threading.Lock()


def _profile_tasks(prefix: str) -> None:
    """Profile every task's thread CPU time (cProfile with time.thread_time, so waits count for
    nothing) and dump the merged statistics to <prefix>.<pid> every 2 s."""
    import cProfile
    import marshal
    import pstats
    import time

    from celery.signals import task_postrun, task_prerun

    local = threading.local()

    @task_prerun.connect(weak=False)
    def _on(**_: Any) -> None:
        local.profile = cProfile.Profile(time.thread_time)
        local.profile.enable()

    @task_postrun.connect(weak=False)
    def _off(**_: Any) -> None:
        profile = getattr(local, "profile", None)
        if profile is None:
            return
        profile.disable()
        local.profile = None
        with _merge_lock:
            if "stats" in _merged:
                _merged["stats"].add(profile)
            else:
                _merged["stats"] = pstats.Stats(profile)

    def dump() -> None:
        event = threading.Event()
        while not event.wait(2.0):
            with _merge_lock:
                stats = _merged.get("stats")
                data = marshal.dumps(stats.stats) if stats is not None else None
            if data is not None:
                path = f"{prefix}.{os.getpid()}"
                with open(path + ".tmp", "wb") as handle:
                    handle.write(data)
                os.replace(path + ".tmp", path)

    threading.Thread(target=dump, daemon=True).start()


if _prefix := os.environ.get("BENCH_MOTOR_PROFILE"):
    _profile_tasks(_prefix)
