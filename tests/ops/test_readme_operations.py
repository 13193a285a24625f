"""The README's operations section shows what the service really exports and prints: the metrics
list is exactly the exported motor_* families, the log lines are JSON objects with the bound
fields, the health answers have the endpoints' shape, and the follow_run lines are those the
command prints."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from cognition.ops.follow import step_line

from .test_grafana import _observe_every_runtime_metric

README = Path(__file__).resolve().parents[2] / "README.md"
TOKEN = "readme-test-token-0a9b"  # noqa: S105 - test data


def _section() -> str:
    text = README.read_text()
    return text[text.index("## Operations\n") : text.index("\n## ", text.index("## Operations"))]


def _blocks(kind: str) -> list[str]:
    blocks = re.findall(r"^```(\w*)\n(.*?)^```$", _section(), flags=re.S | re.M)
    return [body for language, body in blocks if language == kind]


@pytest.mark.django_db
def test_the_metrics_list_is_exactly_what_the_endpoint_exports(client: Client, settings) -> None:
    settings.MOTOR_METRICS_TOKEN = TOKEN
    _observe_every_runtime_metric()
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    exported = {
        family.name + ("_total" if family.type == "counter" else "")
        for family in text_string_to_metric_families(response.content.decode())
        if family.name.startswith("motor_")
    }
    (listing,) = [block for block in _blocks("") if "motor_runs{" in block]
    listed = set(re.findall(r"\b(motor_[a-z_]+)", listing))
    assert sorted(listed) == sorted(exported)


def test_the_log_lines_are_json_with_the_bound_fields() -> None:
    (block,) = _blocks("json")
    task_line, request_line = (json.loads(line) for line in block.strip().splitlines())
    common = {"event", "level", "logger", "timestamp", "host"}
    assert common | {"run_id", "agent", "skill", "attempt", "iteration", "step"} <= set(task_line)
    assert common | {"request_id"} <= set(request_line)


def test_the_health_answers_have_the_endpoints_shape(client: Client) -> None:
    (console,) = [block for block in _blocks("console") if "/healthz" in block]
    lines = console.strip().splitlines()
    assert lines[0] == "$ curl -s http://127.0.0.1:8000/healthz"
    assert json.loads(lines[1]) == client.get("/healthz").json()
    ready = json.loads(lines[3])
    assert ready["status"] == "ok"
    assert sorted(ready["checks"]) == ["broker", "database", "migrations", "mutex", "sandbox"]
    assert all(set(check) == {"ok", "detail", "duration_ms"} for check in ready["checks"].values())


def test_the_follow_run_step_line_is_the_one_the_command_prints() -> None:
    (console,) = [block for block in _blocks("console") if "follow_run" in block]
    (shown,) = [line for line in console.splitlines() if line.startswith("[attempt")]
    printed = step_line(
        {
            "attempt_number": 1,
            "iteration": 2,
            "tool": "write",
            "arguments": {"path": "city.txt", "content": "Berlin"},
            "state": "done",
            "ok": True,
            "duration_ms": 9,
            "output_excerpt": "wrote 6 bytes to city.txt",
        }
    )
    assert shown == printed
