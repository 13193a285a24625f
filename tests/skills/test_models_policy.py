"""The policy state machine in memory: which transition is available from which status."""

from __future__ import annotations

import pytest
from django_fsm import can_proceed

from skills.models import Policy, PolicyStatus

P, R, A, N = (
    PolicyStatus.PENDING_REVIEW,
    PolicyStatus.REVIEWED,
    PolicyStatus.APPROVED,
    PolicyStatus.NEEDS_REAPPROVAL,
)

# transition -> {source status: target status}; a missing source means "refused"
MACHINE = {
    "content_changed": {P: P, R: P, A: P, N: P},
    "review": {P: R, R: R, N: R},
    "approve": {R: A, N: A},
    "reject": {P: P, R: P, N: P},
    "hash_mismatch": {A: N},
    "restore_approved": {P: A, R: A, A: A, N: A},
}


@pytest.mark.parametrize("transition", sorted(MACHINE))
@pytest.mark.parametrize("source", [P, R, A, N])
def test_transition_table(transition, source):
    # given a policy in `source`
    policy = Policy(status=source)
    method = getattr(policy, transition)

    # when / then
    expected = MACHINE[transition].get(source)
    assert can_proceed(method) is (expected is not None)
    if expected is not None:
        kwargs = {
            "review": {"facts": {}, "content_hash": "sha256:" + "a" * 64, "at": None},
            "approve": {
                "by": None,
                "at": None,
                "content_hash": "sha256:" + "a" * 64,
                "version": None,
            },
            "restore_approved": {
                "by": None,
                "at": None,
                "content_hash": "sha256:" + "a" * 64,
                "version": None,
            },
            "reject": {"note": "n"},
        }.get(transition, {})
        method(**kwargs)
        assert policy.status == expected


def test_status_choices_are_the_four_seed_states():
    assert PolicyStatus.values == ["pending_review", "reviewed", "approved", "needs_reapproval"]


def test_str_never_shows_credential_ciphertext():
    policy = Policy(status=P, credential_values="gAAAAsecret-ciphertext")
    assert "gAAAA" not in str(policy)
    assert "gAAAA" not in repr(policy)


def test_approve_permission_is_declared():
    assert ("approve_policy", "Can approve a skill policy") in Policy._meta.permissions
