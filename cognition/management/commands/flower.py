"""Flower, Celery's monitor (workers, tasks, queues), only ever behind basic auth.

    FLOWER_BASIC_AUTH=user:password python manage.py flower [--port 5555] [--address 0.0.0.0]

Refuses to start without FLOWER_BASIC_AUTH (one or more `user:password`, comma-separated):
Flower shows task arguments and can shut workers down, so it is never served open. Flower reads
the variable itself; it is not put on a command line where `ps` would show it. Workers must send
task events (`celery worker -E`, as docker-compose.yml starts them) for Flower to show tasks.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

_USER_PASSWORD = re.compile(r"[^:,\s]+:[^,\s]+")


class Command(BaseCommand):
    help = "Start Flower behind the basic auth of FLOWER_BASIC_AUTH (refused without it)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=5555)
        parser.add_argument("--address", default="127.0.0.1")

    def handle(self, *args: Any, **options: Any) -> None:
        auth = os.environ.get("FLOWER_BASIC_AUTH", "")
        pairs = auth.split(",") if auth else []
        if not pairs or not all(_USER_PASSWORD.fullmatch(pair) for pair in pairs):
            raise CommandError(
                "FLOWER_BASIC_AUTH must be set to user:password (several comma-separated); "
                "Flower is never served without authentication."
            )
        celery = shutil.which("celery")
        if celery is None:
            raise CommandError("the celery program is not installed")
        os.execv(  # noqa: S606 - a fixed program and arguments, no shell
            celery,
            [
                celery,
                "-A",
                "config",
                "flower",
                f"--port={options['port']}",
                f"--address={options['address']}",
            ],
        )
