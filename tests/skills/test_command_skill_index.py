"""manage.py skill_index: rebuild, vectors, embed and search."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from skills.bundle import bundle_from_files
from skills.index.models import SkillEmbedding, SkillIndexEntry
from skills.install import skill_install_bundle
from skills.services import Actor

pytestmark = pytest.mark.django_db


def install(name: str, description: str) -> None:
    text = f"---\nname: {name}\ndescription: {description}\n---\n# Steps\n"
    bundle = bundle_from_files({"SKILL.md": text.encode()}, dir_name=name)
    skill_install_bundle(bundle=bundle, actor=Actor.system("test"))


def run(*args: str) -> str:
    out = StringIO()
    call_command("skill_index", *args, stdout=out)
    return out.getvalue()


def test_rebuild_reindexes_every_skill_and_search_prints_the_ranking(db) -> None:
    install("csv-summary", "Summarize a CSV file.")
    install("csv-export", "Export a table.")
    SkillIndexEntry.objects.all().delete()
    assert run("--rebuild") == "indexed 2 skills\n"
    assert SkillIndexEntry.objects.count() == 2
    lines = run("--search", "summarize csv").splitlines()
    assert lines[0].startswith("mode lexical (")
    assert [line.split()[2] for line in lines[1:]] == ["csv-summary", "csv-export"]
    assert lines[1].startswith("  1. ") and lines[1].endswith("csv-summary v1")
    assert len(run("--search", "csv", "-k", "1").splitlines()) == 2


def test_refusals_name_what_is_wrong(db, settings) -> None:
    with pytest.raises(CommandError, match="Say what to do"):
        run()
    with pytest.raises(CommandError, match="query-empty"):
        run("--search", "  ")
    settings.EMBEDDINGS_MODEL = ""
    with pytest.raises(CommandError, match="EMBEDDINGS_MODEL is not set"):
        run("--embed")


def test_embed_stores_what_is_missing_and_vectors_is_ready(embeddings_stub) -> None:
    install("csv-summary", "Summarize a CSV file.")  # no on_commit here: nothing embedded yet
    assert SkillEmbedding.objects.count() == 0
    assert run("--vectors") == "vector column ready\n"
    assert run("--embed") == "embedded 1 skills\n"
    assert run("--embed") == "embedded 0 skills\n"
    assert SkillEmbedding.objects.count() == 1
