"""Who must approve a generated skill (seed 002 §7), as one pure function.

Tiers, from the most to the least demanding; the first rule that matches decides:

=================  ===================================================  ==========================
rule               when                                                 needs
=================  ===================================================  ==========================
credentials        the manifest's [auth] names any vault entry          explicit approval
write_semantics    any tool is not declared read-only                   explicit approval
owner_domains      a domain is not on the public API list               domain confirmation
public_read        read-only tools reaching public API domains only     none (auto at trust level)
pure_computation   no network, no credentials, read-only tools          none (auto at trust level)
=================  ===================================================  ==========================

"none" still asks a human unless the agent's trust level allows automatic approval
(`AUTO_APPROVE_LEVELS`: bounded_auto only; a new agent starts lower, so by default every
generated skill is approved by a person, keeping seed 000's rule).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from skills.approval import domain_covered
from skills.toolpolicy.trust import TrustLevel

#: trust levels at which a skill needing no approval is approved without a person
AUTO_APPROVE_LEVELS = frozenset({TrustLevel.BOUNDED_AUTO})


class Needs(StrEnum):
    NONE = "none"
    CONFIRM_DOMAINS = "confirm_domains"
    EXPLICIT = "explicit"


class Semantics(StrEnum):
    READ = "read"
    WRITE = "write"


@dataclass(frozen=True, slots=True)
class ApprovalDecision:
    """What approving a skill takes: `needs`, the `rule` that decided it, and whether it is
    approved right away (`auto`)."""

    needs: Needs
    rule: str
    auto: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "needs": str(self.needs)}


def approval_decision(
    *,
    domains: Sequence[str],
    credentials: Sequence[str],
    semantics: Iterable[str],
    trust_level: str,
    public_domains: Sequence[str],
) -> ApprovalDecision:
    """The approval a skill with these permissions needs at `trust_level` (see the table)."""
    semantics = [str(s) for s in semantics]
    if credentials:
        return ApprovalDecision(
            Needs.EXPLICIT,
            "credentials",
            False,
            f"it uses the credential(s) {', '.join(credentials)}",
        )
    if any(s != Semantics.READ for s in semantics):
        return ApprovalDecision(
            Needs.EXPLICIT, "write_semantics", False, "a tool is not declared read-only"
        )
    private = [d for d in domains if not domain_covered(d, public_domains)]
    if private:
        return ApprovalDecision(
            Needs.CONFIRM_DOMAINS,
            "owner_domains",
            False,
            f"it reaches {', '.join(private)}, which is not a known public API",
        )
    auto = trust_level in AUTO_APPROVE_LEVELS
    rule = "public_read" if domains else "pure_computation"
    where = f"public APIs only ({', '.join(domains)})" if domains else "no network"
    return ApprovalDecision(
        Needs.NONE,
        rule,
        auto,
        f"read-only, {where}, no credentials"
        + ("" if auto else f"; trust level {trust_level} asks a person"),
    )
