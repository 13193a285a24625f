"""Celery entry points of SkillForge. Thin: take ids, call one service, return."""

from __future__ import annotations

from celery import shared_task


@shared_task(
    name="forge.advance",
    acks_late=True,
    # Safe because a slice is idempotent per state: it reads the flow from the database, holds
    # a fenced lease, and records its outcome only while that lease is the newest. A worker
    # killed mid-slice gets the message redelivered; the redelivered slice takes the dead
    # holder's lease over and does the state's work again.
    reject_on_worker_lost=True,
    ignore_result=True,
)
def forge_advance_task(flow_id: str) -> str:
    """Advance one flow by one slice; a missing, waiting or finished flow is a no-op."""
    from forge.steps import flow_advance

    return flow_advance(flow_id=flow_id)


@shared_task(name="forge.reap", ignore_result=True)
def forge_reap_task() -> list[str]:
    """Periodic (celery-beat): wake flows whose wake-up was lost or whose holder died, and
    flows waiting for credentials (they resume by themselves once those are set)."""
    from forge.reaper import forge_reap

    return forge_reap()


@shared_task(
    name="forge.probe_version", acks_late=True, reject_on_worker_lost=True, ignore_result=True
)
def forge_probe_version_task(version_id: int) -> str:
    """Probe a new MCP skill version for its review (idempotent: a probed version is skipped)."""
    from forge.version_probe import version_probe

    return version_probe(version_id=version_id)
