"""deploy/grafana/motor-cortex.json: a valid dashboard whose queries name only metrics that
GET /metrics exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.test import Client
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from runs import metrics as runtime_metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "motor-cortex.json"
TOKEN = "grafana-test-token-5d2e"  # noqa: S105 - test data
METRIC_NAME = re.compile(r"\b((?:motor|django)_[a-z0-9_]+)\b")


def _expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        target["expr"]
        for panel in dashboard["panels"]
        if panel["type"] != "row"
        for target in panel["targets"]
    ]


def test_the_dashboard_is_json_with_a_prometheus_datasource_and_unique_panel_ids() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "motor-cortex"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    (variable,) = dashboard["templating"]["list"]
    assert (variable["type"], variable["query"]) == ("datasource", "prometheus")
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}"
            assert panel["targets"], panel["title"]
    assert len(_expressions()) >= 20


def _observe_every_runtime_metric() -> None:
    """One sample in every labelled series family of runs.metrics (a family with labels is
    exported only once some series of it has a value)."""
    for metric in vars(runtime_metrics).values():
        if not isinstance(metric, MetricWrapperBase):
            continue
        labels = metric._labelnames
        series = metric.labels(*(["test"] * len(labels))) if labels else metric
        if hasattr(series, "observe"):
            series.observe(0.0)
        elif hasattr(series, "inc"):
            series.inc(0)
        else:
            series.set(0)


@pytest.mark.django_db
def test_every_metric_the_dashboard_queries_is_exported(client: Client, settings) -> None:
    settings.MOTOR_METRICS_TOKEN = TOKEN
    _observe_every_runtime_metric()
    client.get("/healthz")  # a request for django-prometheus to count
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    exported = {
        sample.name
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }
    referenced = {name for expr in _expressions() for name in METRIC_NAME.findall(expr)}
    assert len(referenced) >= 18
    assert sorted(referenced - exported) == []
