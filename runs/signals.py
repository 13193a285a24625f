"""Celery signal handlers of the runtime (connected in RunsConfig.ready)."""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import (
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)

logger = logging.getLogger(__name__)


@worker_ready.connect(dispatch_uid="runs.reemit_pending_questions_on_worker_ready")
def reemit_pending_questions_on_worker_ready(sender: Any = None, **_: Any) -> None:
    """Once per worker start: queue the re-signalling of runs still waiting for an answer.

    Queued rather than run here, so a slow database never delays the worker's readiness, and so
    it runs under the worker's normal task handling (retries, logging).
    """
    from django.utils import timezone

    from runs.tasks import run_reemit_pending_questions_task

    try:
        # Only questions asked before this worker was ready: a question asked since (by this
        # worker's own runs, say) had its signal emitted by a running system a moment ago.
        run_reemit_pending_questions_task.apply_async(args=[timezone.now().isoformat()])
    except Exception:  # noqa: BLE001 - a broker hiccup must not stop the worker from starting
        logger.exception("could not queue the re-emission of pending questions")


@worker_ready.connect(dispatch_uid="runs.reap_on_worker_ready")
def reap_on_worker_ready(sender: Any = None, **_: Any) -> None:
    """Once per worker start: queue a reaper pass, so runs whose slices died with a previous
    worker process on this host (a killed threads worker) resume now, not after their lease."""
    from runs.tasks import run_reap_task

    try:
        run_reap_task.apply_async()
    except Exception:  # noqa: BLE001 - a broker hiccup must not stop the worker from starting
        logger.exception("could not queue a reaper pass")


@worker_ready.connect(dispatch_uid="runs.warm_runtime_on_worker_ready")
@worker_process_init.connect(dispatch_uid="runs.warm_runtime_on_worker_process_init")
def warm_runtime_on_worker_start(sender: Any = None, **_: Any) -> None:
    """Once per worker process (the main one of a threads worker, each prefork child): load
    what the first slice would otherwise load while a run waits on it."""
    from runs.services import runtime_warm

    try:
        runtime_warm()
    except Exception:  # noqa: BLE001 - the first slice loads it again and reports any error
        logger.exception("could not load the runtime ahead of the first run")


@worker_ready.connect(dispatch_uid="runs.sandbox_pool_on_worker_ready")
@worker_process_init.connect(dispatch_uid="runs.sandbox_pool_on_worker_process_init")
def sandbox_pool_on_worker_start(sender: Any = None, **_: Any) -> None:
    """Once per worker process that runs slices (the main one of a threads or solo worker, each
    prefork child, never a prefork parent): start its spare sandboxes (MOTOR_SANDBOX_POOL_SIZE),
    so its first run's first call does not wait for one."""
    from runs.sessions import session_pool_start

    controller = getattr(sender, "controller", None)
    pool_cls = getattr(controller, "pool_cls", "")
    name = pool_cls if isinstance(pool_cls, str) else getattr(pool_cls, "__module__", "")
    if "prefork" in name:
        return  # the children, which run the slices, start their own (worker_process_init)

    session_pool_start()


@worker_shutdown.connect(dispatch_uid="runs.sandbox_pool_on_worker_shutdown")
@worker_process_shutdown.connect(dispatch_uid="runs.sandbox_pool_on_worker_process_shutdown")
def sandbox_pool_on_worker_stop(sender: Any = None, **_: Any) -> None:
    """A worker process that ends closes its spare sandboxes (uid leases returned, slots
    removed) instead of leaving them to the next start's sweep."""
    from runs.sessions import session_pool_stop

    try:
        session_pool_stop()
    except Exception:  # noqa: BLE001 - the sandboxes die with the process anyway
        logger.exception("closing the sandbox pool failed")
