"""The Celery tasks bench/motor.py's workers load (`worker -I`): the no-op it measures the broker
against, and the report of the code-path variant the worker runs (bench.variants)."""

from __future__ import annotations

from celery import shared_task

from bench.variants import apply_from_environment

_VARIANT = apply_from_environment()


@shared_task(name="bench.noop")
def noop_task() -> None:
    """Does nothing: its round trip is the cost of Celery itself."""
    return None


@shared_task(name="bench.variant")
def variant_task() -> str:
    """The variant this worker applied when it started."""
    return _VARIANT
