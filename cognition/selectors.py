"""Reads of the brain side."""

from __future__ import annotations

import hmac

from .models import Agent, hash_token


def agent_by_token(*, raw: str) -> Agent | None:
    """The agent whose live (not revoked) token is `raw`, or None."""
    if not raw:
        return None
    digest = hash_token(raw)
    agent = Agent.objects.filter(token_hash=digest).first()
    # the lookup is by digest; the constant-time compare guards against timing on the index
    if agent is None or not hmac.compare_digest(agent.token_hash, digest):
        return None
    return agent
