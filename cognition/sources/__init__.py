"""Skill sources and acquisition on a miss (seed 003 Phase 1.3 and 3.1).

When no installed skill covers a task, the agent searches the configured skill sources — a
local directory (or a git checkout) of a skill registry, and HTTP registries with a
ClawHub-shaped search and download API — and presents at most three candidates, each with the
deterministic review of its files. Nothing is installed until the user says yes; installing is
an import (pending_review) followed by the review and the user's approval of that exact
version, recorded in the audit trail as an acquisition.

- `models` — `SkillSource` (configured in the admin) and `SkillAcquisition` (one proposal and
  what became of it);
- `fetching` — bounded HTTP (a deadline for the whole exchange, a byte cap on every body);
- `registries` — one reader per source kind: search, then fetch one skill's archive or files;
- `candidates` — search every source for a task and review the best three;
- `acquisition` — the user's yes: install, approve, and switch on a failure (at most twice).
"""
