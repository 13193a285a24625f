"""One transaction per cortex update, under the agent's Cortex row lock.

Concurrent runs of one agent end at the same time and learn at the same time; each update reads
weights, computes and writes them back, so two unserialised updates would lose one. Every update
therefore first takes the agent's Cortex row: on PostgreSQL `SELECT … FOR UPDATE` (the second
update waits for the first to commit, then reads what it wrote); on SQLite the same statement is
preceded by an UPDATE of the row, which takes the database's write lock before anything is read
(a deferred SQLite transaction that read first could not upgrade its lock later and would fail).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from .models import Cortex


def _cortex_row(agent_id: int) -> None:
    """Make sure the agent has its Cortex row (created outside the caller's lock scope, so two
    first updates do not both insert)."""
    if Cortex.objects.filter(agent_id=agent_id).exists():
        return
    try:
        with transaction.atomic():
            Cortex.objects.create(agent_id=agent_id)
    except IntegrityError:  # created meanwhile by a concurrent first update
        pass


@contextmanager
def cortex_locked(agent_id: int) -> Iterator[Cortex]:
    """A transaction holding the agent's Cortex row lock; yields the row (its `generation`
    already counts this update). Everything done inside commits or rolls back together."""
    _cortex_row(agent_id)
    with transaction.atomic():
        if connection.vendor == "sqlite":
            Cortex.objects.filter(agent_id=agent_id).update(generation=F("generation") + 1)
            cortex = Cortex.objects.get(agent_id=agent_id)
        else:
            cortex = Cortex.objects.select_for_update().get(agent_id=agent_id)
            cortex.generation += 1
        cortex.updated_at = timezone.now()
        cortex.save(update_fields=["generation", "updated_at"])
        yield cortex
