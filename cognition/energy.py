"""Energy of an agent (seed 001 "Energy Model"): flat drains, gating bands, lazy regeneration.

Bands, with the boundaries decided as follows (a level exactly on a boundary belongs to the band
the seed's table lists it in, reading "0.3 - 0.5" and "0.05 - 0.3" as closed below):
  level > 0.5          every task (oneshot, agentic, agentic with browser)
  0.3 <= level <= 0.5  oneshot and agentic without the browser tool
  0.05 <= level < 0.3  oneshot only
  level < 0.05         nothing ("too tired to act")
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from .errors import EnergyTooLow
from .models import Agent

logger = logging.getLogger(__name__)


class Mode(StrEnum):
    ONESHOT = "oneshot"
    AGENTIC = "agentic"


# Flat cost per created run (seed 001 Phase 1), in energy units of the 0.0-1.0 scale.
DRAIN: dict[Mode, float] = {Mode.ONESHOT: 0.05, Mode.AGENTIC: 0.15}

ALL_ABOVE = 0.5
NO_BROWSER_FROM = 0.3
ONESHOT_FROM = 0.05
# Stored levels are rounded so repeated drains do not accumulate float noise (0.35 - 0.15).
_PRECISION = 6  # decimal places


class Band(StrEnum):
    ALL = "all"
    NO_BROWSER = "no_browser"
    ONESHOT_ONLY = "oneshot_only"
    EXHAUSTED = "exhausted"


def band_for(level: float) -> Band:
    if level > ALL_ABOVE:
        return Band.ALL
    if level >= NO_BROWSER_FROM:
        return Band.NO_BROWSER
    if level >= ONESHOT_FROM:
        return Band.ONESHOT_ONLY
    return Band.EXHAUSTED


def allows(level: float, *, mode: Mode | str, tools: Iterable[str] = ()) -> bool:
    """Whether an agent at `level` may start a run of `mode` granted `tools`."""
    band = band_for(level)
    mode = Mode(mode)
    if band is Band.ALL:
        return True
    if band is Band.NO_BROWSER:
        return mode is Mode.ONESHOT or "browser" not in set(tools)
    if band is Band.ONESHOT_ONLY:
        return mode is Mode.ONESHOT
    return False


def regen_per_hour() -> float:
    return float(settings.MOTOR_ENERGY_REGEN_PER_HOUR)


def energy_level(*, agent: Agent, now: datetime | None = None) -> float:
    """The agent's level now: stored energy plus regeneration since `last_energy_at`, max 1.0."""
    if agent.last_energy_at is None:
        return agent.energy
    now = now or timezone.now()
    hours = max(0.0, (now - agent.last_energy_at).total_seconds() / 3600.0)
    return round(min(1.0, agent.energy + regen_per_hour() * hours), _PRECISION)


def energy_check(*, agent: Agent, mode: Mode | str, tools: Iterable[str] = ()) -> float:
    """Raise `EnergyTooLow` when the agent may not start this run now; return the level."""
    tools = list(tools)
    level = energy_level(agent=agent)
    if not allows(level, mode=mode, tools=tools):
        raise EnergyTooLow(
            f"Agent {agent.name!r} is at energy {level:.3f} ({band_for(level).value}), too low "
            f"for a {Mode(mode).value} run"
            + (" with the browser" if "browser" in tools else "")
            + ". Energy regenerates over time.",
            details={
                "energy": level,
                "band": band_for(level).value,
                "mode": Mode(mode).value,
                "regen_per_hour": regen_per_hour(),
            },
        )
    return level


def energy_drain(
    *, agent: Agent, mode: Mode | str, tools: Iterable[str] = (), actor: object = None
) -> Agent:
    """Check the gate and take the flat cost of one created run, under a row lock.

    Call it only in the transaction that creates the run, so a refused or rolled-back start
    drains nothing. Raises `EnergyTooLow` (nothing changed) when the band forbids the run.
    """
    mode = Mode(mode)
    with transaction.atomic():
        locked = Agent.objects.select_for_update().get(pk=agent.pk)
        level = energy_check(agent=locked, mode=mode, tools=tools)
        now = timezone.now()
        locked.energy = round(max(0.0, level - DRAIN[mode]), _PRECISION)
        locked.last_energy_at = now
        locked.save(update_fields=["energy", "last_energy_at"])
    logger.info(
        "energy drained: agent=%s mode=%s from=%.3f to=%.3f",
        locked.name,
        mode.value,
        level,
        locked.energy,
    )
    return locked
