"""The few lines bin/dev prints once everything is up: where to go, how to log in, what is set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from cognition.management.commands.bootstrap_dev import login_file


def llm_line() -> str:
    """Which LLM endpoint and models are configured (never the key), or how to configure one."""
    if not settings.LLM_BASE_URL:
        return (
            "not configured: set LLM_BASE_URL and LLM_API_KEY (environment or .env); the chat "
            "and runs need an OpenAI-compatible endpoint"
        )
    default = settings.LLM_DEFAULT_MODEL
    fast = settings.LLM_FAST_MODEL or default
    smart = settings.LLM_SMART_MODEL or default
    motor = settings.LLM_MOTOR_MODEL or fast
    key = "API key set" if settings.LLM_API_KEY else "no API key"
    return f"{settings.LLM_BASE_URL} ({key}; models: fast {fast}, smart {smart}, motor {motor})"


class Command(BaseCommand):
    help = "Print the summary of a running development instance (used by bin/dev)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", required=True, help="base URL of the web server")
        parser.add_argument("--logs", required=True, help="directory of the services' logs")

    def handle(self, *args: Any, **options: Any) -> None:
        url = options["url"].rstrip("/")
        logs = Path(options["logs"])
        login = login_file()
        username, password = login.read_text().split("\n")[:2]
        log_names = ", ".join(sorted(p.name for p in logs.glob("*.log")))
        lines = [
            "",
            "Motor Cortex is running.",
            f"  Home:      {url}/",
            f"  Chat:      {url}/chat/",
            f"  Admin:     {url}/admin/",
            f"  API docs:  {url}/api/docs/",
            f"  Login:     {username} / {password}   (also in {login})",
            f"  LLM:       {llm_line()}",
            f"  Logs:      {logs}/ ({log_names})",
            "  Stop:      Ctrl-C",
            "",
        ]
        self.stdout.write("\n".join(lines))
