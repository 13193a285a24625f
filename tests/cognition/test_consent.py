"""The consent gate as a function (the API and core.* tools both call it)."""

from __future__ import annotations

import pytest

from cognition.consent import GATED_ACTIONS, consent_check
from cognition.errors import ConsentRequired
from cognition.principals import Principal

from .conftest import World

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("action", sorted(GATED_ACTIONS))
def test_a_human_always_passes(world: World, action: str) -> None:
    consent_check(principal=Principal.for_human(world.bob), action=action, trigger=None)


@pytest.mark.parametrize("action", sorted(GATED_ACTIONS))
def test_a_trusted_agent_passes_only_on_a_user_message(world: World, action: str) -> None:
    world.alpha.trusted_for_relayed_consent = True
    principal = Principal.for_agent(world.alpha)
    consent_check(principal=principal, action=action, trigger="user_message")
    for trigger in (None, "motor_result", "schedule", "USER_MESSAGE"):
        with pytest.raises(ConsentRequired) as caught:
            consent_check(principal=principal, action=action, trigger=trigger)
        assert caught.value.http_status == 403
        assert "A human must" in caught.value.message


def test_an_untrusted_agent_is_refused_even_on_a_user_message(world: World) -> None:
    principal = Principal.for_agent(world.alpha)
    with pytest.raises(ConsentRequired) as caught:
        consent_check(principal=principal, action="skill.approve", trigger="user_message")
    assert "not trusted to relay" in caught.value.message
    assert caught.value.details == {
        "action": "skill.approve",
        "trigger": "user_message",
        "trusted_for_relayed_consent": False,
    }


def test_ungated_actions_pass_for_an_agent_on_any_trigger(world: World) -> None:
    consent_check(principal=Principal.for_agent(world.alpha), action="skill.import", trigger=None)
