"""manage.py import_skills <directory-or-archive> [--agent NAME]"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from skills.errors import SkillError
from skills.management.commands._common import agent_by_name, describe
from skills.services import Actor, skill_import_archive, skill_import_directory

ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar")


class Command(BaseCommand):
    help = (
        "Import skills from a skill directory, a directory of skill directories, or a .zip / "
        ".tar.gz archive. Everything is validated first; on any problem nothing is imported. "
        "Imported content is pending_review for --agent (no policy is created without it) "
        "and nothing in it is executed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("source", help="skill directory, tree of skill directories, or archive")
        parser.add_argument("--agent", help="agent whose policy receives the skills")

    def handle(self, *args: object, **options: object) -> None:
        source = Path(str(options["source"]))
        agent = agent_by_name(options.get("agent"))  # type: ignore[arg-type]
        actor = Actor.system("import")
        try:
            if source.is_file() and source.name.lower().endswith(ARCHIVE_SUFFIXES):
                results = skill_import_archive(
                    data=source.read_bytes(), filename=source.name, actor=actor, agent=agent
                )
            elif source.is_dir():
                results = skill_import_directory(path=source, actor=actor, agent=agent)
            else:
                raise CommandError(
                    f"{source} is neither a directory nor an archive ({', '.join(ARCHIVE_SUFFIXES)})."
                )
        except SkillError as exc:
            raise CommandError(exc.describe()) from exc
        for result in results:
            self.stdout.write(describe(result))
