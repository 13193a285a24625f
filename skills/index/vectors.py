"""Where vectors are kept and compared: pgvector on PostgreSQL, a JSON column compared in
process (numpy) on SQLite. The only module that touches the PostgreSQL-only `embedding` column.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np
from django.db import connection, transaction
from django.db.models import F

from .models import SkillEmbedding

_TABLE = SkillEmbedding._meta.db_table


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


@dataclass
class _Matrix:
    key: tuple[object, ...]
    skill_ids: np.ndarray
    vectors: np.ndarray


_cache: _Matrix | None = None
_lock = threading.Lock()


def _matrix(*, model: str, dims: int, generation: tuple[int, int]) -> _Matrix:
    """SQLite: every current vector of `model` as one matrix, rebuilt when the embeddings or
    documents generation moved."""
    global _cache
    key = (generation, model, dims)
    with _lock:
        if _cache is not None and _cache.key == key:
            return _cache
        rows = list(
            SkillEmbedding.objects.filter(
                model=model, dims=dims, text_hash=F("entry__text_hash")
            ).values_list("entry__skill_id", "vector_json")
        )
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        mat = (
            np.array([r[1] for r in rows], dtype=np.float32)
            if rows
            else np.zeros((0, dims), dtype=np.float32)
        )
        _cache = _Matrix(key=key, skill_ids=ids, vectors=mat)
        return _cache


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
    mat = _matrix(model=model, dims=dims, generation=generation)
    if not len(mat.skill_ids):
        return []
    sims = mat.vectors @ np.asarray(query_vector, dtype=np.float32)
    if visible is not None:
        mask = np.isin(mat.skill_ids, np.fromiter(visible, dtype=np.int64))
        sims = np.where(mask, sims, -np.inf)
    n = min(limit, int(np.isfinite(sims).sum()))
    if n <= 0:
        return []
    top = np.argpartition(-sims, n - 1)[:n]
    top = top[np.argsort(-sims[top], kind="stable")]
    return [(int(mat.skill_ids[i]), float(sims[i])) for i in top]
