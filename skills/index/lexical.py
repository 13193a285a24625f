"""The lexical half: BM25 (bm25s) over every entry's stored terms, held in process memory.

bm25s rather than PostgreSQL full-text search: one ranking on both databases (SQLite has no
ts_rank, and FTS5's bm25 would be a second implementation with its own tokenizer), real BM25
(ts_rank has no inverse document frequency), and a query over 10,000 skills is a sparse
matrix-vector product of well under a millisecond. The price is memory (a few MB at 10,000
skills) and a rebuild in each process after a change, from the stored terms (no re-tokenizing).
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from dataclasses import dataclass, field

import bm25s
import numpy as np

from .models import SkillIndexEntry


@dataclass
class LexicalIndex:
    generation: int
    skill_ids: np.ndarray
    retriever: bm25s.BM25 | None
    # what a hit shows, by skill id, as of this generation (no query per search)
    facts: dict[int, tuple[str, str, int]] = field(default_factory=dict)
    # visibility masks over `skill_ids`, by the caller's key (visibility stamp, agent, ...)
    masks: dict[object, np.ndarray] = field(default_factory=dict)

    def mask(self, key: object, visible: Collection[int]) -> np.ndarray:
        """Boolean array: which positions `visible` allows (cached under `key`, which must
        change whenever `visible` does)."""
        found = self.masks.get(key)
        if found is None:
            found = np.isin(self.skill_ids, np.fromiter(visible, dtype=np.int64))
            if len(self.masks) > 256:
                self.masks.clear()
            self.masks[key] = found
        return found

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
        if self.retriever is None or not tokens:
            return []
        scores = self.retriever.get_scores(tokens)
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


_cache: LexicalIndex | None = None
_lock = threading.Lock()


def lexical_index(*, generation: int) -> LexicalIndex:
    """The index as of `generation` (the documents counter read by the caller), built at most
    once per generation per process."""
    global _cache
    with _lock:
        if _cache is not None and _cache.generation == generation:
            return _cache
        rows = list(
            SkillIndexEntry.objects.order_by("skill_id").values_list(
                "skill_id", "terms", "name", "description", "version__number"
            )
        )
        retriever: bm25s.BM25 | None = None
        if rows:
            retriever = bm25s.BM25()
            retriever.index([r[1].split() for r in rows], show_progress=False)
        _cache = LexicalIndex(
            generation=generation,
            skill_ids=np.array([r[0] for r in rows], dtype=np.int64),
            retriever=retriever,
            facts={r[0]: (r[2], r[3], r[4]) for r in rows},
        )
        return _cache
