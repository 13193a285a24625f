"""Follow a run as it happens, through the API (never the database).

    python manage.py follow_run RUN_ID [--url URL] [--token TOKEN] [--agent NAME]
    python manage.py follow_run --agent NAME --last

Prints each tool call (tool, arguments, duration, outcome) as it is recorded, a live progress
line on a terminal (iteration n/max, elapsed time, the agent's energy), asks the run's question
or approval on the terminal and sends what the user types, and exits with the run's outcome:
0 completed, 1 failed, 2 cancelled, 3 when the run cannot be followed. The token (an agent's
mc_… or a person's mcp_…) comes from --token or MOTOR_TOKEN, the URL from --url or MOTOR_URL.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import httpx
from django.core.management.base import BaseCommand, CommandParser

from cognition.ops.follow import FOLLOW_ERROR, Follower, FollowError, latest_run_id


class Command(BaseCommand):
    help = "Follow a run's steps live through the API and answer its questions."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", nargs="?", help="The run (or --last).")
        parser.add_argument("--last", action="store_true", help="The agent's newest run.")
        parser.add_argument("--agent", help="The agent's name (a person's token acting for it).")
        parser.add_argument(
            "--url", default=os.environ.get("MOTOR_URL", "http://127.0.0.1:8000"), help="Base URL."
        )
        parser.add_argument(
            "--token", default=os.environ.get("MOTOR_TOKEN", ""), help="API token (MOTOR_TOKEN)."
        )
        parser.add_argument("--no-input", action="store_true", help="Never prompt; only follow.")

    def handle(self, *args: Any, **options: Any) -> None:
        # the terminal shows the run, not every HTTP request the client makes
        logging.getLogger("httpx").setLevel(logging.WARNING)
        if bool(options["run_id"]) == bool(options["last"]):
            self.stderr.write("Name a run id, or --last (with --agent for a person's token).")
            sys.exit(FOLLOW_ERROR)
        if not options["token"]:
            self.stderr.write("A token is needed: --token or MOTOR_TOKEN (mc_… or mcp_…).")
            sys.exit(FOLLOW_ERROR)
        client = httpx.Client(
            base_url=options["url"].rstrip("/"),
            headers={"Authorization": f"Bearer {options['token']}"},
            timeout=30.0,
        )
        try:
            run_id = options["run_id"] or latest_run_id(client, agent=options["agent"])
            follower = Follower(
                client=client,
                run_id=run_id,
                out=self.stdout._out,  # the real stream: the progress line rewrites itself
                stdin=None if options["no_input"] else sys.stdin,
                agent=options["agent"],
            )
            code = follower.follow()
        except FollowError as exc:
            self.stderr.write(f"Cannot follow the run: {exc}")
            code = FOLLOW_ERROR
        except KeyboardInterrupt:
            code = FOLLOW_ERROR
        finally:
            client.close()
        sys.exit(code)
