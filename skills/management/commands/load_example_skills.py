"""manage.py load_example_skills [--agent NAME] — idempotent."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from skills.errors import SkillError
from skills.imports import skill_import_directory
from skills.management.commands._common import agent_by_name, describe
from skills.services import Actor


class Command(BaseCommand):
    help = (
        "Load the example skills shipped in skills/examples/. Running it again changes nothing "
        "unless the examples changed. With --agent, that agent gets pending_review policies "
        "proposed by each example's policy.json (approval stays with a human)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--agent", help="agent whose policies receive the examples")

    def handle(self, *args: object, **options: object) -> None:
        agent = agent_by_name(options.get("agent"))  # type: ignore[arg-type]
        try:
            # The examples ship with the project: one of them refused is a defect to surface.
            report = skill_import_directory(
                path=settings.MOTOR_EXAMPLE_SKILLS_DIR,
                actor=Actor.system("examples"),
                agent=agent,
                all_or_nothing=True,
            )
        except SkillError as exc:
            raise CommandError(exc.describe()) from exc
        for result in report.installed:
            self.stdout.write(describe(result))
