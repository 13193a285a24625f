"""The signal outbox: how the runtime (and the schedules) tell an agent's brain what happened.

`signal_emit` writes a Signal inside the caller's transaction and, once that transaction
commits, sends `signal_committed` so delivery (webhooks, long-poll wake-ups, the built-in brain)
can start without polling. Delivery is at least once: a receiver that misses the notification
(a crash between commit and send) is covered by readers that page through the outbox by `seq`.
"""

from __future__ import annotations

import logging
from typing import Any

import django.dispatch
from django.db import connection, transaction

from runs.models import Signal, SignalCounter, SignalKind, SignalPriority

logger = logging.getLogger(__name__)

#: sent after the emitting transaction commits, with ``signal_id``, ``agent_id``, ``seq`` and
#: ``kind``; receivers must be quick (queue a task) and must not raise.
signal_committed = django.dispatch.Signal()


def _next_seq(agent_id: int) -> int:
    """Take the agent's next sequence number, holding its counter row locked until commit."""
    table = SignalCounter._meta.db_table
    with connection.cursor() as cursor:
        # One statement that inserts or bumps the row, and locks it on both paths (PostgreSQL and
        # SQLite both understand ON CONFLICT … RETURNING).
        cursor.execute(
            f"INSERT INTO {table} (agent_id, last_seq) VALUES (%s, 1) "  # noqa: S608 - table name is ours
            f"ON CONFLICT (agent_id) DO UPDATE SET last_seq = {table}.last_seq + 1 "
            "RETURNING last_seq",
            [agent_id],
        )
        row = cursor.fetchone()
    assert row is not None
    return int(row[0])


def _notify(signal_id: int, agent_id: int, seq: int, kind: str) -> None:
    for receiver, error in signal_committed.send_robust(
        sender=Signal, signal_id=signal_id, agent_id=agent_id, seq=seq, kind=kind
    ):
        if isinstance(error, Exception):
            logger.error(
                "signal %s: receiver %r failed: %s", signal_id, receiver, error, exc_info=error
            )


def signal_emit(
    *,
    agent_id: int,
    kind: str,
    payload: dict[str, Any],
    run_id: str | None = None,
    priority: int = SignalPriority.HIGH,
) -> Signal:
    """Write one signal for `agent_id` in the current transaction; notify receivers on commit."""
    if kind not in SignalKind.values:
        raise ValueError(f"unknown signal kind {kind!r}; known: {', '.join(SignalKind.values)}")
    # No savepoint inside the caller's transaction (two round trips saved per signal): a
    # failure here fails the caller's change with it, which is what every caller wants.
    with transaction.atomic(savepoint=False):
        signal = Signal.objects.create(
            kind=kind,
            run_id=run_id,
            agent_id=agent_id,
            seq=_next_seq(agent_id),
            payload=payload,
            priority=priority,
        )
        transaction.on_commit(lambda: _notify(signal.id, agent_id, signal.seq, kind), robust=True)
    return signal
