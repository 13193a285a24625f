"""Energy of an agent (seed 001 "Energy Model"): start costs, gating bands, lazy regeneration.

What a run costs is runs.accounting's (base at the start, taken here; later iterations taken by
the runtime as they are recorded).

Bands, with the boundaries decided as follows (a level exactly on a boundary belongs to the band
the seed's table lists it in, reading "0.3 - 0.5" and "0.05 - 0.3" as closed below):
  level > 0.5          every task (oneshot, agentic, agentic with browser)
  0.3 <= level <= 0.5  oneshot and agentic without the browser tool
  0.05 <= level < 0.3  oneshot only
  level < 0.05         nothing ("too tired to act")
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from datetime import datetime, timedelta
from enum import StrEnum

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from runs.accounting import energy_rates
from runs.metrics import ENERGY_REFUSALS

from .errors import EnergyTooLow
from .models import Agent

logger = logging.getLogger(__name__)


class Mode(StrEnum):
    ONESHOT = "oneshot"
    AGENTIC = "agentic"


def start_cost(*, mode: Mode | str, tools: Iterable[str] = ()) -> float:
    """What starting a run of `mode` granted `tools` takes (the base of runs.accounting's
    formula; an agentic run's later iterations are paid as they happen)."""
    return energy_rates(mode=Mode(mode).value, tools=tools).base


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


def required_level(*, mode: Mode | str, tools: Iterable[str] = ()) -> float:
    """The lowest level that admits a run of `mode` granted `tools` (the browser needs more than
    ALL_ABOVE; a level equal to it is not enough)."""
    mode = Mode(mode)
    if mode is Mode.ONESHOT:
        return ONESHOT_FROM
    if "browser" in set(tools):
        return ALL_ABOVE
    return NO_BROWSER_FROM


# A run of `mode` is "a oneshot run" / "an agentic run" in messages.
_RUN_OF: dict[Mode, str] = {Mode.ONESHOT: "a oneshot run", Mode.AGENTIC: "an agentic run"}


def sufficient_at(
    *, level: float, mode: Mode | str, tools: Iterable[str] = (), now: datetime
) -> datetime | None:
    """When regeneration alone lifts `level` enough for the run (rounded up to the second), or
    None when it never will (regeneration off)."""
    tools = list(tools)
    if allows(level, mode=mode, tools=tools):
        return now
    rate = regen_per_hour()
    if rate <= 0:
        return None
    needed = required_level(mode=mode, tools=tools)
    # Rounded to the microsecond first: 0.05 / 6 × 3600 is 30 s, not 30.000000000000004.
    seconds = math.ceil(round(max(0.0, needed - level) / rate * 3600.0, 6))
    # A strict boundary (the browser's "more than 0.5") is passed one second after it is reached.
    if needed == ALL_ABOVE:
        seconds += 1
    return now + timedelta(seconds=seconds)


def _in_words(seconds: int) -> str:
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 90 * 60:
        return f"{math.ceil(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


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
    """Raise `EnergyTooLow` when the agent may not start this run now; return the level.

    The refusal says which level the run needs and when regeneration reaches it (or that it
    never will), and that staff can restore the agent's energy.
    """
    tools = list(tools)
    mode = Mode(mode)
    now = timezone.now()
    level = energy_level(agent=agent, now=now)
    if allows(level, mode=mode, tools=tools):
        return level
    ENERGY_REFUSALS.labels(mode=mode.value).inc()
    needed = required_level(mode=mode, tools=tools)
    when = sufficient_at(level=level, mode=mode, tools=tools, now=now)
    rate = regen_per_hour()
    if when is None:
        outlook = "Energy does not regenerate here (MOTOR_ENERGY_REGEN_PER_HOUR is 0)."
    else:
        wait_s = int((when - now).total_seconds())
        outlook = (
            f"At {rate:g} per hour it will suffice at {when:%Y-%m-%d %H:%M:%S} UTC "
            f"(in {_in_words(wait_s)})."
        )
    more = "more than " if needed == ALL_ABOVE else ""
    raise EnergyTooLow(
        f"Agent {agent.name!r} is at energy {level:.3f} ({band_for(level).value}), too low for "
        f"{_RUN_OF[mode]}" + (" with the browser" if "browser" in tools else "") + f" (needs "
        f"{more}{needed:g}). {outlook} A staff user can restore it (admin: Agents, "
        f'"Restore energy"; or POST /api/v1/agents/{agent.pk}/energy/restore/).',
        details={
            "energy": level,
            "band": band_for(level).value,
            "mode": mode.value,
            "required": needed,
            "regen_per_hour": rate,
            "sufficient_at": when.isoformat() if when is not None else None,
            "retry_after_s": int((when - now).total_seconds()) if when is not None else None,
        },
    )


def energy_drain(
    *, agent: Agent, mode: Mode | str, tools: Iterable[str] = (), actor: object = None
) -> Agent:
    """Check the gate and take the start cost of one run (`start_cost`), under a row lock;
    return the agent as it now is.

    Call it only in the transaction that creates the run, so a refused or rolled-back start
    drains nothing. Raises `EnergyTooLow` (nothing changed) when the band forbids the run.
    """
    return _drain(agent=agent, mode=mode, tools=tools)[0]


def energy_take(*, agent: Agent, mode: Mode | str, tools: Iterable[str] = ()) -> float:
    """`energy_drain`, returning the energy it took (what the run records as its cost so far:
    the start cost, or the whole level when that was less)."""
    return _drain(agent=agent, mode=mode, tools=tools)[1]


def _drain(*, agent: Agent, mode: Mode | str, tools: Iterable[str]) -> tuple[Agent, float]:
    mode = Mode(mode)
    tools = list(tools)
    with transaction.atomic():
        locked = Agent.objects.select_for_update().get(pk=agent.pk)
        level = energy_check(agent=locked, mode=mode, tools=tools)
        now = timezone.now()
        locked.energy = round(max(0.0, level - start_cost(mode=mode, tools=tools)), _PRECISION)
        locked.last_energy_at = now
        locked.save(update_fields=["energy", "last_energy_at"])
    logger.info(
        "energy drained: agent=%s mode=%s from=%.3f to=%.3f",
        locked.name,
        mode.value,
        level,
        locked.energy,
    )
    return locked, round(level - locked.energy, _PRECISION)


#: the permission a staff user needs to restore an agent's energy (superusers have it)
RESTORE_PERMISSION = "cognition.change_agent"


def may_restore_energy(user: object) -> bool:
    """Whether `user` may restore energy: staff with RESTORE_PERMISSION."""
    return bool(getattr(user, "is_staff", False)) and bool(
        getattr(user, "has_perm", lambda _: False)(RESTORE_PERMISSION)
    )


def energy_restore(*, agent: Agent, actor: AbstractBaseUser, level: float = 1.0) -> Agent:
    """Set the agent's energy to `level` (default full), recorded in the admin's history.

    For staff: the caller checks the permission. The change and who made it are written to the
    agent's history (django.contrib.admin LogEntry) in the same transaction.
    """
    from django.contrib.admin.models import CHANGE, LogEntry

    if not 0.0 <= level <= 1.0:
        raise ValueError(f"energy level {level!r} is outside 0.0-1.0")
    with transaction.atomic():
        locked = Agent.objects.select_for_update().get(pk=agent.pk)
        now = timezone.now()
        before = energy_level(agent=locked, now=now)
        locked.energy = round(level, _PRECISION)
        locked.last_energy_at = now
        locked.save(update_fields=["energy", "last_energy_at"])
        LogEntry.objects.log_actions(
            user_id=actor.pk,
            queryset=[locked],
            action_flag=CHANGE,
            change_message=f"Energy restored from {before:.3f} to {locked.energy:.3f}.",
            single_object=True,
        )
    logger.info(
        "energy restored: agent=%s from=%.3f to=%.3f actor=%s",
        locked.name,
        before,
        locked.energy,
        actor.get_username(),
    )
    return locked
