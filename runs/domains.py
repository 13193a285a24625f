"""Allowed-domain entries of a run, checked with the egress policy's own parser.

A run's `allowed_domains` become its sandbox's egress policy. Checking them here, with the very
parser the proxy uses (sandbox.egress.validate_domains), means an entry the proxy would refuse is
refused when the run is asked for — before anything is created or charged — rather than when the
sandbox opens, where it could only fail the run.
"""

from __future__ import annotations

from collections.abc import Sequence

from sandbox.egress import PolicyError, validate_domains

from .errors import InvalidRunParams


def check_allowed_domains(domains: Sequence[object], *, field: str = "allowed_domains") -> None:
    """Raise InvalidRunParams naming the first entry the egress policy refuses, and its rule
    (details: field, rule, value)."""
    try:
        validate_domains(domains)
    except PolicyError as exc:
        raise InvalidRunParams(
            f"{field}: {exc} (rule: {exc.rule})", field=field, rule=exc.rule, value=exc.entry
        ) from None
