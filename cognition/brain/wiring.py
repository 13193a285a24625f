"""Connects the built-in brain at start-up (called from CognitionConfig.ready).

The brain listens through cognition.brain_hooks: signal delivery (cognition.delivery) calls the
hook once per committed signal from a Celery task, at least once. The hook records a BrainWake
and queues the brain's own high-priority wake-up task; a repeat delivery is a no-op.
"""

from __future__ import annotations


def connect() -> None:
    from cognition.brain_hooks import register_brain_hook

    from . import tasks  # noqa: F401 - registers the Celery task in every process
    from .waking import BRAIN_HOOK_NAME, brain_wake

    def hook(signal_id: int) -> None:
        brain_wake(signal_id)

    register_brain_hook(BRAIN_HOOK_NAME, hook)
