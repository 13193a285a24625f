"""State changes of the brain side. Keyword-only, typed, one transaction each."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from .models import Agent, hash_token, new_token


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A freshly issued API token. `raw` is shown once and never stored."""

    agent: Agent
    raw: str


def agent_create(*, name: str, owner: AbstractBaseUser, actor: AbstractBaseUser | None) -> Agent:
    """Create an agent identity without a token (issue one with agent_issue_token)."""
    agent = Agent(name=name, owner=owner)
    agent.full_clean()
    agent.save()
    return agent


def agent_issue_token(*, agent: Agent, actor: AbstractBaseUser | None) -> IssuedToken:
    """Issue a new API token for `agent`, replacing any previous one.

    Only the sha256 of the token is stored; the raw value is returned once.
    """
    raw = new_token()
    with transaction.atomic():
        locked = Agent.objects.select_for_update().get(pk=agent.pk)
        locked.token_hash = hash_token(raw)
        locked.token_prefix = raw[:10]
        locked.token_created_at = timezone.now()
        locked.token_revoked_at = None
        locked.save(
            update_fields=["token_hash", "token_prefix", "token_created_at", "token_revoked_at"]
        )
    return IssuedToken(agent=locked, raw=raw)


def agent_revoke_token(*, agent: Agent, actor: AbstractBaseUser | None) -> Agent:
    """Revoke the agent's token: it stops authenticating at once."""
    with transaction.atomic():
        locked = Agent.objects.select_for_update().get(pk=agent.pk)
        locked.token_hash = ""
        locked.token_revoked_at = timezone.now()
        locked.save(update_fields=["token_hash", "token_revoked_at"])
    return locked
