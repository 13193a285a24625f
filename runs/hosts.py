"""Worker hosts: each announces itself and has a Celery queue of its own.

A worker process registers its host (MOTOR_HOST_ID, the hostname by default) in `WorkerHost`
at start and renews the row's heartbeat every MOTOR_HOST_HEARTBEAT_SECONDS with the database's
time, so hosts with skewed clocks are judged by one clock. A host id whose row another process
renewed within MOTOR_HOST_GRACE_SECONDS is refused at start: two live hosts under one name
would each believe they hold the other's workspaces. A process on this same machine that no
longer exists (a worker killed and restarted) holds nothing: its id is taken over at once, so the
restarted worker consumes the host queue its runs' slices wait in.

A run's slices go to the queue of the host holding its workspace (`RunPlacement.host_id`)
while that host's heartbeat is fresh, and to the shared run queue once it is missing past the
grace, where any host takes them and restores the workspace from its snapshot
(runs.snapshots); the heartbeat of any live host sends them there at once (runs.host_watch).
Registration and heartbeat use a database connection of their own (`host_connection_open`),
never one of the pool a threads worker's slices share.
"""

from __future__ import annotations

import copy
import logging
import os
import socket
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models.functions import Now
from django.db.utils import load_backend

from runs.host_models import RunPlacement, WorkerHost
from runs.lease import owner_is_dead

logger = logging.getLogger(__name__)

#: this process's registration, set by host_register
_instance: str = ""

#: the alias of the connection a host's registration and heartbeat use (runs.host_watch)
HOST_DB_ALIAS = "motor_host"


class HostIdInUse(RuntimeError):
    """Another live process announces the same host id; the message names it and the rule."""


def multi_host() -> bool:
    """Whether this deployment runs several worker hosts (MOTOR_MULTI_HOST): only then do
    workers announce themselves and runs' workspaces get snapshotted and follow the run."""
    return bool(getattr(settings, "MOTOR_MULTI_HOST", False))


def host_id() -> str:
    """This host's id (MOTOR_HOST_ID, else the hostname)."""
    return str(getattr(settings, "MOTOR_HOST_ID", "") or socket.gethostname())


def host_queue(host: str | None = None) -> str:
    """The Celery queue only `host` (this host by default) consumes."""
    return f"motor.host.{host or host_id()}"


def shared_queue() -> str:
    """The run queue every host consumes."""
    return str(getattr(settings, "MOTOR_RUN_QUEUE", "") or "celery")


def host_grace() -> timedelta:
    """How long a host may stay silent before it counts as gone (MOTOR_HOST_GRACE_SECONDS)."""
    return timedelta(seconds=float(getattr(settings, "MOTOR_HOST_GRACE_SECONDS", 60)))


def host_connection_open() -> str:
    """Give the calling thread a database connection of its own under HOST_DB_ALIAS (the
    default database's settings without the pool; on PostgreSQL named "<application>-host"),
    so a host's registration and heartbeat never wait for, or hold, a pooled connection the
    slices need. Returns the alias; `host_connection_close` ends it."""
    params = copy.deepcopy(connections[DEFAULT_DB_ALIAS].settings_dict)
    options = params.setdefault("OPTIONS", {})
    options.pop("pool", None)
    params["CONN_MAX_AGE"] = None  # kept for the thread's life, reopened after a failure
    params["CONN_HEALTH_CHECKS"] = True
    if "postgresql" in params["ENGINE"]:
        base = options.get("application_name") or os.environ.get("PGAPPNAME") or "motor"
        options["application_name"] = f"{base}-host"
    backend = load_backend(params["ENGINE"])
    connections[HOST_DB_ALIAS] = backend.DatabaseWrapper(params, HOST_DB_ALIAS)
    return HOST_DB_ALIAS


def host_connection_close() -> None:
    """Close the calling thread's own connection (a no-op without one)."""
    wrapper = getattr(connections._connections, HOST_DB_ALIAS, None)
    if wrapper is not None:
        wrapper.close()


def host_register(*, using: str = DEFAULT_DB_ALIAS) -> str:
    """Announce this host (a new instance id); HostIdInUse when another process renewed the
    same host id within the grace. Returns the instance id."""
    global _instance
    me = host_id()
    instance = uuid.uuid4().hex
    hosts = WorkerHost.objects.using(using)
    with transaction.atomic(using=using):
        row = hosts.select_for_update().filter(pk=me).first()
        if row is not None:
            live = hosts.filter(
                pk=me, heartbeat_at__gte=Now() - host_grace()
            ).exists() and not owner_is_dead(f"{row.machine}:{row.pid}")
            if live:
                raise HostIdInUse(
                    f"host id {me!r} is announced by another live worker (pid {row.pid}, "
                    f"instance {row.instance}); each worker host needs its own MOTOR_HOST_ID "
                    f"(a heartbeat older than MOTOR_HOST_GRACE_SECONDS frees the id)"
                )
            hosts.filter(pk=me).update(
                instance=instance,
                machine=socket.gethostname(),
                pid=os.getpid(),
                started_at=Now(),
                heartbeat_at=Now(),
            )
        else:
            hosts.create(
                host_id=me,
                instance=instance,
                machine=socket.gethostname(),
                pid=os.getpid(),
                started_at=Now(),
                heartbeat_at=Now(),
            )
    _instance = instance
    return instance


def host_heartbeat(*, using: str = DEFAULT_DB_ALIAS) -> bool:
    """Renew this host's heartbeat; False when another instance took the host id over."""
    return bool(
        WorkerHost.objects.using(using)
        .filter(pk=host_id(), instance=_instance)
        .update(heartbeat_at=Now())
    )


def host_alive(host: str, *, using: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether `host` renewed its heartbeat within MOTOR_HOST_GRACE_SECONDS (database time)."""
    return (
        bool(host)
        and WorkerHost.objects.using(using)
        .filter(pk=host, heartbeat_at__gte=Now() - host_grace())
        .exists()
    )


def run_queue(run_id: str, *, using: str = DEFAULT_DB_ALIAS) -> str:
    """The queue for the run's next slice: its workspace host's while it lives, else shared."""
    if not multi_host():
        return shared_queue()
    holder = (
        RunPlacement.objects.using(using)
        .filter(pk=run_id)
        .values_list("host_id", flat=True)
        .first()
    )
    if holder and host_alive(holder, using=using):
        return host_queue(holder)
    return shared_queue()
