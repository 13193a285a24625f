"""Serve the MCP face of core.* over streamable HTTP (uvicorn).

    python manage.py serve_mcp [--host 127.0.0.1] [--port 8001]

Clients connect to http://HOST:PORT/mcp with `Authorization: Bearer <agent token>` (the token of
the REST API); see docs/operations.md.
"""

from __future__ import annotations

from typing import Any

import uvicorn
from django.core.management.base import BaseCommand, CommandParser

from cognition.mcp.server import mcp_app


class Command(BaseCommand):
    help = "Serve the core.* tools as an MCP server over streamable HTTP."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8001)

    def handle(self, *args: Any, **options: Any) -> None:
        uvicorn.run(
            mcp_app(host=options["host"]),
            host=options["host"],
            port=options["port"],
            log_config=None,  # the project's logging (settings.LOGGING)
        )
