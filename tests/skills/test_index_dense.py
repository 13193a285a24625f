"""Dense retrieval through a real HTTP OpenAI-compatible embeddings endpoint (the local stub),
stored with pgvector on PostgreSQL and compared in process on SQLite, fused with BM25 by
reciprocal rank fusion; lexical search alone whenever the endpoint fails."""

from __future__ import annotations

import math

import pytest
from django.db import connection

from config.celery import app as celery_app
from skills.bundle import bundle_from_files
from skills.index.embeddings import embeddings_refresh
from skills.index.models import SkillEmbedding, SkillIndexEntry
from skills.index.search import RRF_K, skill_search
from skills.install import skill_install_bundle
from skills.services import Actor
from tests.fixtures.embeddings import vector

pytestmark = pytest.mark.django_db

ACTOR = Actor.system("test")


def install(name: str, description: str, body: str = "# Steps\n"):
    text = f"---\nname: {name}\ndescription: {description}\n---\n{body}"
    bundle = bundle_from_files({"SKILL.md": text.encode()}, dir_name=name)
    return skill_install_bundle(bundle=bundle, actor=ACTOR)


def stored_vector(name: str) -> list[float] | None:
    row = SkillEmbedding.objects.get(entry__skill__name=name)
    if connection.vendor == "postgresql":
        assert row.vector_json is None
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT embedding::text FROM skills_skillembedding WHERE id = %s", [row.pk]
            )
            text = cursor.fetchone()[0]
        return None if text is None else [float(x) for x in text.strip("[]").split(",")]
    return row.vector_json


@pytest.fixture
def eager():
    """The embedding task runs in this process when queued (its worker's part, played here)."""
    before = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = before


@pytest.fixture
def library(embeddings_stub, eager, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        install("uptime-checker", "Check whether an HTTP endpoint is up.")
        install("exchange-rates", "Fetch currency exchange rates.")
        install("csv-summary", "Summarize a CSV file.")
    return embeddings_stub


def test_each_install_stores_a_normalised_vector_of_its_document(library) -> None:
    for name in ("uptime-checker", "exchange-rates", "csv-summary"):
        entry = SkillIndexEntry.objects.get(skill__name=name)
        expected = vector(entry.document)
        norm = math.sqrt(sum(x * x for x in expected))
        got = stored_vector(name)
        assert got == pytest.approx([x / norm for x in expected], abs=1e-6)
        row = SkillEmbedding.objects.get(entry=entry)
        assert (row.model, row.dims, row.text_hash) == ("stub-embed", 32, entry.text_hash)
    # the documents went to the endpoint, one request per install, with the configured model
    assert [r["model"] for r in library.requests] == ["stub-embed"] * 3


def test_a_paraphrase_no_word_of_which_is_indexed_is_found_by_the_dense_half(library) -> None:
    result = skill_search(query="is my website alive", agent=None, k=3)
    assert result.mode == "hybrid"
    top = result.hits[0]
    assert (top.name, top.lexical_rank, top.lexical_score, top.dense_rank) == (
        "uptime-checker",
        None,
        None,
        1,
    )
    assert top.score == pytest.approx(1 / (RRF_K + 1))
    assert top.dense_score > result.hits[1].dense_score


def test_a_skill_first_in_both_rankings_gets_both_reciprocal_ranks(library) -> None:
    result = skill_search(query="currency exchange rates", agent=None, k=3)
    top = result.hits[0]
    assert (top.name, top.lexical_rank, top.dense_rank) == ("exchange-rates", 1, 1)
    assert top.score == pytest.approx(2 / (RRF_K + 1))
    assert top.lexical_score > 0


def test_when_the_endpoint_fails_the_search_is_lexical_and_says_why(library) -> None:
    library.failing = True
    result = skill_search(query="summarize csv", agent=None)
    assert result.mode == "lexical"
    assert result.dense_error == "Embeddings request failed: InternalServerError"
    assert [h.name for h in result.hits] == ["csv-summary"]
    assert result.hits[0].dense_rank is None


def test_an_install_while_the_endpoint_fails_succeeds_and_a_refresh_embeds_it_later(
    library, django_capture_on_commit_callbacks
) -> None:
    library.failing = True
    with django_capture_on_commit_callbacks(execute=True):
        install("weather-report", "Tell the forecast for a city.")
    assert not SkillEmbedding.objects.filter(entry__skill__name="weather-report").exists()
    assert [h.name for h in skill_search(query="forecast", agent=None).hits] == ["weather-report"]

    library.failing = False
    assert embeddings_refresh() == 1
    assert embeddings_refresh() == 0  # nothing stale any more
    result = skill_search(query="will it rain", agent=None, k=1)
    assert (result.mode, result.hits[0].name) == ("hybrid", "weather-report")


def test_a_new_version_replaces_its_vector(library, django_capture_on_commit_callbacks) -> None:
    before = stored_vector("csv-summary")
    with django_capture_on_commit_callbacks(execute=True):
        install("csv-summary", "Summarize a spreadsheet of euro prices.")
    entry = SkillIndexEntry.objects.get(skill__name="csv-summary")
    assert SkillEmbedding.objects.get(entry=entry).text_hash == entry.text_hash
    assert stored_vector("csv-summary") != before
    assert SkillEmbedding.objects.count() == 3


def test_without_an_embeddings_model_nothing_is_sent_and_the_search_is_lexical(
    db, settings, embeddings_stub, django_capture_on_commit_callbacks
) -> None:
    settings.EMBEDDINGS_MODEL = ""
    with django_capture_on_commit_callbacks(execute=True):
        install("csv-summary", "Summarize a CSV file.")
    result = skill_search(query="summarize csv", agent=None)
    assert (result.mode, result.dense_error) == ("lexical", "")
    assert embeddings_stub.requests == []
    assert SkillEmbedding.objects.count() == 0


def test_the_vector_column_exists_on_postgresql_only(db) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT udt_name FROM information_schema.columns "
                "WHERE table_name = 'skills_skillembedding' AND column_name = 'embedding'"
            )
            assert cursor.fetchall() == [("vector",)]
        else:
            columns = [
                c.name
                for c in connection.introspection.get_table_description(
                    cursor, "skills_skillembedding"
                )
            ]
            assert "embedding" not in columns
            assert "vector_json" in columns


def test_an_install_queues_the_embedding_instead_of_calling_the_endpoint(
    db, embeddings_stub, django_capture_on_commit_callbacks
) -> None:
    # given a broker and no worker (the test process does not run queued tasks)
    with celery_app.connection_for_write() as conn:
        conn.default_channel.queue_purge(celery_app.conf.task_default_queue)
    # when a skill is installed and its transaction commits
    with django_capture_on_commit_callbacks(execute=True):
        install("uptime-checker", "Check whether an HTTP endpoint is up.")
    # then the endpoint was not called on the install's path, and one embed task is queued
    assert embeddings_stub.requests == []
    entry = SkillIndexEntry.objects.get(skill__name="uptime-checker")
    with celery_app.connection_for_write() as conn:
        message = conn.default_channel.basic_get(celery_app.conf.task_default_queue, no_ack=True)
        left = conn.default_channel.basic_get(celery_app.conf.task_default_queue, no_ack=True)
    assert message is not None and left is None
    assert message.headers["task"] == "skills.index_embed"
    assert message.headers["argsrepr"] == f"([{entry.pk}],)"
    # and meanwhile the lexical half finds it
    assert [h.name for h in skill_search(query="endpoint up", agent=None).hits] == [
        "uptime-checker"
    ]


def test_the_embed_task_retries_a_failing_endpoint(
    db, embeddings_stub, eager, django_capture_on_commit_callbacks
) -> None:
    # given an endpoint that fails its next request, then answers
    embeddings_stub.fail_next = 1
    with django_capture_on_commit_callbacks(execute=True):
        install("uptime-checker", "Check whether an HTTP endpoint is up.")
    # then the task's retry stored the vector
    assert len(embeddings_stub.requests) == 2
    entry = SkillIndexEntry.objects.get(skill__name="uptime-checker")
    assert SkillEmbedding.objects.get(entry=entry).text_hash == entry.text_hash
