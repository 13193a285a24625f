"""The in-process BM25 index: the same scores as bm25s on the same corpus, and an install, a new
version or a delete updates it by reading only the entries that changed."""

from __future__ import annotations

import random

import bm25s
import numpy as np
import pytest

from skills.bundle import bundle_from_files
from skills.index import lexical
from skills.index.search import skill_search
from skills.index.store import generations
from skills.install import skill_delete, skill_install_bundle
from skills.services import Actor

ACTOR = Actor.system("test")


def test_scores_equal_bm25s_on_a_random_corpus_with_updates() -> None:
    # given a random corpus indexed by both, then a document replaced and one removed
    rng = random.Random(7)
    vocab = [f"w{i}" for i in range(40)]
    corpus = {sid: [rng.choice(vocab) for _ in range(rng.randint(1, 30))] for sid in range(1, 60)}
    index = lexical.LexicalIndex()
    for sid, terms in corpus.items():
        index.add(sid, terms=terms, text_hash="h", version_id=sid, facts=("n", "d", 1))
    corpus[5] = ["w1", "w1", "w2"]
    index.add(5, terms=corpus[5], text_hash="h2", version_id=5, facts=("n", "d", 2))
    del corpus[9]
    index.remove(9)
    reference = bm25s.BM25()
    ids = sorted(corpus)
    reference.index([corpus[sid] for sid in ids], show_progress=False)
    for query in (["w1"], ["w3", "w7", "w3"], ["w2", "nothing"], vocab[:10]):
        expected = reference.get_scores(query)
        got = index.scores(query)
        by_id = {int(index.skill_ids[slot]): got[slot] for slot in range(len(got))}
        assert np.allclose([by_id[sid] for sid in ids], expected, rtol=1e-5, atol=1e-6)
        assert by_id.get(9, 0.0) == 0.0


def _install(name: str, description: str):
    text = f"---\nname: {name}\ndescription: {description}\n---\n# Steps\n"
    bundle = bundle_from_files({"SKILL.md": text.encode()}, dir_name=name)
    return skill_install_bundle(bundle=bundle, actor=ACTOR)


@pytest.mark.django_db
def test_an_install_new_version_and_delete_read_only_the_changed_entry() -> None:
    # given twenty indexed skills and an index caught up with them
    for n in range(20):
        _install(f"tool-{n}", f"Handle task number {n} of the batch.")
    assert [h.name for h in skill_search(query="task 7", agent=None, k=1).hits] == ["tool-7"]
    index = lexical.lexical_index(generation=generations()["documents"])
    # when one skill is installed, then the index reads one entry and finds it
    _install("invoice-maker", "Create invoices as PDF files.")
    assert skill_search(query="invoices pdf", agent=None, k=1).hits[0].name == "invoice-maker"
    assert index.rows_fetched == 1
    # when a skill gets a new version, one entry again, with its new text
    _install("tool-3", "Translate subtitles between languages.")
    hit = skill_search(query="subtitles", agent=None, k=1).hits[0]
    assert (hit.name, hit.version, index.rows_fetched) == ("tool-3", 2, 1)
    assert "tool-3" not in [h.name for h in skill_search(query="batch", agent=None, k=50).hits]
    # when a skill is deleted, nothing is read and it is gone
    skill_delete(skill="invoice-maker", actor=ACTOR)
    assert skill_search(query="invoices pdf", agent=None).hits == []
    assert index.rows_fetched == 0
