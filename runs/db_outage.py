"""What a slice does when its database connection fails (a terminated connection, a database
restart, a network cut).

Such an error is transient: the run's state is whatever the database committed, and the ledger
makes any slice safe to repeat. So the slice ends there, cleanly, instead of letting the error
escape with the run's lease held: it drops its connection (and the pool's dead ones), waits
until the database answers again (pauses doubling from 0.5 s to 15 s, for at most
MOTOR_DB_OUTAGE_WAIT_SECONDS), releases the lease if it still holds it, and wakes the run for its
current token. A call whose result could not be written is reported to the model as
interrupted by the next slice, never run again (as after a worker crash).

If the database stays away longer, the slice gives up: the lease then lapses on its own (never
later than the run's own timeout, see runs.lease) and the reaper wakes the run.
"""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connections
from django.db.models.functions import Now

from runs.models import MotorRun, RunStatus
from runs.wakeups import wake_up

logger = logging.getLogger(__name__)

#: the errors Django raises when the database cannot be reached or the connection broke
DATABASE_UNAVAILABLE: tuple[type[Exception], ...] = (OperationalError, InterfaceError)

#: first and longest pause between two tries to reach the database again, seconds
FIRST_PAUSE_S = 0.5
LONGEST_PAUSE_S = 15.0


def outage_wait_s() -> float:
    """How long a slice waits for the database to come back before it gives up (seconds)."""
    return float(getattr(settings, "MOTOR_DB_OUTAGE_WAIT_SECONDS", 300))


def drop_broken_connections() -> None:
    """Give up this thread's connection and every pooled one that no longer answers."""
    connection = connections[DEFAULT_DB_ALIAS]
    try:
        connection.close()
    except Exception:  # noqa: BLE001 - a broken connection may fail to close; it is gone either way
        logger.debug("closing a broken database connection failed", exc_info=True)
    pool = getattr(connection, "pool", None)
    if pool is not None:
        try:
            pool.check()  # psycopg_pool: tests each idle connection, replaces the dead ones
        except Exception:  # noqa: BLE001 - the database may still be away; the next try sees it
            logger.debug("checking the database pool failed", exc_info=True)


def slice_after_database_loss(*, run_id: str, owner: str, error: Exception) -> bool:
    """End the slice of `owner` on `run_id` after `error` (one of DATABASE_UNAVAILABLE): wait
    for the database, release the run's lease if `owner` still holds it, and wake the run when
    it is runnable and nobody holds it. True once done; False when the database did not come
    back within `outage_wait_s()` (the lease then lapses and the reaper takes over)."""
    logger.warning(
        "run %s: the database connection failed (%s: %s); ending the slice",
        run_id,
        type(error).__name__,
        str(error).strip().splitlines()[0] if str(error).strip() else "",
    )
    deadline = time.monotonic() + outage_wait_s()
    pause = FIRST_PAUSE_S
    while True:
        drop_broken_connections()
        try:
            state = _release_and_read(run_id=run_id, owner=owner)
            break
        except DATABASE_UNAVAILABLE:
            if time.monotonic() + pause > deadline:
                logger.error(
                    "run %s: the database is still unreachable after %.0f s; the run's lease "
                    "will lapse and the reaper wakes it",
                    run_id,
                    outage_wait_s(),
                )
                drop_broken_connections()
                return False
            time.sleep(pause)
            pause = min(pause * 2, LONGEST_PAUSE_S)
    if state is not None:
        status, token, held = state
        if status in (RunStatus.CREATED, RunStatus.RUNNING) and not held:
            wake_up(run_id, token)
    return True


def _release_and_read(*, run_id: str, owner: str) -> tuple[str, int, bool] | None:
    """Free the run's lease if `owner` holds it; return the run's status, lease token and
    whether someone (else) holds its lease; None when the run is gone."""
    MotorRun.objects.filter(pk=run_id, lease_owner=owner).update(
        lease_expires_at=None, lease_owner="", idle_since=Now()
    )
    row = (
        MotorRun.objects.filter(pk=run_id)
        .values_list("status", "lease_token", "lease_expires_at")
        .first()
    )
    if row is None:
        return None
    status, token, expires_at = row
    return status, token, expires_at is not None
