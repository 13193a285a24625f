"""The approval decision for a generated skill (seed 002 §7), table-driven."""

from __future__ import annotations

import pytest

from forge.risk import Needs, approval_decision

PUBLIC = ["api.open-meteo.com", "*.wikipedia.org"]


@pytest.mark.parametrize(
    ("domains", "credentials", "semantics", "trust", "needs", "rule", "auto"),
    [
        # pure computation: auto only at the level that allows it
        ([], [], ["read"], "bounded_auto", Needs.NONE, "pure_computation", True),
        ([], [], ["read"], "supervised_auto", Needs.NONE, "pure_computation", False),
        ([], [], ["read"], "suggest", Needs.NONE, "pure_computation", False),
        ([], [], ["read"], "observe", Needs.NONE, "pure_computation", False),
        # read-only public APIs
        (["api.open-meteo.com"], [], ["read"], "bounded_auto", Needs.NONE, "public_read", True),
        (
            ["en.wikipedia.org"],
            [],
            ["read", "read"],
            "bounded_auto",
            Needs.NONE,
            "public_read",
            True,
        ),
        (["api.open-meteo.com"], [], ["read"], "supervised_auto", Needs.NONE, "public_read", False),
        # the owner's services: confirm the domains, whatever the trust level
        (
            ["status.myapp.io"],
            [],
            ["read"],
            "bounded_auto",
            Needs.CONFIRM_DOMAINS,
            "owner_domains",
            False,
        ),
        (
            ["api.open-meteo.com", "api.myapp.io"],
            [],
            ["read"],
            "bounded_auto",
            Needs.CONFIRM_DOMAINS,
            "owner_domains",
            False,
        ),
        # credentials or writes: explicit, always
        (
            ["api.open-meteo.com"],
            ["OWM_KEY"],
            ["read"],
            "bounded_auto",
            Needs.EXPLICIT,
            "credentials",
            False,
        ),
        ([], ["TOKEN"], ["read"], "bounded_auto", Needs.EXPLICIT, "credentials", False),
        ([], [], ["read", "write"], "bounded_auto", Needs.EXPLICIT, "write_semantics", False),
        (
            ["status.myapp.io"],
            [],
            ["write"],
            "bounded_auto",
            Needs.EXPLICIT,
            "write_semantics",
            False,
        ),
        (
            ["status.myapp.io"],
            ["T"],
            ["write"],
            "bounded_auto",
            Needs.EXPLICIT,
            "credentials",
            False,
        ),
    ],
)
def test_the_approval_a_skill_needs(domains, credentials, semantics, trust, needs, rule, auto):
    decision = approval_decision(
        domains=domains,
        credentials=credentials,
        semantics=semantics,
        trust_level=trust,
        public_domains=PUBLIC,
    )
    assert (decision.needs, decision.rule, decision.auto) == (needs, rule, auto)


def test_the_reason_names_what_decided():
    decision = approval_decision(
        domains=["status.myapp.io"],
        credentials=[],
        semantics=["read"],
        trust_level="bounded_auto",
        public_domains=PUBLIC,
    )
    assert decision.reason == "it reaches status.myapp.io, which is not a known public API"
    assert decision.to_dict()["needs"] == "confirm_domains"
