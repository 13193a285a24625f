"""The in-process vectors SQLite compares (skills.index.vectors.DenseMatrix) are kept up to date
incrementally: an install, a new version and a delete read only the vector that changed, and the
ranking is the one a comparison with every stored vector gives."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection

from config.celery import app as celery_app
from skills.bundle import bundle_from_files
from skills.index import vectors
from skills.index.models import IndexGeneration, SkillEmbedding
from skills.index.search import skill_search
from skills.index.store import generations
from skills.install import skill_delete, skill_install_bundle
from skills.services import Actor
from tests.fixtures.embeddings import DIMS, vector

ACTOR = Actor.system("test")


def _unit(values: list[float]) -> np.ndarray:
    v = np.asarray(values, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_put_remove_and_nearest_equal_a_comparison_with_every_vector() -> None:
    # given a matrix filled, one vector replaced and two removed (slots reused after)
    rng = np.random.default_rng(3)
    stored = {sid: _unit(rng.standard_normal(8).tolist()) for sid in range(1, 200)}
    matrix = vectors.DenseMatrix(model="m", dims=8)
    for sid, v in stored.items():
        matrix.put(sid, row_id=sid, vector=v.tolist())
    stored[7] = _unit(rng.standard_normal(8).tolist())
    matrix.put(7, row_id=1007, vector=stored[7].tolist())
    for sid in (9, 150):
        del stored[sid]
        matrix.remove(sid)
    stored[500] = _unit(rng.standard_normal(8).tolist())
    matrix.put(500, row_id=500, vector=stored[500].tolist())
    assert len(matrix) == len(stored) == 198
    # then every query ranks as the brute-force comparison does, visible filter included
    ids = sorted(stored)
    every = np.stack([stored[s] for s in ids])
    for _ in range(5):
        query = _unit(rng.standard_normal(8).tolist())
        sims = every @ query
        expected = [ids[i] for i in np.argsort(-sims, kind="stable")[:10]]
        assert [s for s, _ in matrix.nearest(query, visible=None, limit=10)] == expected
        visible = set(ids[::3])
        got = matrix.nearest(query, visible=visible, limit=5)
        best = sorted(visible, key=lambda s: -float(stored[s] @ query))[:5]
        assert [s for s, _ in got] == best
    assert 9 not in [s for s, _ in matrix.nearest(stored[500], visible=None, limit=300)]


@pytest.fixture
def eager():
    """The embedding task runs in this process when queued (its worker's part, played here)."""
    before = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = before


def _install(name: str, description: str, capture) -> None:
    text = f"---\nname: {name}\ndescription: {description}\n---\n# Steps\n"
    bundle = bundle_from_files({"SKILL.md": text.encode()}, dir_name=name)
    with capture(execute=True):
        skill_install_bundle(bundle=bundle, actor=ACTOR)


def _matrix() -> vectors.DenseMatrix:
    gens = generations()
    return vectors.dense_matrix(
        model="stub-embed",
        dims=DIMS,
        generation=(gens[IndexGeneration.EMBEDDINGS], gens[IndexGeneration.DOCUMENTS]),
    )


@pytest.mark.django_db
def test_an_install_new_version_and_delete_read_only_the_changed_vector(
    embeddings_stub, eager, django_capture_on_commit_callbacks
) -> None:
    # The rankings are asserted on both databases; the matrix (SQLite's in-process vectors;
    # PostgreSQL compares in pgvector) where it exists.
    sqlite = connection.vendor == "sqlite"
    capture = django_capture_on_commit_callbacks
    # given twenty embedded skills and a matrix caught up with them
    for n in range(20):
        _install(f"tool-{n}", f"Handle task number {n} of the batch.", capture)
    skill_search(query="task 7", agent=None, k=1)
    matrix = _matrix() if sqlite else None
    assert matrix is None or len(matrix) == 20

    # when one skill is installed, then the next search reads its vector only and ranks it
    _install(
        "exchange-rates", "Convert money between currencies such as euros and dollars.", capture
    )
    hit = skill_search(query="euro dollar", agent=None, k=1).hits[0]
    assert (hit.name, hit.dense_rank) == ("exchange-rates", 1)
    if matrix is not None:
        assert _matrix() is matrix
        assert (matrix.rows_fetched, len(matrix)) == (1, 21)

    # when a skill gets a new version, its new vector replaces the old one, one read again
    _install("tool-3", "Check whether a website is up and online.", capture)
    hit = skill_search(query="is the website reachable", agent=None, k=1).hits[0]
    assert (hit.name, hit.version, hit.dense_rank) == ("tool-3", 2, 1)
    if matrix is not None:
        assert (matrix.rows_fetched, len(matrix)) == (1, 21)

    # when a skill is deleted, nothing is read and its slot is gone
    skill_delete(skill="exchange-rates", actor=ACTOR)
    names = [h.name for h in skill_search(query="euro dollar", agent=None, k=50).hits]
    assert "exchange-rates" not in names
    if matrix is None:
        return
    assert (matrix.rows_fetched, len(matrix)) == (0, 20)

    # and the matrix holds exactly the stored vectors, each as its document's embedding
    stored = dict(SkillEmbedding.objects.values_list("entry__skill_id", "vector_json"))
    assert sorted(int(s) for s in matrix.skill_ids if s >= 0) == sorted(stored)
    for slot, sid in enumerate(matrix.skill_ids):
        if sid >= 0:
            assert np.allclose(matrix.vectors[slot], stored[int(sid)], atol=1e-6)
    entry_doc = SkillEmbedding.objects.get(entry__skill__name="tool-3").entry.document
    slot = int(np.flatnonzero(matrix.skill_ids == hit.skill_id)[0])
    assert np.allclose(matrix.vectors[slot], _unit(vector(entry_doc)), atol=1e-6)
