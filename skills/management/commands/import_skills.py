"""manage.py import_skills <directory-or-archive> [--agent NAME] [--all-or-nothing]"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from skills.errors import SkillError
from skills.imports import skill_import_archive, skill_import_directory
from skills.management.commands._common import agent_by_name, describe
from skills.services import Actor

ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar")


class Command(BaseCommand):
    help = (
        "Import skills from a skill directory, a directory of skill directories (hidden ones "
        "included, at any depth), or a .zip / .tar.gz archive. Each valid skill is installed "
        "and each invalid one is listed on stderr with its file and rule; with "
        "--all-or-nothing any problem refuses the whole import. Imported content is "
        "pending_review for --agent (no policy is created without it) and nothing in it is "
        "executed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("source", help="skill directory, tree of skill directories, or archive")
        parser.add_argument("--agent", help="agent whose policy receives the skills")
        parser.add_argument(
            "--all-or-nothing",
            action="store_true",
            help="import nothing when any skill is refused",
        )

    def handle(self, *args: object, **options: object) -> None:
        source = Path(str(options["source"]))
        agent = agent_by_name(options.get("agent"))  # type: ignore[arg-type]
        actor = Actor.system("import")
        all_or_nothing = bool(options.get("all_or_nothing"))
        try:
            if source.is_file() and source.name.lower().endswith(ARCHIVE_SUFFIXES):
                report = skill_import_archive(
                    data=source.read_bytes(),
                    filename=source.name,
                    actor=actor,
                    agent=agent,
                    all_or_nothing=all_or_nothing,
                )
            elif source.is_dir():
                report = skill_import_directory(
                    path=source, actor=actor, agent=agent, all_or_nothing=all_or_nothing
                )
            else:
                raise CommandError(
                    f"{source} is neither a directory nor an archive ({', '.join(ARCHIVE_SUFFIXES)})."
                )
        except SkillError as exc:
            raise CommandError(exc.describe()) from exc
        for result in report.installed:
            self.stdout.write(describe(result))
        for refusal in report.refused:
            self.stderr.write(f"refused {refusal.where}: {refusal.describe()}")
