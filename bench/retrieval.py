"""Skill retrieval: quality and speed of the skill index at 1,000 / 2,500 / 10,000 skills.

Run by hand:

    uv run python -m bench.retrieval                       # SQLite in a temporary file
    uv run python -m bench.retrieval --postgres postgres://postgres@127.0.0.1:5432
    uv run python -m bench.retrieval --sizes 1000 --rounds 3

For each size it builds a fresh database with the 40 hand-written target skills of
bench/retrieval_corpus.py among generated distractors that share their vocabulary, indexes them
(manage.py skill_index --rebuild's function), then asks the 50 natural-language queries whose
answers are known, as an agent holding a policy for every skill (lexical retrieval only: no
embeddings endpoint). Prints recall@10, MRR and p50/p95 query latency, against baselines from
the same run: today's <available_skills> (the first 100 skills by name; recall@10 = the answer
among the first 10 names) and a single-row primary-key lookup of a skill. On SQLite it also
times the in-process dense vectors: building the matrix from every stored vector, and catching
up after one vector changed (an install or a new version).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

TARGET_RECALL = 0.9
TARGET_P95_MS = 50.0
TARGET_INDEX_2500_S = 30.0
LISTED_TODAY = 100  # cognition.brain.prompts.MAX_LISTED_SKILLS


def _setup(database_url: str) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DEBUG", "true")
    os.environ.setdefault("SECRET_KEY", "bench-" + uuid.uuid4().hex)
    os.environ["EMBEDDINGS_MODEL"] = ""  # lexical only
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import logging

    import django

    django.setup()
    logging.getLogger("bm25s").setLevel(logging.WARNING)


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def populate(n: int) -> tuple[object, float]:
    """`n` skills (the targets + generated ones), each with one version, one SKILL.md and a
    policy for one agent; returns (agent, seconds)."""
    from django.contrib.auth import get_user_model
    from django.db import transaction

    from bench.retrieval_corpus import TARGETS, distractors
    from cognition.models import Agent
    from skills.bundle import bundle_from_files
    from skills.models import Policy, Skill, SkillFile, SkillVersion

    started = time.perf_counter()
    specs = TARGETS + distractors(n - len(TARGETS))
    with transaction.atomic():
        user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:8]}")
        agent = Agent.objects.create(name=f"bench-{uuid.uuid4().hex[:8]}", owner=user)
        bundles = [
            bundle_from_files({"SKILL.md": s.skill_md().encode()}, dir_name=s.name) for s in specs
        ]
        skills = Skill.objects.bulk_create(
            Skill(name=b.name, description=b.description, source="local") for b in bundles
        )
        versions = SkillVersion.objects.bulk_create(
            SkillVersion(
                skill=skill,
                number=1,
                content_hash=b.content_hash,
                description=b.description,
                frontmatter=dict(b.frontmatter),
                created_by_label="bench",
            )
            for skill, b in zip(skills, bundles, strict=True)
        )
        SkillFile.objects.bulk_create(
            SkillFile(version=v, path=f.path, size=f.size, sha256=f.sha256, data=f.data)
            for v, b in zip(versions, bundles, strict=True)
            for f in b.files
        )
        for skill, version in zip(skills, versions, strict=True):
            skill.current_version = version
        Skill.objects.bulk_update(skills, ["current_version"], batch_size=1000)
        Policy.objects.bulk_create(Policy(skill=s, agent=agent) for s in skills)
    return agent, time.perf_counter() - started


DENSE_DIMS = 256
DENSE_MODEL = "bench-embed"


def dense_timings(n: int) -> dict[str, float | None]:
    """SQLite only (PostgreSQL compares in pgvector): the in-process vectors' cost. Every entry
    gets a random unit vector (as the embedding task stores them; no endpoint is called); then
    `dense_build_ms` is reading all of them into a new matrix (what every change cost before the
    matrix was incremental) and `dense_catchup_ms` the median of 20 catch-ups after one entry's
    vector was replaced (an install or a new version: one narrow read, one vector fetched)."""
    from django.db import connection

    if connection.vendor != "sqlite":
        return {"dense_build_ms": None, "dense_catchup_ms": None}
    import numpy as np

    from skills.index.models import SkillIndexEntry
    from skills.index.vectors import DenseMatrix, vectors_store

    rng = np.random.default_rng(7)

    def unit() -> list[float]:
        v = rng.standard_normal(DENSE_DIMS)
        return (v / np.linalg.norm(v)).tolist()

    rows = list(SkillIndexEntry.objects.order_by("id").values_list("id", "text_hash"))
    for start in range(0, len(rows), 1000):
        chunk = rows[start : start + 1000]
        vectors_store(model=DENSE_MODEL, rows=[(i, h, unit()) for i, h in chunk])
    started = time.perf_counter()
    matrix = DenseMatrix(model=DENSE_MODEL, dims=DENSE_DIMS)
    matrix.refresh()
    build_ms = (time.perf_counter() - started) * 1000
    assert len(matrix) == n, (len(matrix), n)
    catchups: list[float] = []
    for entry_id, digest in rows[:20]:
        vectors_store(model=DENSE_MODEL, rows=[(entry_id, digest, unit())])
        t = time.perf_counter()
        matrix.refresh()
        catchups.append((time.perf_counter() - t) * 1000)
        assert matrix.rows_fetched == 1
    return {"dense_build_ms": build_ms, "dense_catchup_ms": statistics.median(catchups)}


def measure(n: int, rounds: int) -> dict[str, float]:
    from bench.retrieval_corpus import QUERIES
    from skills.index.search import skill_search
    from skills.index.store import index_rebuild, skill_index
    from skills.models import Skill

    agent, populate_s = populate(n)
    started = time.perf_counter()
    indexed = index_rebuild()
    index_s = time.perf_counter() - started
    assert indexed == n, (indexed, n)

    started = time.perf_counter()
    skill_search(query="warm up the index", agent=agent)
    cold_ms = (time.perf_counter() - started) * 1000

    # the install hook's cost per skill (re-indexing 100 skills one by one)
    sample = list(Skill.objects.select_related("current_version").order_by("?")[:100])
    started = time.perf_counter()
    for skill in sample:
        skill_index(skill=skill)
    hook_ms = (time.perf_counter() - started) * 1000 / len(sample)
    skill_search(query="warm up the index again", agent=agent)
    # the first search after one install, in a process whose index was current before it
    # (the catch-up reads every entry's stamp and the changed entry's terms)
    from skills.index.store import generation_bump

    catchups: list[float] = []
    for skill in sample[:20]:
        skill_index(skill=skill)
        generation_bump("documents")
        t = time.perf_counter()
        skill_search(query="warm up the index again", agent=agent)
        catchups.append((time.perf_counter() - t) * 1000)

    ranks: list[int | None] = []
    for query, answer in QUERIES:
        names = [h.name for h in skill_search(query=query, agent=agent, k=10).hits]
        ranks.append(names.index(answer) + 1 if answer in names else None)
    recall = sum(r is not None for r in ranks) / len(ranks)
    mrr = sum(1 / r for r in ranks if r is not None) / len(ranks)

    latencies: list[float] = []
    staff: list[float] = []
    for _ in range(rounds):
        for query, _answer in QUERIES:
            t = time.perf_counter()
            skill_search(query=query, agent=agent, k=10)
            latencies.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            skill_search(query=query, agent=None, k=10)
            staff.append((time.perf_counter() - t) * 1000)

    names_sorted = list(Skill.objects.order_by("name").values_list("name", flat=True))
    listed = set(names_sorted[:LISTED_TODAY])
    first10 = set(names_sorted[:10])
    base_listed = sum(a in listed for _, a in QUERIES) / len(QUERIES)
    base_recall = sum(a in first10 for _, a in QUERIES) / len(QUERIES)
    lookups: list[float] = []
    for _ in range(rounds):
        for _query, answer in QUERIES:
            t = time.perf_counter()
            Skill.objects.get(name=answer)
            lookups.append((time.perf_counter() - t) * 1000)

    missed = [q for (q, _), r in zip(QUERIES, ranks, strict=True) if r is None]
    dense = dense_timings(n)
    return {
        **dense,  # type: ignore[dict-item]
        "n": n,
        "populate_s": populate_s,
        "index_s": index_s,
        "hook_ms": hook_ms,
        "cold_ms": cold_ms,
        "catchup_ms": statistics.median(catchups),
        "recall": recall,
        "mrr": mrr,
        "p50": statistics.median(latencies),
        "p95": pct(latencies, 0.95),
        "staff_p50": statistics.median(staff),
        "staff_p95": pct(staff, 0.95),
        "base_listed": base_listed,
        "base_recall": base_recall,
        "lookup_p50": statistics.median(lookups),
        "lookup_p95": pct(lookups, 0.95),
        "missed": missed,  # type: ignore[dict-item]
    }


def fresh_database(postgres: str | None) -> tuple[str, str]:
    """(database URL, what to remove afterwards: a directory for SQLite, a database name)."""
    if postgres is None:
        directory = tempfile.mkdtemp(prefix="bench-retrieval-")
        return f"sqlite:///{directory}/bench.sqlite3", directory
    name = f"motor_bench_retrieval_{os.getpid()}"
    return f"{postgres.rstrip('/')}/{name}", name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,2500,10000")
    parser.add_argument("--rounds", type=int, default=5, help="passes over the query set")
    parser.add_argument("--postgres", help="server URL; a throwaway database is made there")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    url, pg_name = fresh_database(args.postgres)
    if args.postgres:
        import psycopg

        with psycopg.connect(args.postgres, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{pg_name}"')
    _setup(url)
    from django.core.management import call_command
    from django.db import connection

    vendor = connection.vendor
    try:
        call_command("migrate", verbosity=0)
        results = []
        for n in sizes:
            from skills.models import Skill

            Skill.objects.all().delete()
            results.append(measure(n, args.rounds))
    finally:
        connection.close()
        if args.postgres:
            import psycopg

            # FORCE: the connection pool may still hold sessions of this process
            with psycopg.connect(args.postgres, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{pg_name}" WITH (FORCE)')
        else:
            shutil.rmtree(pg_name, ignore_errors=True)

    print(
        f"database: {vendor}; lexical only; {args.rounds} passes over 50 queries; "
        "40 targets, 120 near misses, the rest generated"
    )
    print()
    head = (
        f"{'skills':>7} {'recall@10':>9} {'MRR':>6} {'p50 ms':>7} {'p95 ms':>7} "
        f"{'staff p95':>9} {'cold ms':>8} {'catch-up ms':>11} {'index s':>8} {'hook ms':>8}"
    )
    print(head)
    print("-" * len(head))
    for r in results:
        print(
            f"{r['n']:>7} {r['recall']:>9.3f} {r['mrr']:>6.3f} {r['p50']:>7.2f} {r['p95']:>7.2f} "
            f"{r['staff_p95']:>9.2f} {r['cold_ms']:>8.1f} {r['catchup_ms']:>11.1f} "
            f"{r['index_s']:>8.2f} {r['hook_ms']:>8.2f}"
        )
    print()
    print("baselines (same run)")
    head = (
        f"{'skills':>7} {'listed today':>12} {'first-10 recall':>15} {'pk lookup p50/p95 ms':>21}"
    )
    print(head)
    print("-" * len(head))
    for r in results:
        print(
            f"{r['n']:>7} {r['base_listed']:>12.3f} {r['base_recall']:>15.3f} "
            f"{r['lookup_p50']:>10.2f}/{r['lookup_p95']:<10.2f}"
        )
    print()
    print(f"{'ratio / target':<46} {'value':>8} {'target':>9}  verdict")
    for r in results:
        n = r["n"]
        rows = [
            (f"recall@10 at {n}", r["recall"], f">={TARGET_RECALL}", r["recall"] >= TARGET_RECALL),
            (
                f"p95 query / p95 pk lookup at {n}",
                r["p95"] / r["lookup_p95"],
                "-",
                None,
            ),
        ]
        if n >= 10_000:
            rows.append(
                (
                    f"p95 query ms at {n}",
                    r["p95"],
                    f"<={TARGET_P95_MS:g}",
                    r["p95"] <= TARGET_P95_MS,
                )
            )
        if n == 2500:
            rows.append(
                (
                    f"indexing s at {n}",
                    r["index_s"],
                    f"<={TARGET_INDEX_2500_S:g}",
                    r["index_s"] <= TARGET_INDEX_2500_S,
                )
            )
        for label, value, target, ok in rows:
            verdict = "" if ok is None else ("met" if ok else "NOT met")
            print(f"{label:<46} {value:>8.3f} {target:>9}  {verdict}")
    if vendor == "sqlite":
        print()
        print(f"dense vectors in process (SQLite; {DENSE_DIMS} dims, random unit vectors)")
        head = f"{'skills':>7} {'full build ms':>13} {'catch-up ms':>11} {'ratio':>7}"
        print(head)
        print("-" * len(head))
        for r in results:
            build, catchup = r["dense_build_ms"], r["dense_catchup_ms"]
            print(f"{r['n']:>7} {build:>13.1f} {catchup:>11.2f} {build / catchup:>7.0f}")
    for r in results:
        if r["missed"]:
            print(f"missed at {r['n']}: " + "; ".join(r["missed"]))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
