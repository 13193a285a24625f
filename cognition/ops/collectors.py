"""Metrics read from the database when Prometheus scrapes (a few grouped counts, no rows).

What is pending or open now — runs by status, approvals and questions waiting and for how long,
deliveries not yet delivered — is the database's knowledge, so it is read at scrape time rather
than kept in counters a restart would lose. So are the totals the database already records:
schedule occurrences skipped (by reason).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cognition.models import (
    DeliveryState,
    ScheduleOccurrence,
    ScheduleOutcome,
    ScheduleSkipReason,
    SignalDelivery,
)
from runs.models import ApprovalRequest, ApprovalStatus, MotorRun, RunStatus, Trigger

#: delivery states reported (delivered and skipped only grow; they are not operators' concern)
DELIVERY_STATES = (
    DeliveryState.PENDING,
    DeliveryState.DELIVERING,
    DeliveryState.RETRYING,
    DeliveryState.FAILED,
)


def _age_s(since: datetime | None, now: datetime) -> float:
    return max(0.0, (now - since).total_seconds()) if since is not None else 0.0


class DatabaseCollector(Collector):
    """Gauges (and counter totals) from grouped counts of the runtime's tables."""

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        runs = GaugeMetricFamily(
            "motor_runs", "Runs by status and trigger.", labels=["status", "trigger"]
        )
        counts = {
            (row["status"], row["trigger"]): row["n"]
            for row in MotorRun.objects.order_by()
            .values("status", "trigger")
            .annotate(n=Count("id"))
        }
        # Every combination is exported, zeros included, so a series never disappears.
        for status in RunStatus.values:
            for trigger in Trigger.values:
                runs.add_metric([status, trigger], counts.get((status, trigger), 0))
        yield runs

        pending = ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING).aggregate(
            n=Count("id"), oldest=Min("created_at")
        )
        yield GaugeMetricFamily(
            "motor_approvals_pending", "Approval requests waiting for a decision.", pending["n"]
        )
        yield GaugeMetricFamily(
            "motor_approvals_pending_oldest_age_seconds",
            "Age of the oldest approval request waiting for a decision (0 when none).",
            _age_s(pending["oldest"], now),
        )

        waiting = MotorRun.objects.filter(status=RunStatus.AWAITING_INPUT).aggregate(
            n=Count("id"), oldest=Min("updated_at")
        )
        yield GaugeMetricFamily(
            "motor_awaiting_input_runs", "Runs waiting for the user's answer.", waiting["n"]
        )
        yield GaugeMetricFamily(
            "motor_awaiting_input_oldest_age_seconds",
            "How long the longest-waiting run has waited for an answer (0 when none).",
            _age_s(waiting["oldest"], now),
        )

        deliveries = GaugeMetricFamily(
            "motor_signal_deliveries",
            "Signal deliveries not delivered: pending, delivering, retrying, failed.",
            labels=["state"],
        )
        by_state = dict(
            SignalDelivery.objects.filter(state__in=DELIVERY_STATES)
            .order_by()
            .values_list("state")
            .annotate(n=Count("id"))
        )
        for state in DELIVERY_STATES:
            deliveries.add_metric([state], by_state.get(state, 0))
        yield deliveries

        skips = CounterMetricFamily(
            "motor_schedule_skips",
            "Scheduled occurrences that started no run, by reason (recorded occurrences).",
            labels=["reason"],
        )
        by_reason = dict(
            ScheduleOccurrence.objects.filter(outcome=ScheduleOutcome.SKIPPED)
            .order_by()
            .values_list("reason")
            .annotate(n=Count("id"))
        )
        for reason in ScheduleSkipReason.values:
            skips.add_metric([reason], by_reason.get(reason, 0))
        yield skips
