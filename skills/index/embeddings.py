"""Dense vectors from an OpenAI-compatible `/embeddings` endpoint (never a model downloaded or
run here). On when EMBEDDINGS_MODEL is set; EMBEDDINGS_BASE_URL and EMBEDDINGS_API_KEY default
to the LLM's. Vectors are L2-normalised before they are stored, so cosine similarity is a dot
product in process and pgvector's cosine distance agrees with it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import openai
from django.conf import settings

from .models import IndexGeneration, SkillEmbedding, SkillIndexEntry

log = logging.getLogger(__name__)


class EmbeddingsUnavailable(Exception):
    """The endpoint failed or answered something that is not one vector per input."""


def configured() -> bool:
    """Whether dense retrieval is on (a model and an endpoint are set)."""
    return bool(settings.EMBEDDINGS_MODEL and settings.EMBEDDINGS_BASE_URL)


def model_name() -> str:
    return str(settings.EMBEDDINGS_MODEL)


def _client() -> openai.OpenAI:
    return openai.OpenAI(
        base_url=settings.EMBEDDINGS_BASE_URL,
        api_key=settings.EMBEDDINGS_API_KEY or "none",
        timeout=settings.EMBEDDINGS_TIMEOUT_SECONDS,
        max_retries=0,
    )


def _normalised(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    if not norm or not math.isfinite(norm):
        raise EmbeddingsUnavailable("The embeddings endpoint answered a zero or non-finite vector.")
    return [float(x) / norm for x in vector]


def embed(texts: Sequence[str]) -> list[list[float]]:
    """One normalised vector per text, in order; `EmbeddingsUnavailable` on any failure."""
    try:
        reply = _client().embeddings.create(model=model_name(), input=list(texts))
    except openai.OpenAIError as exc:
        raise EmbeddingsUnavailable(f"Embeddings request failed: {type(exc).__name__}") from exc
    data = sorted(reply.data, key=lambda d: d.index)
    if len(data) != len(texts):
        raise EmbeddingsUnavailable(
            f"The embeddings endpoint answered {len(data)} vectors for {len(texts)} texts."
        )
    vectors = [_normalised(d.embedding) for d in data]
    if len({len(v) for v in vectors}) > 1:
        raise EmbeddingsUnavailable("The embeddings endpoint answered vectors of mixed lengths.")
    return vectors


def embeddings_refresh(
    *,
    entry_ids: Sequence[int] | None = None,
    limit: int | None = None,
    raise_on_failure: bool = False,
) -> int:
    """Embed the entries (all, or `entry_ids`) whose vector is missing or stale (another model,
    or text that changed); returns how many were stored. Failures are logged and leave the
    entries to lexical search (and to the next refresh); with `raise_on_failure` the
    `EmbeddingsUnavailable` is raised after what was stored is kept (the Celery task retries)."""
    from . import vectors

    if not configured():
        return 0
    model = model_name()
    entries = SkillIndexEntry.objects.order_by("pk")
    if entry_ids is not None:
        entries = entries.filter(pk__in=list(entry_ids))
    current = SkillEmbedding.objects.filter(model=model).values_list("entry_id", "text_hash")
    fresh = dict(current)
    todo = [
        (pk, document, digest)
        for pk, document, digest in entries.values_list("pk", "document", "text_hash")
        if fresh.get(pk) != digest
    ][:limit]
    stored = 0
    failure: EmbeddingsUnavailable | None = None
    batch = max(1, settings.EMBEDDINGS_BATCH_SIZE)
    for start in range(0, len(todo), batch):
        chunk = todo[start : start + batch]
        try:
            found = embed([document for _, document, _ in chunk])
        except EmbeddingsUnavailable as exc:
            log.warning("skill index: embeddings not computed (%s)", exc)
            failure = exc
            break
        stored += vectors.vectors_store(
            model=model,
            rows=[(pk, digest, vec) for (pk, _, digest), vec in zip(chunk, found, strict=True)],
        )
    if stored:
        from .store import generation_bump

        generation_bump(IndexGeneration.EMBEDDINGS)
    if failure is not None and raise_on_failure:
        raise failure
    return stored
