"""Host-side egress control: one decision function and the per-session proxy using it.

Flow for every destination, however it arrives: canonicalize_host → decide (allowlist, no DNS)
→ resolve_checked (one lookup, every address checked) → dial (the checked address only).
Host-side callers (the fetch tool outside a sandbox) use connect_checked, which does all four.

What a client of EgressProxy sees when it is refused:
  * status 403 (policy), 503 (tunnel cap), 502 (name did not resolve / upstream did not answer),
    400/405 (not a request the proxy serves);
  * header ``X-Motor-Egress: denied; reason=<code>`` for refusals by rule, or
    ``X-Motor-Egress: error; reason=<code>`` for failures; codes are in REASONS;
  * the sentence for the model (e.g. "evil.test is not in this run's allowed domains; use
    ask_user to request it") as the body AND as the status line's reason phrase, because CONNECT
    clients often drop the body (Python: "Tunnel connection failed: 403 <sentence>"; curl exits
    56 with "CONNECT tunnel failed, response 403").
An established tunnel cut later (byte cap, idle timeout, SNI that is not the CONNECT host) just
closes; the ConnectionReport says why. Reports carry verdict "allowed" when bytes could flow.
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
    POLICY_RULES,
    REASONS,
    AllowlistEntry,
    Decision,
    EgressDenied,
    PolicyError,
    connect_checked,
    decide,
    decide_authority,
    dial,
    not_allowlisted_message,
    parse_allowlist_entry,
    resolve_checked,
    validate_domains,
    validate_policy,
)
from sandbox.egress.hostnames import HostRejected, canonicalize_host, split_authority
from sandbox.egress.http_heads import EGRESS_HEADER
from sandbox.egress.proxy import EgressProxy

__all__ = [
    "EGRESS_HEADER",
    "POLICY_RULES",
    "REASONS",
    "AllowlistEntry",
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
    "parse_allowlist_entry",
    "resolve_checked",
    "split_authority",
    "system_resolver",
    "validate_domains",
    "validate_policy",
]
