"""Trust levels of an agent (seed 004), ordered from least to most autonomous.

observe          reads only: every call with a side effect is refused
suggest          every call waits for the owner's approval
supervised_auto  low and medium risk run; high risk waits for approval (a new agent's level)
bounded_auto     everything runs but what a manifest marks requires_approval

No level skips `requires_approval`. Plain Python so the pure decision can use it; the Agent
model's choices are built from it.
"""

from __future__ import annotations

from enum import StrEnum


class TrustLevel(StrEnum):
    OBSERVE = "observe"
    SUGGEST = "suggest"
    SUPERVISED_AUTO = "supervised_auto"
    BOUNDED_AUTO = "bounded_auto"

    @property
    def rank(self) -> int:
        return _ORDER.index(self)

    @property
    def label(self) -> str:
        return self.value.replace("_", " ").capitalize()


_ORDER = (
    TrustLevel.OBSERVE,
    TrustLevel.SUGGEST,
    TrustLevel.SUPERVISED_AUTO,
    TrustLevel.BOUNDED_AUTO,
)

DEFAULT_TRUST_LEVEL = TrustLevel.SUPERVISED_AUTO

#: How the earlier levels (which nothing read) map onto these (data migration).
LEGACY_LEVELS: dict[str, TrustLevel] = {
    "untrusted": TrustLevel.SUGGEST,
    "standard": TrustLevel.SUPERVISED_AUTO,
    "trusted": TrustLevel.BOUNDED_AUTO,
}

#: The Django permission a staff user needs to change an agent's trust level.
TRUST_PERMISSION = "cognition.change_trust_level"
