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
(runs.snapshots).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now

from runs.host_models import RunPlacement, WorkerHost
from runs.lease import owner_is_dead

logger = logging.getLogger(__name__)

#: this process's registration, set by host_register
_instance: str = ""


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


def _grace() -> timedelta:
    return timedelta(seconds=float(getattr(settings, "MOTOR_HOST_GRACE_SECONDS", 60)))


def host_register() -> str:
    """Announce this host (a new instance id); HostIdInUse when another process renewed the
    same host id within the grace. Returns the instance id."""
    global _instance
    me = host_id()
    instance = uuid.uuid4().hex
    with transaction.atomic():
        row = WorkerHost.objects.select_for_update().filter(pk=me).first()
        if row is not None:
            live = WorkerHost.objects.filter(
                pk=me, heartbeat_at__gte=Now() - _grace()
            ).exists() and not owner_is_dead(f"{row.machine}:{row.pid}")
            if live:
                raise HostIdInUse(
                    f"host id {me!r} is announced by another live worker (pid {row.pid}, "
                    f"instance {row.instance}); each worker host needs its own MOTOR_HOST_ID "
                    f"(a heartbeat older than MOTOR_HOST_GRACE_SECONDS frees the id)"
                )
            WorkerHost.objects.filter(pk=me).update(
                instance=instance,
                machine=socket.gethostname(),
                pid=os.getpid(),
                started_at=Now(),
                heartbeat_at=Now(),
            )
        else:
            WorkerHost.objects.create(
                host_id=me,
                instance=instance,
                machine=socket.gethostname(),
                pid=os.getpid(),
                started_at=Now(),
                heartbeat_at=Now(),
            )
    _instance = instance
    return instance


def host_heartbeat() -> bool:
    """Renew this host's heartbeat; False when another instance took the host id over."""
    return bool(
        WorkerHost.objects.filter(pk=host_id(), instance=_instance).update(heartbeat_at=Now())
    )


def host_heartbeat_start() -> threading.Thread:
    """A daemon thread renewing the heartbeat every MOTOR_HOST_HEARTBEAT_SECONDS."""
    interval = float(getattr(settings, "MOTOR_HOST_HEARTBEAT_SECONDS", 10))
    stop = threading.Event()

    def beat() -> None:
        from django.db import connections

        while not stop.wait(interval):
            try:
                if not host_heartbeat():
                    logger.error("host %s: another process took this host id over", host_id())
            except Exception:  # noqa: BLE001 - a database outage must not end the heartbeat
                logger.warning("host %s: heartbeat failed", host_id(), exc_info=True)
            finally:
                # back to the pool: a worker's pool may hold a single connection for its slices
                connections.close_all()

    thread = threading.Thread(target=beat, name="motor-host-heartbeat", daemon=True)
    thread.start()
    return thread


def host_alive(host: str) -> bool:
    """Whether `host` renewed its heartbeat within MOTOR_HOST_GRACE_SECONDS (database time)."""
    return (
        bool(host)
        and WorkerHost.objects.filter(pk=host, heartbeat_at__gte=Now() - _grace()).exists()
    )


def run_queue(run_id: str) -> str:
    """The queue for the run's next slice: its workspace host's while it lives, else shared."""
    if not multi_host():
        return shared_queue()
    holder = RunPlacement.objects.filter(pk=run_id).values_list("host_id", flat=True).first()
    if holder and host_alive(holder):
        return host_queue(holder)
    return shared_queue()
