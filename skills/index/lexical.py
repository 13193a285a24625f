"""The lexical half: BM25 over every entry's stored terms, held in process memory and kept up
to date incrementally.

BM25 in process rather than PostgreSQL full-text search: one ranking on both databases (SQLite
has no ts_rank, and FTS5's bm25 would be a second implementation with its own tokenizer), real
BM25 (ts_rank has no inverse document frequency), and a query over 10,000 skills is a few
vectorised array operations.

The scores are those of bm25s's default ("lucene" variant, k1 = 1.5, b = 0.75; the tests hold
the two equal), computed from postings this module maintains itself: when the documents stamp
moves, the process reads each entry's (skill, text hash, version) — one narrow query — and
fetches the terms of only the entries that changed, removing and adding their postings. An
install therefore costs every other process one small read instead of re-indexing everything
(bm25s builds its matrix in one go and has no update).
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field

import numpy as np
from django.db import connection

from .models import SkillIndexEntry

K1 = 1.5
B = 0.75
#: entries whose terms are fetched per query when catching up
FETCH_BATCH = 500

_TABLE = SkillIndexEntry._meta.db_table


@dataclass
class LexicalIndex:
    """Postings of every indexed skill. `facts` holds what a hit shows (name, description,
    version number) by skill id; `rows_fetched` how many entries' terms the last refresh read."""

    generation: int = -1
    skill_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    doc_len: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float64))
    postings: dict[str, dict[int, int]] = field(default_factory=dict)
    facts: dict[int, tuple[str, str, int]] = field(default_factory=dict)
    rows_fetched: int = 0
    # skill id -> (slot, text hash, version id, its term counts)
    _docs: dict[int, tuple[int, str, int, Counter[str]]] = field(default_factory=dict)
    _free: list[int] = field(default_factory=list)
    _total_len: float = 0.0
    # visibility masks over the slots, by the caller's key; cleared on every update
    masks: dict[object, np.ndarray] = field(default_factory=dict)

    @property
    def retriever(self) -> bool:
        return bool(self._docs)

    # --- maintenance ------------------------------------------------------------------------

    def _slot(self) -> int:
        if self._free:
            return self._free.pop()
        slot = len(self.skill_ids)
        grow = max(64, slot)
        self.skill_ids = np.concatenate([self.skill_ids, np.full(grow, -1, dtype=np.int64)])
        self.doc_len = np.concatenate([self.doc_len, np.zeros(grow, dtype=np.float64)])
        self._free.extend(range(slot + grow - 1, slot, -1))
        return slot

    def remove(self, skill_id: int) -> None:
        found = self._docs.pop(skill_id, None)
        self.facts.pop(skill_id, None)
        if found is None:
            return
        slot, _, _, counts = found
        for token in counts:
            posting = self.postings[token]
            del posting[slot]
            if not posting:
                del self.postings[token]
        self._total_len -= self.doc_len[slot]
        self.skill_ids[slot] = -1
        self.doc_len[slot] = 0.0
        self._free.append(slot)

    def add(
        self,
        skill_id: int,
        *,
        terms: list[str],
        text_hash: str,
        version_id: int,
        facts: tuple[str, str, int],
    ) -> None:
        self.remove(skill_id)
        slot = self._slot()
        counts = Counter(terms)
        for token, tf in counts.items():
            self.postings.setdefault(token, {})[slot] = tf
        self.skill_ids[slot] = skill_id
        self.doc_len[slot] = float(len(terms))
        self._total_len += len(terms)
        self._docs[skill_id] = (slot, text_hash, version_id, counts)
        self.facts[skill_id] = facts

    def refresh(self) -> None:
        """Catch up with the stored entries: drop the removed ones, (re)read the changed ones."""
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT skill_id, text_hash, version_id FROM {_TABLE}")  # noqa: S608
            stored = {int(s): (str(h), int(v)) for s, h, v in cursor.fetchall()}
        for skill_id in [s for s in self._docs if s not in stored]:
            self.remove(skill_id)
        stale = sorted(
            s
            for s, (digest, version) in stored.items()
            if self._docs.get(s, (0, "", 0))[1:3] != (digest, version)
        )
        for start in range(0, len(stale), FETCH_BATCH):
            chunk = stale[start : start + FETCH_BATCH]
            rows = SkillIndexEntry.objects.filter(skill_id__in=chunk).values_list(
                "skill_id", "terms", "text_hash", "version_id", "name", "description",
                "version__number",
            )  # fmt: skip
            for skill_id, terms, digest, version_id, name, description, number in rows:
                self.add(
                    skill_id,
                    terms=terms.split(),
                    text_hash=digest,
                    version_id=version_id,
                    facts=(name, description, number),
                )
        self.rows_fetched = len(stale)
        self.masks.clear()

    # --- queries ----------------------------------------------------------------------------

    def mask(self, key: object, visible: Collection[int]) -> np.ndarray:
        """Boolean array over the slots: which ones `visible` allows (cached under `key`, which
        must change whenever `visible` does)."""
        found = self.masks.get(key)
        if found is None:
            found = np.isin(self.skill_ids, np.fromiter(visible, dtype=np.int64))
            if len(self.masks) > 256:
                self.masks.clear()
            self.masks[key] = found
        return found

    def scores(self, tokens: list[str]) -> np.ndarray:
        """BM25 of every slot for `tokens` (a repeated token counts again, as in bm25s)."""
        out = np.zeros(len(self.skill_ids), dtype=np.float64)
        n = len(self._docs)
        if not n:
            return out
        avg = self._total_len / n
        for token in tokens:
            posting = self.postings.get(token)
            if not posting:
                continue
            df = len(posting)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            slots = np.fromiter(posting.keys(), dtype=np.int64, count=df)
            tf = np.fromiter(posting.values(), dtype=np.float64, count=df)
            norm = K1 * ((1 - B) + B * self.doc_len[slots] / avg)
            out[slots] += idf * tf / (norm + tf)
        return out

    def candidates(
        self,
        tokens: list[str],
        *,
        visible: Collection[int] | None,
        limit: int,
        visible_key: object = None,
    ) -> list[tuple[int, float]]:
        """The `limit` visible skills with the highest positive BM25 score for `tokens`:
        (skill_id, score), best first. `visible_key` identifies `visible` for the mask cache
        (None: not cached)."""
        with _lock:
            if not self._docs or not tokens:
                return []
            scores = self.scores(tokens)
            if visible is not None:
                mask = (
                    self.mask(visible_key, visible)
                    if visible_key is not None
                    else np.isin(self.skill_ids, np.fromiter(visible, dtype=np.int64))
                )
                scores = np.where(mask, scores, 0.0)
            positive = int((scores > 0).sum())
            n = min(limit, positive)
            if n <= 0:
                return []
            top = np.argpartition(-scores, n - 1)[:n]
            # ties broken by skill id (stable and the same in every process)
            top = top[np.lexsort((self.skill_ids[top], -scores[top]))]
            return [(int(self.skill_ids[i]), float(scores[i])) for i in top]


_cache = LexicalIndex()
_lock = threading.Lock()


def lexical_index(*, generation: int) -> LexicalIndex:
    """The index as of `generation` (the documents stamp read by the caller): this process's
    postings, caught up with the stored entries at most once per stamp."""
    with _lock:
        if _cache.generation != generation:
            _cache.refresh()
            _cache.generation = generation
        return _cache
