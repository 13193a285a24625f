"""The no-op Celery task bench/motor.py measures the broker against (loaded with `worker -I`)."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="bench.noop")
def noop_task() -> None:
    """Does nothing: its round trip is the cost of Celery itself."""
    return None
