"""What every live worker host does on each heartbeat, on a database connection of its own.

Each beat (MOTOR_HOST_HEARTBEAT_SECONDS) a host renews its heartbeat (runs.hosts), then:

* re-sends the next slice of every run whose workspace host has been silent past
  MOTOR_HOST_GRACE_SECONDS, to the shared queue, so the run moves within a beat of the grace
  instead of waiting for the reaper. A lease still held by a slice of the gone host (its
  process on that machine; on this machine, only one that no longer exists) is fenced: its
  token moves on and the lease is freed, so that slice, if it was only stalled, writes nothing
  more. The run's placement is released in the same transaction, conditional on still naming
  the gone host, so of all the hosts sweeping at once exactly one sends.
* wakes the runs paused because their snapshot storage was unreachable (runs.placement), once
  the store answers again: the pause is cleared (once, conditionally), the time it lasted is
  not charged to the run's budget, and the run's next slice takes its step again.

A host judges others only once its own beats have gone through for 1.5 intervals, so after a
database outage (every heartbeat old) each live host renews its own before any counts it gone.
All of it uses the thread's own connection (runs.hosts.host_connection_open), never a pooled
one: a worker whose pool holds a single connection keeps it for its slices.
"""

from __future__ import annotations

import logging
import socket
import threading
import time

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, transaction
from django.db.models import F
from django.db.models.functions import Now
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnavailable

from runs.host_models import RunPlacement, WorkerHost
from runs.hosts import (
    host_connection_close,
    host_connection_open,
    host_grace,
    host_heartbeat,
    host_id,
    run_queue,
    shared_queue,
)
from runs.lease import owner_is_dead
from runs.models import MotorRun, PendingWakeup, RunStatus
from runs.snapshots import StorageUnavailable, snapshot_store

logger = logging.getLogger(__name__)

RUNNABLE = (RunStatus.CREATED, RunStatus.RUNNING)


def _send(run_id: str, token: int, *, using: str) -> None:
    """The wake-up for `token` (to the run's workspace host while it lives, else the shared
    queue), kept in the outbox when the broker is unreachable."""
    from runs.tasks import run_step_task

    try:
        run_step_task.apply_async(args=[run_id, token], queue=run_queue(run_id, using=using))
    except BrokerUnavailable as exc:
        logger.warning("run %s: the broker is unreachable (%s); wake-up kept", run_id, exc)
        PendingWakeup.objects.using(using).bulk_create(
            [PendingWakeup(run_id=run_id, token=token)], ignore_conflicts=True
        )


def _held_by(owner: str, machine: str) -> bool:
    """Whether lease `owner` ("machine:pid:thread") is a slice of the gone host on `machine`:
    any process there, except on this machine, where only one that no longer exists."""
    if not owner.startswith(f"{machine}:"):
        return False
    return machine != socket.gethostname() or owner_is_dead(owner)


def hosts_gone_resend(*, using: str = DEFAULT_DB_ALIAS) -> list[str]:
    """Re-send the next slice of each running run whose workspace host is silent past the grace
    (see the module docstring); the ids of the runs re-sent by this call."""
    gone = dict(
        (host, machine)
        for host, machine in WorkerHost.objects.using(using)
        .filter(heartbeat_at__lt=Now() - host_grace())
        .exclude(pk=host_id())
        .values_list("host_id", "machine")
    )
    if not gone:
        return []
    placed = RunPlacement.objects.using(using).filter(host_id__in=gone, run__status__in=RUNNABLE)
    resent: list[str] = []
    for run_id, holder in placed.values_list("run_id", "host_id"):
        with transaction.atomic(using=using):
            row = (
                MotorRun.objects.using(using)
                .select_for_update()
                .filter(pk=run_id, status__in=RUNNABLE)
                .values("lease_token", "lease_owner")
                .first()
            )
            if row is None:
                continue
            token = int(row["lease_token"])
            # judged by the database's clock, as every lease
            held = (
                MotorRun.objects.using(using)
                .filter(pk=run_id, lease_expires_at__gte=Now())
                .exists()
            )
            if held and not _held_by(str(row["lease_owner"]), gone[holder]):
                continue  # a live slice elsewhere is taking the run over: it places it
            released = (
                RunPlacement.objects.using(using)
                .filter(pk=run_id, host_id=holder)
                .update(host_id="")
            )
            if not released:
                continue  # another host re-sent it first
            if held:
                MotorRun.objects.using(using).filter(pk=run_id, lease_token=token).update(
                    lease_token=F("lease_token") + 1,
                    lease_owner="",
                    lease_expires_at=None,
                    idle_since=Now(),
                )
                token += 1
            transaction.on_commit(
                lambda run_id=run_id, token=token: _send(run_id, token, using=using),
                using=using,
            )
        logger.warning(
            "run %s: its host %s is silent past the grace; next slice (token %s) sent to %s",
            run_id,
            holder,
            token,
            shared_queue(),
        )
        resent.append(run_id)
    return resent


def paused_runs_resume(*, using: str = DEFAULT_DB_ALIAS) -> list[str]:
    """Wake the runs paused for their snapshot storage once the store answers; the ids woken."""
    paused = RunPlacement.objects.using(using).filter(
        paused_at__isnull=False,
        run__status__in=RUNNABLE,
        run__lease_expires_at__isnull=True,
    )
    candidates = list(paused.values_list("run_id", flat=True)[:500])
    if not candidates:
        return []
    try:
        snapshot_store().probe()
    except StorageUnavailable as exc:
        logger.info("%s runs stay paused: %s", len(candidates), exc)
        return []
    woken: list[str] = []
    for run_id in candidates:
        with transaction.atomic(using=using):
            row = (
                MotorRun.objects.using(using)
                .select_for_update()
                .filter(pk=run_id, status__in=RUNNABLE, lease_expires_at__isnull=True)
                .values_list("lease_token", flat=True)
                .first()
            )
            placement = (
                RunPlacement.objects.using(using)
                .filter(pk=run_id, paused_at__isnull=False)
                .values_list("paused_at", flat=True)
                .first()
            )
            if row is None or placement is None:
                continue  # resumed or taken by a slice meanwhile
            # conditional, under the run row's lock: of the hosts beating at once, one wakes it
            cleared = (
                RunPlacement.objects.using(using)
                .filter(pk=run_id, paused_at__isnull=False)
                .update(paused_reason="", paused_at=None)
            )
            if not cleared:
                continue
            waited = max(0, int((timezone.now() - placement).total_seconds()))
            MotorRun.objects.using(using).filter(pk=run_id).update(waited_s=F("waited_s") + waited)
            token = int(row)
            transaction.on_commit(
                lambda run_id=run_id, token=token: _send(run_id, token, using=using),
                using=using,
            )
        logger.info("run %s: snapshot storage reachable again after %s s; woken", run_id, waited)
        woken.append(run_id)
    return woken


def host_watch_beat(*, using: str = DEFAULT_DB_ALIAS, sweep: bool = True) -> None:
    """One beat: renew the heartbeat and, with `sweep`, re-send the slices of gone hosts' runs
    and wake runs whose storage is back."""
    if not host_heartbeat(using=using):
        logger.error("host %s: another process took this host id over", host_id())
        return
    if sweep:
        hosts_gone_resend(using=using)
        paused_runs_resume(using=using)


def host_watch_start() -> threading.Thread:
    """A daemon thread beating every MOTOR_HOST_HEARTBEAT_SECONDS on a connection of its own.

    It judges other hosts only after its own beats have gone through for 1.5 intervals: after
    a database outage every host's heartbeat is old, and each live one gets a beat in before
    any of them counts another as gone."""
    interval = float(getattr(settings, "MOTOR_HOST_HEARTBEAT_SECONDS", 10))

    def beat() -> None:
        alias = host_connection_open()
        beating_since: float | None = None
        while True:
            time.sleep(interval)
            try:
                now = time.monotonic()
                settled = beating_since is not None and now - beating_since >= 1.5 * interval
                host_watch_beat(using=alias, sweep=settled)
                beating_since = now if beating_since is None else beating_since
            except Exception:  # noqa: BLE001 - a database or broker outage must not end the beat
                logger.warning("host %s: heartbeat failed", host_id(), exc_info=True)
                beating_since = None
                host_connection_close()  # reopened by the next beat

    thread = threading.Thread(target=beat, name="motor-host-heartbeat", daemon=True)
    thread.start()
    return thread
