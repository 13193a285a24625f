"""`skill_search`: the ranked skills an agent may use for a request (seed 002 §9, stage 1).

Lexical (BM25) always; dense (embeddings) too when configured and the query could be embedded;
both rankings fused by reciprocal rank fusion (score = Σ 1 / (60 + rank)), so neither scale has to
be calibrated against the other. What an agent sees is filtered by its policies: skills it holds a
policy for (any status) and, with `include_shared`, skills another agent of the same owner holds
(status "not_yet_yours", as in the brain's <available_skills>).
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from django.conf import settings
from django.db import connection

from skills.errors import SkillError
from skills.models import Policy

from . import embeddings, lexical, vectors
from .models import IndexGeneration
from .store import generations
from .text import tokenize

#: Reciprocal rank fusion's constant (Cormack et al. 2009): damps the head of each ranking.
RRF_K = 60
#: Most hits one search returns.
MAX_K = 100
#: Each ranking contributes this many candidates to the fusion (at least).
MIN_CANDIDATES = 50
NOT_YET_YOURS = "not_yet_yours"


class SkillSearchQueryInvalid(SkillError):
    """The query is empty or too long (under the refuse rule); details name the rule."""

    code = "skill_search_query_invalid"
    http_status = 400


def query_normalise(
    query: str, *, over_limit: Literal["truncate", "refuse"] = "truncate"
) -> tuple[str, bool]:
    """(query, truncated). NUL and other control characters become spaces and the ends are
    stripped; an empty result is refused (rule `query-empty`). Longer than
    MOTOR_SKILL_SEARCH_QUERY_MAX_CHARS characters: cut to that many (`truncate`, for callers
    handing in a whole user message) or refused (`refuse`, rule `query-too-long`: the API)."""
    if not isinstance(query, str):
        raise SkillSearchQueryInvalid(
            "The query must be a string.", details={"rule": "query-type", "field": "q"}
        )
    limit = int(settings.MOTOR_SKILL_SEARCH_QUERY_MAX_CHARS)
    truncated = False
    if len(query) > limit:
        if over_limit == "refuse":
            raise SkillSearchQueryInvalid(
                f"The query has {len(query)} characters; at most {limit} are accepted "
                "(MOTOR_SKILL_SEARCH_QUERY_MAX_CHARS).",
                details={"rule": "query-too-long", "field": "q", "max_chars": limit},
            )
        query, truncated = query[:limit], True
    cleaned = "".join(" " if (ord(c) < 32 or ord(c) == 127) else c for c in query).strip()
    if not cleaned:
        raise SkillSearchQueryInvalid(
            "The query is empty: say what the skill should do.",
            details={"rule": "query-empty", "field": "q"},
        )
    return cleaned, truncated


@dataclass
class SkillHit:
    """One ranked skill. `score` ranks the hits: the fused RRF score when the search was hybrid,
    the BM25 score when it was lexical only. The component scores and ranks (1-based) are None
    where that ranking did not return the skill."""

    name: str
    description: str
    version: int
    score: float
    lexical_score: float | None = None
    lexical_rank: int | None = None
    dense_score: float | None = None
    dense_rank: int | None = None
    status: str | None = None
    disabled: bool = False
    skill_id: int = field(default=0, repr=False)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("skill_id")
        return data


@dataclass
class SkillSearchResult:
    """The hits, best first, and how they were found: `mode` is "hybrid" or "lexical";
    `dense_error` says why a configured dense half did not take part."""

    query: str
    truncated: bool
    mode: str
    k: int
    hits: list[SkillHit]
    took_ms: float
    dense_error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "truncated": self.truncated,
            "mode": self.mode,
            "k": self.k,
            "took_ms": round(self.took_ms, 3),
            "dense_error": self.dense_error,
            "hits": [h.as_dict() for h in self.hits],
        }


_visible_cache: dict[tuple[int, int, bool], frozenset[int]] = {}
_visible_lock = threading.Lock()


def visible_skill_ids(*, agent: Any, include_shared: bool, generation: int) -> frozenset[int]:
    """Ids of the skills `agent` may see (its policies; with `include_shared`, its owner's other
    agents' too), cached per visibility generation."""
    key = (generation, int(agent.pk), include_shared)
    with _visible_lock:
        hit = _visible_cache.get(key)
    if hit is not None:
        return hit
    own = set(Policy.objects.filter(agent_id=agent.pk).values_list("skill_id", flat=True))
    if include_shared and getattr(agent, "owner_id", None) is not None:
        own |= set(
            Policy.objects.filter(agent__owner_id=agent.owner_id).values_list("skill_id", flat=True)
        )
    ids = frozenset(own)
    with _visible_lock:
        for stale in [k for k in _visible_cache if k[0] != generation]:
            del _visible_cache[stale]
        _visible_cache[key] = ids
    return ids


def _policy_statuses(*, agent_id: int, skill_ids: list[int]) -> dict[int, tuple[str, bool]]:
    """{skill_id: (status, disabled)} of the agent's policies among `skill_ids` (raw SQL: this
    runs on every search and the ORM's query compilation would be most of its cost)."""
    table = Policy._meta.db_table
    marks = ", ".join(["%s"] * len(skill_ids))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT skill_id, status, disabled_at IS NOT NULL FROM {table} "  # noqa: S608
            f"WHERE agent_id = %s AND skill_id IN ({marks})",
            [agent_id, *skill_ids],
        )
        return {int(sid): (str(st), bool(dis)) for sid, st, dis in cursor.fetchall()}


def _fuse(
    lexical_hits: list[tuple[int, float]], dense_hits: list[tuple[int, float]]
) -> dict[int, float]:
    fused: dict[int, float] = {}
    for ranking in (lexical_hits, dense_hits):
        for rank, (skill_id, _) in enumerate(ranking, start=1):
            fused[skill_id] = fused.get(skill_id, 0.0) + 1.0 / (RRF_K + rank)
    return fused


def skill_search(
    *,
    query: str,
    agent: Any | None,
    k: int | None = None,
    include_shared: bool = True,
    over_limit: Literal["truncate", "refuse"] = "truncate",
) -> SkillSearchResult:
    """The `k` (default MOTOR_SKILL_SEARCH_TOP_K) skills that best fit `query` among those
    `agent` may see (`agent` None: every skill, for staff), best first, with their scores.

    Raises `SkillSearchQueryInvalid` for an empty query (and, with `over_limit="refuse"`, a too
    long one). Never fails because of the embeddings endpoint: the search is then lexical and
    `dense_error` says why.
    """
    started = time.perf_counter()
    text, truncated = query_normalise(query, over_limit=over_limit)
    k = int(settings.MOTOR_SKILL_SEARCH_TOP_K if k is None else k)
    if not 1 <= k <= MAX_K:
        raise SkillSearchQueryInvalid(
            f"k must be between 1 and {MAX_K}.", details={"rule": "k-range", "field": "k"}
        )
    gens = generations()
    visible = (
        None
        if agent is None
        else visible_skill_ids(
            agent=agent,
            include_shared=include_shared,
            generation=gens.get(IndexGeneration.VISIBILITY, 0),
        )
    )
    depth = max(MIN_CANDIDATES, 5 * k)
    index = lexical.lexical_index(generation=gens.get(IndexGeneration.DOCUMENTS, 0))
    visible_key = (
        None
        if agent is None
        else (gens.get(IndexGeneration.VISIBILITY, 0), int(agent.pk), include_shared)
    )
    lexical_hits = index.candidates(
        tokenize(text), visible=visible, limit=depth, visible_key=visible_key
    )

    dense_hits: list[tuple[int, float]] = []
    dense_error = ""
    mode = "lexical"
    if embeddings.configured():
        try:
            [query_vector] = embeddings.embed([text])
        except embeddings.EmbeddingsUnavailable as exc:
            dense_error = str(exc)
        else:
            if vectors.connection.vendor == "postgresql" and not vectors.pgvector_ready():
                dense_error = "pgvector is not installed on this PostgreSQL server."
            else:
                mode = "hybrid"
                dense_hits = vectors.dense_candidates(
                    query_vector=query_vector,
                    model=embeddings.model_name(),
                    visible=visible,
                    limit=depth,
                    generation=(
                        gens.get(IndexGeneration.EMBEDDINGS, 0),
                        gens.get(IndexGeneration.DOCUMENTS, 0),
                    ),
                )

    if mode == "hybrid":
        scores = _fuse(lexical_hits, dense_hits)
    else:
        scores = dict(lexical_hits)
    order = sorted(scores, key=lambda sid: (-scores[sid], sid))[:k]
    lex = {sid: (rank, s) for rank, (sid, s) in enumerate(lexical_hits, start=1)}
    den = {sid: (rank, s) for rank, (sid, s) in enumerate(dense_hits, start=1)}
    statuses: dict[int, tuple[str, bool]] = {}
    if agent is not None and order:
        statuses = _policy_statuses(agent_id=int(agent.pk), skill_ids=order)
    hits = []
    for sid in order:
        facts = index.facts.get(sid)
        if facts is None:  # embedded but not in this lexical generation (changed meanwhile)
            continue
        name, description, version = facts
        status, disabled = statuses.get(sid, (NOT_YET_YOURS if agent is not None else None, False))
        hits.append(
            SkillHit(
                skill_id=sid,
                name=name,
                description=description,
                version=version,
                score=scores[sid],
                lexical_rank=lex[sid][0] if sid in lex else None,
                lexical_score=lex[sid][1] if sid in lex else None,
                dense_rank=den[sid][0] if sid in den else None,
                dense_score=den[sid][1] if sid in den else None,
                status=status,
                disabled=disabled,
            )
        )
    return SkillSearchResult(
        query=text,
        truncated=truncated,
        mode=mode,
        k=k,
        hits=hits,
        took_ms=(time.perf_counter() - started) * 1000,
        dense_error=dense_error,
    )


__all__ = [
    "SkillHit",
    "SkillSearchQueryInvalid",
    "SkillSearchResult",
    "query_normalise",
    "skill_search",
]
