"""manage.py import_skills <directory-or-archive> [--agent NAME] [--all-or-nothing]
[--source SOURCE] [--rename OLD=NEW ...]"""

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
        "--all-or-nothing any problem refuses the whole import. A skill whose name is "
        "installed from another source is refused unless given a new name with --rename. "
        "Imported content is pending_review for --agent (no policy is created without it) and "
        "nothing in it is executed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="skill directory, tree of skill directories, or archive")
        parser.add_argument("--agent", help="agent whose policy receives the skills")
        parser.add_argument(
            "--all-or-nothing",
            action="store_true",
            help="import nothing when any skill is refused",
        )
        parser.add_argument(
            "--source",
            help="where the skills come from (a registry URL, a publisher); default: the "
            "directory's absolute path or the archive's file name. A skill is a new version of "
            "an installed one only when both come from the same source.",
        )
        parser.add_argument(
            "--rename",
            action="append",
            default=[],
            metavar="OLD=NEW",
            help="install the skill named OLD under the name NEW (repeatable)",
        )

    def handle(self, *args: object, **options: object) -> None:
        path = Path(str(options["path"]))
        agent = agent_by_name(options.get("agent"))  # type: ignore[arg-type]
        actor = Actor.system("import")
        all_or_nothing = bool(options.get("all_or_nothing"))
        source = options.get("source")
        renames = _renames(options.get("rename") or [])  # type: ignore[arg-type]
        try:
            if path.is_file() and path.name.lower().endswith(ARCHIVE_SUFFIXES):
                report = skill_import_archive(
                    data=path.read_bytes(),
                    filename=path.name,
                    actor=actor,
                    agent=agent,
                    all_or_nothing=all_or_nothing,
                    source=source,  # type: ignore[arg-type]
                    renames=renames,
                )
            elif path.is_dir():
                report = skill_import_directory(
                    path=path,
                    actor=actor,
                    agent=agent,
                    all_or_nothing=all_or_nothing,
                    source=source,  # type: ignore[arg-type]
                    renames=renames,
                )
            else:
                raise CommandError(
                    f"{path} is neither a directory nor an archive ({', '.join(ARCHIVE_SUFFIXES)})."
                )
        except SkillError as exc:
            raise CommandError(exc.describe()) from exc
        for result in report.installed:
            self.stdout.write(describe(result))
        for refusal in report.refused:
            self.stderr.write(f"refused {refusal.where}: {refusal.describe()}")


def _renames(pairs: list[str]) -> dict[str, str]:
    """``OLD=NEW`` pairs as a mapping; a malformed or repeated OLD is a command error."""
    out: dict[str, str] = {}
    for pair in pairs:
        old, sep, new = pair.partition("=")
        if not sep or not old or not new:
            raise CommandError(f"--rename takes OLD=NEW, not {pair!r}.")
        if old in out:
            raise CommandError(f"--rename names {old!r} twice.")
        out[old] = new
    return out
