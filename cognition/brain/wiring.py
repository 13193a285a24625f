"""Connects the built-in brain at start-up (called from CognitionConfig.ready).

The brain listens through cognition.brain_hooks: signal delivery calls the hook once per
committed signal. Until a process has a delivery module (cognition.delivery) that calls the
hooks, the brain listens to runs.outbox.signal_committed itself, so it still wakes; the hook is
idempotent, so both paths together would still start one turn per signal.
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Any

logger = logging.getLogger(__name__)


def _on_signal_committed(sender: Any, *, signal_id: int, **_: Any) -> None:
    from .services import brain_wake

    try:
        brain_wake(signal_id)
    except Exception:  # a receiver must not raise into the emitter's commit
        logger.exception("brain wake for signal %s failed", signal_id)


def connect() -> None:
    from cognition.brain_hooks import register_brain_hook
    from runs.outbox import signal_committed

    from . import tasks  # noqa: F401 - registers the Celery task in every process
    from .services import BRAIN_HOOK_NAME, brain_wake

    register_brain_hook(BRAIN_HOOK_NAME, lambda signal_id: brain_wake(signal_id) and None)
    if importlib.util.find_spec("cognition.delivery") is None:
        signal_committed.connect(
            _on_signal_committed, dispatch_uid="cognition.brain.signal_committed"
        )
