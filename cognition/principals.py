"""Who is calling: an agent (through its API token) or a human user (session or personal token).

The API attaches a `Principal` as `request.auth`; services and the core.* tools take it as an
argument instead of guessing from `request.user`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from django.contrib.auth.models import AbstractBaseUser

from .models import Agent


@dataclass(frozen=True)
class Principal:
    kind: Literal["agent", "human"]
    agent: Agent | None
    user: AbstractBaseUser  # for an agent: its owner, recorded in audits, never used for access

    @classmethod
    def for_agent(cls, agent: Agent) -> Principal:
        return cls(kind="agent", agent=agent, user=agent.owner)

    @classmethod
    def for_human(cls, user: AbstractBaseUser) -> Principal:
        return cls(kind="human", agent=None, user=user)

    @property
    def is_agent(self) -> bool:
        return self.kind == "agent"

    @property
    def is_human(self) -> bool:
        return self.kind == "human"

    @property
    def label(self) -> str:
        if self.agent is not None:
            return f"agent:{self.agent.name}"
        return f"api:{self.user.get_username()}"
