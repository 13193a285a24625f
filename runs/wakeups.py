"""Runs' wake-up messages, and the outbox that keeps the ones an unreachable broker refused.

A run moves on only when a worker gets a message for it (`runs.run_step`, carrying the lease
token it is meant for), and every such message is sent by `wake_up`. The state change that
needs the message (a start, an answer, the end of a slice) has committed by then; when the
broker is unreachable, failing the caller would report a change that happened as failed (a start
answered 500 with its run created). Instead the message is written to the `PendingWakeup`
outbox and `wakeups_send_pending` (celery-beat, every MOTOR_WAKEUP_SWEEP_INTERVAL_SECONDS)
sends it once the broker is back.

A process that dies between its commit and the send leaves no outbox row: the reaper wakes such
a run after MOTOR_REAPER_GRACE_SECONDS, as it does for any lost message. A message sent twice
is harmless: the claim drops a message whose token was already served.
"""

from __future__ import annotations

import logging

from django.db import DEFAULT_DB_ALIAS, connections
from kombu.exceptions import OperationalError as BrokerUnavailable

from runs.db import release_db_connection
from runs.hosts import run_queue
from runs.models import PendingWakeup
from runs.tasks import run_step_task

logger = logging.getLogger(__name__)

#: most outbox rows one sweep sends (the next sweep takes the rest)
SWEEP_BATCH = 500


def _send(run_id: str, token: int) -> None:
    # the host holding the run's workspace while it lives, else any host (runs.hosts)
    had_connection = connections[DEFAULT_DB_ALIAS].connection is not None
    queue = run_queue(run_id)
    if not had_connection:
        # a send from a thread that gave its connection back (waiting on the LLM) keeps none
        release_db_connection()
    run_step_task.apply_async(args=[run_id, token], queue=queue)


def wake_up(run_id: str, token: int, *, remember: bool = True) -> bool:
    """Send the run's wake-up message for lease `token`; True once the broker took it.

    When the broker is unreachable: False, and with `remember` (outside any transaction that
    is still to commit) the message waits in the outbox; without it the caller keeps it.
    """
    try:
        _send(run_id, token)
    except BrokerUnavailable as exc:
        logger.warning(
            "run %s: the broker is unreachable (%s); its wake-up (token %s) waits in the outbox",
            run_id,
            exc,
            token,
        )
        if remember:
            wakeup_remember(run_id, token)
        return False
    return True


def wakeup_remember(run_id: str, token: int) -> None:
    """Keep the run's wake-up for `token` in the outbox (once, however often it is kept)."""
    PendingWakeup.objects.bulk_create(
        [PendingWakeup(run_id=run_id, token=token)], ignore_conflicts=True
    )


def wakeups_send_pending() -> int:
    """Send the wake-ups the outbox holds, oldest first, until the broker refuses one; each
    sent one leaves the outbox. Returns how many were sent."""
    sent = 0
    pending = PendingWakeup.objects.order_by("id").values_list("id", "run_id", "token")
    for row_id, run_id, token in pending[:SWEEP_BATCH]:
        try:
            _send(run_id, token)
        except BrokerUnavailable as exc:
            logger.warning("wake-up sweep: the broker is unreachable (%s); %s sent", exc, sent)
            break
        PendingWakeup.objects.filter(pk=row_id).delete()
        sent += 1
    return sent
