"""Energy: the seed's gating bands at every boundary, start costs, lazy regeneration."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from cognition.energy import Band, allows, band_for, energy_drain, energy_level
from cognition.errors import EnergyTooLow
from cognition.models import Agent

from .conftest import World

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("level", "band"),
    [
        (1.0, Band.ALL),
        (0.500001, Band.ALL),
        (0.5, Band.NO_BROWSER),
        (0.3, Band.NO_BROWSER),
        (0.299999, Band.ONESHOT_ONLY),
        (0.05, Band.ONESHOT_ONLY),
        (0.049999, Band.EXHAUSTED),
        (0.0, Band.EXHAUSTED),
    ],
)
def test_bands_at_each_boundary(level: float, band: Band) -> None:
    assert band_for(level) is band


@pytest.mark.parametrize(
    ("level", "oneshot", "agentic", "browser"),
    [
        (0.51, True, True, True),
        (0.5, True, True, False),
        (0.3, True, True, False),
        (0.29, True, False, False),
        (0.05, True, False, False),
        (0.04, False, False, False),
    ],
)
def test_what_each_band_allows(level: float, oneshot: bool, agentic: bool, browser: bool) -> None:
    assert allows(level, mode="oneshot") is oneshot
    assert allows(level, mode="agentic", tools=["code", "bash"]) is agentic
    assert allows(level, mode="agentic", tools=["code", "browser"]) is browser


def test_a_start_takes_the_base_of_its_mode(world: World, settings) -> None:
    settings.MOTOR_ENERGY_REGEN_PER_HOUR = 0.0
    energy_drain(agent=world.alpha, mode="agentic", tools=["code"])
    energy_drain(agent=world.alpha, mode="oneshot")
    assert Agent.objects.get(pk=world.alpha.pk).energy == 0.85


def test_a_refused_drain_changes_nothing(world: World, settings) -> None:
    settings.MOTOR_ENERGY_REGEN_PER_HOUR = 0.0
    Agent.objects.filter(pk=world.alpha.pk).update(energy=0.29, last_energy_at=timezone.now())
    before = Agent.objects.values_list("energy", "last_energy_at").get(pk=world.alpha.pk)
    with pytest.raises(EnergyTooLow) as caught:
        energy_drain(agent=world.alpha, mode="agentic", tools=["code"])
    assert caught.value.details["band"] == "oneshot_only"
    assert Agent.objects.values_list("energy", "last_energy_at").get(pk=world.alpha.pk) == before


def test_oneshot_at_exactly_the_floor_drains_to_zero(world: World, settings) -> None:
    settings.MOTOR_ENERGY_REGEN_PER_HOUR = 0.0
    Agent.objects.filter(pk=world.alpha.pk).update(energy=0.05, last_energy_at=timezone.now())
    drained = energy_drain(agent=world.alpha, mode="oneshot")
    assert drained.energy == 0.0
    with pytest.raises(EnergyTooLow):
        energy_drain(agent=world.alpha, mode="oneshot")


def test_regeneration_is_added_on_read_and_capped(world: World, settings) -> None:
    settings.MOTOR_ENERGY_REGEN_PER_HOUR = 0.1
    now = timezone.now()
    agent = Agent.objects.get(pk=world.alpha.pk)
    agent.energy = 0.2
    agent.last_energy_at = now - timedelta(hours=2)
    assert energy_level(agent=agent, now=now) == 0.4
    agent.last_energy_at = now - timedelta(hours=30)
    assert energy_level(agent=agent, now=now) == 1.0


def test_a_drain_starts_from_the_regenerated_level(world: World, settings) -> None:
    settings.MOTOR_ENERGY_REGEN_PER_HOUR = 0.1
    Agent.objects.filter(pk=world.alpha.pk).update(
        energy=0.2, last_energy_at=timezone.now() - timedelta(hours=3)
    )
    drained = energy_drain(agent=world.alpha, mode="agentic")
    # 0.2 + 0.1/h × 3 h = 0.5 (no-browser band), minus the agentic base 0.10
    assert drained.energy == pytest.approx(0.40, abs=1e-4)
