"""The Celery application. Wiring only: tasks live in each app's tasks.py."""

from __future__ import annotations

import os
import sys
from typing import Any

from celery import Celery
from celery.signals import (
    celeryd_after_setup,
    setup_logging,
    task_postrun,
    task_prerun,
    worker_init,
    worker_process_shutdown,
    worker_ready,
)
from celery.worker.consumer import Consumer

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("motor_cortex")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect(dispatch_uid="config.celery.prefork_database_connections")
def prefork_database_connections(sender: Any = None, **_: Any) -> None:
    """A prefork worker keeps one persistent connection per child instead of a pool.

    Celery's Django fixup closes a pooled database's pool after every prefork task, so a pool
    would be rebuilt (new connections) on each slice; one child runs one slice at a time, so one
    connection kept for up to 60 s is all it needs. Threads workers keep the pool.
    """
    from django.conf import settings

    pool_cls = getattr(sender, "pool_cls", "")
    name = pool_cls if isinstance(pool_cls, str) else getattr(pool_cls, "__module__", "")
    if "prefork" not in name:
        return
    for database in settings.DATABASES.values():
        if (database.get("OPTIONS") or {}).pop("pool", None):
            database["CONN_MAX_AGE"] = 60


@celeryd_after_setup.connect(dispatch_uid="config.celery.worker_host_queue")
def worker_host_queue(sender: Any = None, instance: Any = None, **_: Any) -> None:
    """With MOTOR_MULTI_HOST, a worker also consumes its host's own queue (runs.hosts)."""
    from runs.hosts import host_queue, multi_host

    if not multi_host():
        return

    instance.app.amqp.queues.select_add(host_queue())


@worker_ready.connect(dispatch_uid="config.celery.worker_host")
def worker_host(sender: Any = None, **_: Any) -> None:
    """Once the worker is set up, it announces its host and keeps the heartbeat (runs.host_watch),
    both on a database connection of their own, never one of the pool the slices share; a host
    id another live worker announces ends this one, saying why."""
    from runs.host_watch import host_watch_start
    from runs.hosts import (
        HostIdInUse,
        host_connection_close,
        host_connection_open,
        host_register,
        multi_host,
    )

    if not multi_host():
        return
    try:
        host_register(using=host_connection_open())
    except HostIdInUse as exc:
        print(f"motor: worker refused: {exc}", file=sys.stderr, flush=True)
        os._exit(1)
    finally:
        host_connection_close()
    host_watch_start()


@setup_logging.connect(dispatch_uid="config.celery.keep_django_logging")
def keep_django_logging(**_: Any) -> None:
    """Celery keeps the logging Django configured (settings.LOGGING: JSON lines with the task's
    context) instead of installing its own format on the root logger."""


@task_prerun.connect(dispatch_uid="config.celery.task_log_context")
def task_log_context(
    task_id: str = "", task: Any = None, args: Any = (), kwargs: Any = None, **_: Any
) -> None:
    from runs.logcontext import log_context_for_task

    log_context_for_task(task, task_id, tuple(args or ()), dict(kwargs or {}))


@task_postrun.connect(dispatch_uid="config.celery.task_log_context_clear")
def task_log_context_clear(**_: Any) -> None:
    from runs.logcontext import log_context_clear

    log_context_clear()


@worker_process_shutdown.connect(dispatch_uid="config.celery.metrics_process_dead")
def metrics_process_dead(pid: int | None = None, **_: Any) -> None:
    """A prefork child that ends takes its live gauges (open sandbox sessions) out of the sums."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid or os.getpid())


class BrokerLossConsumer(Consumer):
    """The worker's consumer, surviving the loss of a Redis broker while messages are
    unacknowledged (run slices acknowledge late, so there is one for every slice running).

    On a lost connection Celery 5.7.0 (kombu 5.7.0, the latest releases) first collects the
    connection, which drops its transport's client, and then closes it. Two things then touch a
    channel of that connection and raise AttributeError (" 'NoneType' object has no attribute
    'hostname' " or "... 'client' "), which Celery does not take for a connection error and so
    ends the worker: the close restoring the unacknowledged messages, and the late
    acknowledgement of a task that was running through the outage. Neither can reach a broker
    that just went away. So, before Celery's own handling, the channels of the lost connection
    stop restoring on close, and refuse acknowledgements with a connection error (logged as
    "Couldn't ack", the task's outcome stands). A message the broker still holds as
    unacknowledged comes back after the visibility timeout, where its run's token check drops
    it. A worker's shutdown still restores what it holds (a different path).
    """

    def on_connection_error_after_connected(self, exc: Exception) -> None:
        transport = getattr(self.connection, "_transport", None)
        for channel in list(getattr(transport, "channels", None) or ()):
            channel.do_restore = False
            channel.basic_ack = _lost_channel_operation
            channel.basic_reject = _lost_channel_operation
        super().on_connection_error_after_connected(exc)


def _lost_channel_operation(*_: Any, **__: Any) -> None:
    raise ConnectionError("the broker connection this message came on was lost")
