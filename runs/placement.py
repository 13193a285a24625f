"""Where a run's workspace is: kept on the host running its slices, snapshotted after every
tool call that changed it, restored on the next host when its own is gone.

`workspace_arrive` runs before a slice opens its sandbox: on the host already holding the
workspace it does nothing; elsewhere it restores the last snapshot into this host's
MOTOR_WORKSPACES_DIR (same name inside it) and moves the run there, behind the lease's fence,
so a host that comes back after its runs moved finds its token stale and writes nothing.
`workspace_snapshot` runs after a tool call and before its result is recorded: a result is
never recorded for files that object storage does not hold, so a host lost right after the
record loses nothing, and a call whose snapshot failed is not recorded and stays to be retried.
A store that keeps refusing pauses the run (`workspace_pause`): its placement says why and since
when, the run API and the admin show it, and a host's heartbeat wakes it once the store answers
(runs.host_watch).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now

from runs.errors import LeaseLost
from runs.host_models import RunPlacement
from runs.hosts import host_id, multi_host
from runs.lease import Lease, lease_fence, lease_release
from runs.models import MotorRun
from runs.sessions import run_session_close
from runs.snapshots import StorageUnavailable, snapshot_restore, snapshot_take
from runs.workspaces import workspaces_root

logger = logging.getLogger(__name__)


def _placement(run: MotorRun) -> RunPlacement | None:
    """The run's placement, created on its first slice (where its workspace was made)."""
    if not multi_host():
        return None  # one host: the workspace never moves, nothing to place or snapshot
    found = RunPlacement.objects.filter(pk=run.id).first()
    if found is not None or not run.workspace:
        return found
    root = workspaces_root().resolve()
    try:
        name = Path(run.workspace).resolve().relative_to(root).as_posix()
    except ValueError:
        return None  # checked at start; a run that predates the check keeps its path
    placement, _ = RunPlacement.objects.get_or_create(
        run_id=run.id, defaults={"host_id": host_id(), "workspace_name": name}
    )
    return placement


def workspace_arrive(lease: Lease, run: MotorRun) -> None:
    """Make the run's workspace present on this host, restoring its last snapshot when another
    host held it; `run.workspace` then names the local directory. LeaseLost when the run moved
    on meanwhile; StorageUnavailable when the snapshot cannot be fetched (nothing changed)."""
    placement = _placement(run)
    if placement is None:
        return
    me = host_id()
    local = workspaces_root() / placement.workspace_name
    if placement.host_id == me and local.is_dir():
        return
    # a session this process still has for the run is bound to the old directory
    run_session_close(run.id)
    snapshot_restore(placement.manifest, local)
    local.chmod(0o755)
    with transaction.atomic():
        lease_fence(lease, workspace=str(local))
        RunPlacement.objects.filter(pk=run.id).update(host_id=me)
    logger.info(
        "run %s: workspace restored on host %s from snapshot %s (%s files)",
        run.id,
        me,
        placement.snapshot_seq,
        len(placement.manifest),
    )
    run.workspace = str(local)


def _pause_reason(exc: StorageUnavailable) -> str:
    return f"snapshot storage unreachable: {exc}"


def workspace_snapshot(lease: Lease, run: MotorRun) -> None:
    """Snapshot the run's workspace when it changed. Waits out a store that refuses for up to
    MOTOR_SNAPSHOT_RETRY_SECONDS (keeping the lease; the run shows as paused with the reason
    meanwhile), then raises StorageUnavailable; SnapshotTooLarge past the quota."""
    placement = _placement(run)
    if placement is None:
        return
    budget = float(getattr(settings, "MOTOR_SNAPSHOT_RETRY_SECONDS", 30))
    deadline = time.monotonic() + budget
    pause = 0.5
    while True:
        try:
            manifest = snapshot_take(
                Path(run.workspace),
                run_id=run.id,
                seq=placement.snapshot_seq + 1,
                previous=placement.manifest,
            )
            break
        except StorageUnavailable as exc:
            if not placement.paused_reason:
                # shown at once, while this slice still retries
                with transaction.atomic():
                    lease_fence(lease)
                    RunPlacement.objects.filter(pk=run.id).update(
                        paused_reason=_pause_reason(exc), paused_at=Now()
                    )
                placement.paused_reason = _pause_reason(exc)
            if time.monotonic() + pause > deadline:
                raise
            logger.warning(
                "run %s: snapshot not stored (%s); retrying in %.1f s", run.id, exc, pause
            )
            time.sleep(pause)
            with transaction.atomic():
                lease_fence(lease)
            pause = min(pause * 2, 5.0)
    resumed = {"paused_reason": "", "paused_at": None} if placement.paused_reason else {}
    if manifest is None and not resumed:
        return
    with transaction.atomic():
        lease_fence(lease)
        if manifest is None:
            RunPlacement.objects.filter(pk=run.id).update(**resumed)
        else:
            RunPlacement.objects.filter(pk=run.id).update(
                manifest=manifest,
                snapshot_seq=placement.snapshot_seq + 1,
                host_id=host_id(),
                **resumed,
            )
    placement.paused_reason = ""


def workspace_pause(lease: Lease, run: MotorRun, exc: StorageUnavailable) -> None:
    """End the slice of a run whose snapshot the store keeps refusing: the lease is released
    and no next slice is queued; the run stays paused with the reason until a host finds the
    store reachable again and wakes it (runs.host_watch). LeaseLost when the run moved on."""
    with transaction.atomic():
        if not lease_release(lease, slice_done=True):
            raise LeaseLost(
                f"run {lease.run_id}: fencing token {lease.token} is stale; the slice ends",
                run_id=lease.run_id,
                token=lease.token,
            )
        RunPlacement.objects.filter(pk=run.id, paused_at__isnull=True).update(
            paused_reason=_pause_reason(exc), paused_at=Now()
        )
