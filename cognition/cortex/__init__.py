"""The skill cortex (seed 003): what an agent learned about which skill serves which task.

Modules:
- models.py — Cortex (the per-agent row every update locks), CortexRegion (a capability area and
  its sensory pattern), CortexCandidate (a skill with its learned weight), CortexLesson (the three
  structured prefrontal lessons), CortexOutcome (the ledger that makes learning idempotent),
  CortexFollowUp (what an outcome obliges the cortex to do next);
- sensory.py — signal words of a task, with concrete entities removed;
- perception.py — `perceive`: the ranked candidates for a task, or a miss (plain search then);
- learning.py — `record_acquired`, `learn`: the Phase 4 formulas, lessons, reflex promotion;
- failures.py — failure classes from a run's failure summary, and the recovery rules;
- plan.py — side effects and their severity from the review facts; the execution plan;
- follow_ups.py — the release and the api_error retry an outcome calls for, written with the
  learning (an outbox) and carried out exactly once by the hook, a countdown task or the sweep;
- cleanup.py — release after use, the retention suggestion, retain / re-activate;
- pruning.py — the limits of §4.6, applied inside every update;
- locking.py — one transaction per update, under the agent's Cortex row lock;
- hook.py — learning from motor_result signals (a brain hook; at-least-once delivery).

The functions below are the interface other parts of cognition call. They import lazily: this
package's models are imported while the app registry loads (cognition.models).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cognition.models import Agent
    from runs.models import MotorRun
    from skills.models import SkillVersion

    from .learning import LearnResult
    from .models import CortexCandidate
    from .perception import Perception


def perceive(*, agent: Agent, task: str, now: datetime | None = None) -> Perception:
    """The cortex's answer for `task`: on a hit, the candidates of the matched region(s) sorted
    by effective weight (below 0.3 dropped) and whether the top one may take the reflex path;
    on a miss — or when the cortex is missing or corrupt (`degraded`) — no candidates and the
    plain skill-index search for the task. Never raises for the cortex's own state."""
    from .perception import perceive as _perceive

    return _perceive(agent=agent, task=task, now=now)


def record_acquired(
    *,
    agent: Agent,
    task: str,
    skill_version: SkillVersion,
    source: str,
    region: str | None = None,
    now: datetime | None = None,
) -> CortexCandidate:
    """After an acquired skill was installed on the user's yes: make `region` (default: named
    from the task's signal words), merge the task's signal words into its pattern (a sensory
    miss), and add the skill as a candidate at the initial weight 0.5 (an existing candidate of
    that region keeps its weight and gets the new version). One transaction; pruned after."""
    from .learning import record_acquired as _record

    return _record(
        agent=agent, task=task, skill_version=skill_version, source=source, region=region, now=now
    )


def learn(
    *, agent: Agent, run: MotorRun, key: str, now: datetime | None = None
) -> LearnResult | None:
    """Learn from the end of `run` (completed: success; failed: its failure class). `key` names
    the outcome (a motor_result signal: "signal:<id>"): an outcome learned before is a no-op
    (None), as is a run of a skill the cortex does not hold (a long-term skill) or a cancel."""
    from .learning import learn as _learn

    return _learn(agent=agent, run=run, key=key, now=now)


def execution_plan(*, agent: Agent, skill: str, task: str) -> dict[str, Any]:
    """The plan shown before a standard-mode run of `skill` for `task`: step summary,
    side-effect severity from the review facts, relevant lessons, and the reflex decision."""
    from .plan import execution_plan as _plan

    return _plan(agent=agent, skill=skill, task=task)


__all__ = ["execution_plan", "learn", "perceive", "record_acquired"]
