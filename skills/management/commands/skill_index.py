"""manage.py skill_index — rebuild the skill index, embed what is missing, search it."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from skills.index import embeddings, vectors
from skills.index.search import SkillSearchQueryInvalid, skill_search
from skills.index.store import index_rebuild


class Command(BaseCommand):
    help = (
        "Maintain the skill index: --rebuild re-indexes every skill's current version, "
        "--vectors adds pgvector's column on PostgreSQL once the extension is installed, "
        "--embed computes the embeddings that are missing or stale (EMBEDDINGS_MODEL set), "
        "--search QUERY prints the ranked hits with their scores (every skill, as staff)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--rebuild", action="store_true")
        parser.add_argument("--vectors", action="store_true")
        parser.add_argument("--embed", action="store_true")
        parser.add_argument("--search", metavar="QUERY")
        parser.add_argument("-k", type=int, default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        if not any(options[o] for o in ("rebuild", "vectors", "embed")) and (
            options["search"] is None
        ):
            raise CommandError("Say what to do: --rebuild, --vectors, --embed or --search QUERY.")
        if options["vectors"]:
            if not vectors.vector_column_ensure():
                raise CommandError(
                    "pgvector is not installed on this PostgreSQL server "
                    "(install postgresql-<major>-pgvector; bin/setup-host does it locally)."
                )
            self.stdout.write("vector column ready")
        if options["rebuild"]:
            self.stdout.write(f"indexed {index_rebuild()} skills")
        if options["embed"]:
            if not embeddings.configured():
                raise CommandError("EMBEDDINGS_MODEL is not set: there is nothing to embed with.")
            self.stdout.write(f"embedded {embeddings.embeddings_refresh()} skills")
        if options["search"] is not None:
            try:
                result = skill_search(query=options["search"], agent=None, k=options["k"])
            except SkillSearchQueryInvalid as exc:
                raise CommandError(exc.describe()) from exc
            self.stdout.write(f"mode {result.mode} ({result.took_ms:.1f} ms)")
            for rank, hit in enumerate(result.hits, start=1):
                self.stdout.write(f"{rank:>3}. {hit.score:.4f}  {hit.name} v{hit.version}")
