"""Health check of the Celery worker on this host, for compose and Kubernetes probes.

    python manage.py worker_health [--name celery@HOST] [--timeout 5] [--no-ping]

Exit status 0 when the worker's readiness checks pass (database, migrations, broker, mutex,
sandbox backend) and the worker answers a ping through the broker; 1 otherwise. Prints the checks
as one JSON object.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from cognition.ops.health import CheckResult, readiness, readiness_body


def worker_ping(*, name: str, timeout_s: float) -> CheckResult:
    """Ask the worker `name` for a pong over the broker's control channel."""
    from config.celery import app

    started = time.monotonic()
    try:
        replies = app.control.ping(destination=[name], timeout=timeout_s) or []
    except Exception as exc:  # a broker that cannot be reached is a failed ping
        return CheckResult(
            "worker", False, f"{exc.__class__.__name__}", (time.monotonic() - started) * 1000
        )
    answered = any(name in reply for reply in replies)
    detail = f"{name} answers" if answered else f"{name} did not answer within {timeout_s:g} s"
    return CheckResult("worker", answered, detail, (time.monotonic() - started) * 1000)


class Command(BaseCommand):
    help = "Check the Celery worker of this host: readiness, sandbox backend and a ping."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--name",
            default=f"celery@{socket.gethostname()}",
            help="The worker's node name (default: celery@<this host>).",
        )
        parser.add_argument(
            "--timeout", type=float, default=5.0, help="Seconds to wait for the ping's answer."
        )
        parser.add_argument(
            "--no-ping", action="store_true", help="Only the readiness checks (no ping)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        results = readiness(worker=True)
        if not options["no_ping"]:
            results.append(worker_ping(name=options["name"], timeout_s=options["timeout"]))
        body = readiness_body(results)
        self.stdout.write(json.dumps(body, sort_keys=True))
        if body["status"] != "ok":
            sys.exit(1)
