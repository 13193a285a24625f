"""The skill index: hybrid (BM25 + optional dense) retrieval over every installed skill (seed 002
§9, stage 1).

- `documents` — what a skill version is indexed from (name, description, SKILL.md headings,
  keywords, example queries; hooks for the MCP manifest and tool docstrings);
- `text` — the tokenizer shared by documents and queries;
- `store` — entries written on install / new version / rollback and removed with the skill
  (model signals), and the generation counters;
- `lexical` — the in-process BM25 index (bm25s), rebuilt when the documents generation moves;
- `embeddings`, `vectors` — the OpenAI-compatible embeddings client; pgvector on PostgreSQL,
  in-process comparison on SQLite;
- `search` — `skill_search(query=, agent=, k=)`: visibility by the agent's policies, reciprocal
  rank fusion, ranked hits with their scores.

Kept import-free so `skills.models` can import `skills.index.models` while the app loads.
"""
