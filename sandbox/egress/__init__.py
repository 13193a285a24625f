"""Host-side egress control: one decision function and the per-session proxy using it.

Flow for every destination, however it arrives: canonicalize_host → decide (allowlist, no DNS)
→ resolve_checked (one lookup, every address checked) → dial (the checked address only).
"""

from __future__ import annotations

from sandbox.egress.addresses import (
    Resolver,
    forbidden_reason,
    is_forbidden_address,
    own_addresses,
    system_resolver,
)
from sandbox.egress.decision import (
    REASONS,
    Decision,
    EgressDenied,
    PolicyError,
    connect_checked,
    decide,
    decide_authority,
    dial,
    not_allowlisted_message,
    resolve_checked,
    validate_policy,
)
from sandbox.egress.hostnames import HostRejected, canonicalize_host, split_authority
from sandbox.egress.proxy import EGRESS_HEADER, EgressProxy

__all__ = [
    "EGRESS_HEADER",
    "REASONS",
    "Decision",
    "EgressDenied",
    "EgressProxy",
    "HostRejected",
    "PolicyError",
    "Resolver",
    "canonicalize_host",
    "connect_checked",
    "decide",
    "decide_authority",
    "dial",
    "forbidden_reason",
    "is_forbidden_address",
    "not_allowlisted_message",
    "own_addresses",
    "resolve_checked",
    "split_authority",
    "system_resolver",
    "validate_policy",
]
