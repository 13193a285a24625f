"""Where vectors are kept and compared: pgvector on PostgreSQL, a JSON column compared in
process (numpy) on SQLite. The only module that touches the PostgreSQL-only `embedding` column.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import numpy as np
from django.db import connection, transaction

from .models import SkillEmbedding, SkillIndexEntry

_TABLE = SkillEmbedding._meta.db_table
_ENTRIES = SkillIndexEntry._meta.db_table


def _pg() -> bool:
    return connection.vendor == "postgresql"


def _literal(vector: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def pgvector_ready() -> bool:
    """On PostgreSQL: whether the `embedding` vector column exists (the extension was
    available when the migration ran, or `vector_column_ensure` added it since)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_name = %s AND column_name = %s",
            [_TABLE, "embedding"],
        )
        return cursor.fetchone() is not None


def vector_column_ensure() -> bool:
    """On PostgreSQL, create the extension and the column when the extension is installed on
    the server; returns whether the column exists. A no-op (True) on SQLite."""
    if not _pg():
        return True
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        if cursor.fetchone() is None:
            return False
        cursor.execute("CREATE EXTENSION IF NOT EXISTS vector")
        cursor.execute(f"ALTER TABLE {_TABLE} ADD COLUMN IF NOT EXISTS embedding vector")  # noqa: S608
    return True


def vectors_store(*, model: str, rows: Sequence[tuple[int, str, Sequence[float]]]) -> int:
    """Store (entry_id, text_hash, normalised vector) under `model`, replacing older ones."""
    pg = _pg()
    if pg and not pgvector_ready():
        return 0
    with transaction.atomic():
        SkillEmbedding.objects.filter(entry_id__in=[r[0] for r in rows]).delete()
        created = SkillEmbedding.objects.bulk_create(
            SkillEmbedding(
                entry_id=entry_id,
                model=model,
                text_hash=digest,
                dims=len(vector),
                vector_json=None if pg else list(vector),
            )
            for entry_id, digest, vector in rows
        )
        if pg:
            with connection.cursor() as cursor:
                cursor.executemany(
                    f"UPDATE {_TABLE} SET embedding = %s::vector WHERE entry_id = %s",  # noqa: S608
                    [(_literal(vector), entry_id) for entry_id, _, vector in rows],
                )
    return len(created)


#: embeddings whose vectors are fetched per query when catching up
FETCH_BATCH = 500


@dataclass
class DenseMatrix:
    """SQLite: the current vectors of one embeddings model, one row (slot) per skill, kept up to
    date incrementally like the lexical postings. When the embeddings or documents stamp moves,
    `refresh` reads each current embedding's (skill, row id, text hash) from two covering
    indexes and fetches the vectors of only those that are new or replaced (a stored vector is
    never updated in place: `vectors_store` writes a new row; the text hash guards against a row
    id reused after a rollback); a skill whose embedding went away, or no longer matches its
    entry's text, leaves its slot. `rows_fetched` says how many vectors the last
    refresh read."""

    model: str
    dims: int
    generation: tuple[int, int] | None = None
    skill_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    rows_fetched: int = 0
    # skill id -> (slot, (embedding row id, its text hash))
    _rows: dict[int, tuple[int, tuple[int, str]]] = field(default_factory=dict)
    _free: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.vectors.shape != (0, self.dims):
            self.vectors = np.zeros((0, self.dims), dtype=np.float32)

    def __len__(self) -> int:
        return len(self._rows)

    def _slot(self) -> int:
        if self._free:
            return self._free.pop()
        slot = len(self.skill_ids)
        grow = max(64, slot)
        self.skill_ids = np.concatenate([self.skill_ids, np.full(grow, -1, dtype=np.int64)])
        self.vectors = np.concatenate([self.vectors, np.zeros((grow, self.dims), dtype=np.float32)])
        self._free.extend(range(slot + grow - 1, slot, -1))
        return slot

    def remove(self, skill_id: int) -> None:
        found = self._rows.pop(skill_id, None)
        if found is None:
            return
        slot = found[0]
        self.skill_ids[slot] = -1
        self.vectors[slot] = 0.0
        self._free.append(slot)

    def put(self, skill_id: int, *, row_id: int, vector: Sequence[float], digest: str = "") -> None:
        found = self._rows.get(skill_id)
        slot = found[0] if found is not None else self._slot()
        self.skill_ids[slot] = skill_id
        self.vectors[slot] = np.asarray(vector, dtype=np.float32)
        self._rows[skill_id] = (slot, (row_id, digest))

    def refresh(self) -> None:
        """Catch up with the stored embeddings of this model and size."""
        # Two narrow raw reads joined here: the entries' (id, skill, text hash) come from a
        # covering index, the embeddings' from the columns before the vector; a join in SQL
        # would read every entry's row, which its document makes many pages long.
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT id, skill_id, text_hash FROM {_ENTRIES}")  # noqa: S608
            entries = {int(e): (int(s), str(h)) for e, s, h in cursor.fetchall()}
            cursor.execute(
                f"SELECT entry_id, id, text_hash FROM {_TABLE} "  # noqa: S608
                "WHERE model = %s AND dims = %s",
                [self.model, self.dims],
            )
            stored: dict[int, tuple[int, str]] = {}
            for entry_id, row_id, digest in cursor.fetchall():
                entry = entries.get(int(entry_id))
                if entry is not None and entry[1] == digest:
                    stored[entry[0]] = (int(row_id), str(digest))
        for skill_id in [s for s in self._rows if s not in stored]:
            self.remove(skill_id)
        none = (0, (-1, ""))
        stale = sorted(s for s, key in stored.items() if self._rows.get(s, none)[1] != key)
        for start in range(0, len(stale), FETCH_BATCH):
            wanted = [stored[s][0] for s in stale[start : start + FETCH_BATCH]]
            rows = SkillEmbedding.objects.filter(pk__in=wanted).values_list(
                "entry__skill_id", "id", "text_hash", "vector_json"
            )
            for skill_id, row_id, digest, vector in rows:
                if isinstance(vector, list) and len(vector) == self.dims:
                    self.put(int(skill_id), row_id=int(row_id), vector=vector, digest=digest)
        self.rows_fetched = len(stale)

    def nearest(
        self, query: np.ndarray, *, visible: Collection[int] | None, limit: int
    ) -> list[tuple[int, float]]:
        """The `limit` visible skills most similar to `query`: (skill_id, cosine)."""
        if not self._rows:
            return []
        sims = self.vectors @ query
        keep = self.skill_ids >= 0
        if visible is not None:
            keep &= np.isin(self.skill_ids, np.fromiter(visible, dtype=np.int64))
        sims = np.where(keep, sims, -np.inf)
        n = min(limit, int(np.isfinite(sims).sum()))
        if n <= 0:
            return []
        top = np.argpartition(-sims, n - 1)[:n]
        top = top[np.lexsort((self.skill_ids[top], -sims[top]))]
        return [(int(self.skill_ids[i]), float(sims[i])) for i in top]


_cache: dict[tuple[str, int], DenseMatrix] = {}
_lock = threading.Lock()


def dense_matrix(*, model: str, dims: int, generation: tuple[int, int]) -> DenseMatrix:
    """SQLite: this process's vectors of `model` at `dims`, caught up with the stored
    embeddings at most once per (embeddings, documents) stamp."""
    with _lock:
        matrix = _cache.get((model, dims))
        if matrix is None:
            if len(_cache) >= 4:  # an old model's matrix is not kept forever
                _cache.clear()
            matrix = _cache[(model, dims)] = DenseMatrix(model=model, dims=dims)
        if matrix.generation != generation:
            matrix.refresh()
            matrix.generation = generation
        return matrix


def dense_candidates(
    *,
    query_vector: Sequence[float],
    model: str,
    visible: Collection[int] | None,
    limit: int,
    generation: tuple[int, int],
) -> list[tuple[int, float]]:
    """The `limit` visible skills nearest to `query_vector`: (skill_id, cosine similarity),
    best first. `visible` None: every skill."""
    dims = len(query_vector)
    if _pg():
        if not pgvector_ready():
            return []
        literal = _literal(query_vector)
        sql = (
            f"SELECT e.skill_id, 1 - (v.embedding <=> %s::vector) FROM {_TABLE} v "  # noqa: S608
            "JOIN skills_skillindexentry e ON e.id = v.entry_id "
            "WHERE v.model = %s AND v.dims = %s AND v.text_hash = e.text_hash "
            "AND v.embedding IS NOT NULL"
        )
        params: list[object] = [literal, model, dims]
        if visible is not None:
            sql += " AND e.skill_id = ANY(%s)"
            params.append(list(visible))
        sql += " ORDER BY v.embedding <=> %s::vector LIMIT %s"
        params += [literal, limit]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return [(int(a), float(b)) for a, b in cursor.fetchall()]
    matrix = dense_matrix(model=model, dims=dims, generation=generation)
    with _lock:
        return matrix.nearest(
            np.asarray(query_vector, dtype=np.float32), visible=visible, limit=limit
        )
