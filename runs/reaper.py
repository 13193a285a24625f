"""Periodic repair of runs: waking runs whose wake-up was lost, timing out unanswered questions
and approvals, and re-announcing pending questions when the service starts.
"""

from __future__ import annotations

import socket
from datetime import datetime, timedelta
from typing import Any, TypedDict

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from runs.finishing import run_finish_failed
from runs.lease import owner_is_dead
from runs.models import (
    ApprovalRequest,
    ApprovalStatus,
    Attempt,
    FailureCategory,
    MotorRun,
    RunStatus,
)
from runs.records import attempt_lock_current, motor_result_emit, run_lock, run_wake


class ReapReport(TypedDict):
    woken: list[str]
    timed_out: list[str]


def run_reap(*, actor: str = "reaper") -> ReapReport:
    """Periodic repair: wake runs whose wake-up message was lost, time out unanswered questions.

    A run in created/running with no holder for MOTOR_REAPER_GRACE_SECONDS, with an expired
    lease, or with a lease held by a dead process of this host, gets a new message for its
    current token (unless it is paused for its snapshot storage: runs.host_watch wakes those) (a duplicate of a merely queued message is
    dropped by the token check). A run awaiting input longer than
    MOTOR_AWAITING_INPUT_TIMEOUT_SECONDS fails with "User response timeout"; a pending approval
    past its expiry is expired and its run fails with "Approval timeout".
    """
    now = timezone.now()
    grace = timedelta(seconds=int(getattr(settings, "MOTOR_REAPER_GRACE_SECONDS", 120)))
    runnable = MotorRun.objects.filter(status__in=[RunStatus.CREATED, RunStatus.RUNNING])
    stalled = runnable.filter(
        Q(lease_expires_at__isnull=True, idle_since__lt=now - grace) | Q(lease_expires_at__lt=now)
    ).exclude(
        # paused for its snapshot storage: the hosts' heartbeats wake it once the store answers
        # (runs.host_watch), so it does not spend a slice retrying every grace period
        placement__paused_at__isnull=False
    )
    woken: list[str] = []
    for run_id, token in stalled.values_list("id", "lease_token"):
        run_wake(run_id, token)
        woken.append(run_id)
    # A live lease held by a process of this host that no longer exists (a threads worker killed
    # with all its slices: no parent process is left to hand their messages back): wake the run
    # now rather than after the lease's expiry; the slice takes over from the dead owner.
    held_here = runnable.filter(
        lease_expires_at__gte=now, lease_owner__startswith=f"{socket.gethostname()}:"
    )
    for run_id, token, holder in held_here.values_list("id", "lease_token", "lease_owner"):
        if owner_is_dead(holder):
            run_wake(run_id, token)
            woken.append(run_id)

    timeout = timedelta(
        seconds=int(getattr(settings, "MOTOR_AWAITING_INPUT_TIMEOUT_SECONDS", 30 * 60))
    )
    timed_out: list[str] = []
    waiting = MotorRun.objects.filter(
        status=RunStatus.AWAITING_INPUT, updated_at__lt=now - timeout
    ).values_list("id", flat=True)
    for run_id in waiting:
        with transaction.atomic():
            run = run_lock(run_id)
            if run.status != RunStatus.AWAITING_INPUT or run.updated_at >= now - timeout:
                continue  # answered meanwhile
            run_finish_failed(
                run,
                attempt_lock_current(run),
                category=FailureCategory.TIMEOUT,
                message="User response timeout",
                retryable=True,
                actor=actor,
            )
            # Fence anything that might still hold an old token for this run.
            MotorRun.objects.filter(pk=run.pk).update(lease_token=F("lease_token") + 1)
        timed_out.append(run_id)
    for approval_id, run_id in ApprovalRequest.objects.filter(
        status=ApprovalStatus.PENDING, expires_at__lt=now
    ).values_list("id", "run_id"):
        with transaction.atomic():
            run = run_lock(run_id)
            approval = ApprovalRequest.objects.select_for_update().get(pk=approval_id)
            if approval.status != ApprovalStatus.PENDING:
                continue  # decided meanwhile
            approval.expire(at=now, by="reaper")
            approval.save(update_fields=["status", "decided_at", "decided_by"])
            if run.status == RunStatus.AWAITING_APPROVAL:
                run_finish_failed(
                    run,
                    attempt_lock_current(run),
                    category=FailureCategory.TIMEOUT,
                    message="Approval timeout",
                    retryable=True,
                    actor=actor,
                )
        timed_out.append(run_id)
    return {"woken": woken, "timed_out": timed_out}


def run_reemit_pending_questions(
    *, actor: str = "startup", asked_before: datetime | None = None
) -> list[int]:
    """Write a fresh awaiting_input signal for every run still waiting for an answer.

    Called when the service starts, so a brain that missed the first signal asks again; with
    `asked_before`, only for runs that have been waiting since before that time (a question
    asked later was signalled by the running service). Returns the new signal ids.
    """
    ids: list[int] = []
    waiting = MotorRun.objects.filter(status=RunStatus.AWAITING_INPUT)
    if asked_before is not None:
        # a run's updated_at is stamped when it starts waiting, and not again until it resumes
        waiting = waiting.filter(updated_at__lt=asked_before)
    for run in waiting.order_by("created_at"):
        attempt = Attempt.objects.get(run=run, index=run.current_attempt_index)
        payload: dict[str, Any] = {
            "run_id": run.id,
            "status": RunStatus.AWAITING_INPUT,
            "question": attempt.pending_question,
        }
        if run.missing_credentials:
            payload["missing_credentials"] = list(run.missing_credentials)
        with transaction.atomic():
            signal = motor_result_emit(run, payload)
        ids.append(signal.id)
    return ids
