"""Every policy transition through the services, allowed and refused, with its audit row."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from skills.errors import (
    ApprovalPermissionDenied,
    PolicyTransitionNotAllowed,
    PolicyValidationError,
    StaleReview,
)
from skills.install import skill_install_bundle
from skills.loading import skill_load_for_execution
from skills.models import AuditAction, Policy, PolicyAuditEvent, PolicyStatus, Skill
from skills.reviewing import policy_approve, policy_reject, policy_review
from skills.services import Actor
from tests.skills.conftest import make_bundle

pytestmark = pytest.mark.django_db

SCRIPT = "import os\ntoken = os.environ['WEATHER_KEY']\nURL = 'https://api.openweathermap.org/v1'\n"


@pytest.fixture
def installed(agent, system_actor):
    return skill_install_bundle(
        bundle=make_bundle("weather", {"scripts/get.py": SCRIPT}), actor=system_actor, agent=agent
    )


def _policy(result) -> Policy:
    return Policy.objects.get(pk=result.policy.pk)


def _in_state(state: str, installed, approver_actor, agent) -> Policy:
    """Drive the fixture's policy into `state` through the services."""
    policy = installed.policy
    if state == PolicyStatus.PENDING_REVIEW:
        return _policy(installed)
    policy_review(policy=policy, actor=approver_actor)
    if state == PolicyStatus.REVIEWED:
        return _policy(installed)
    policy_approve(policy=policy, actor=approver_actor)
    if state == PolicyStatus.APPROVED:
        return _policy(installed)
    assert state == PolicyStatus.NEEDS_REAPPROVAL
    # Content installed without an agent changes the skill under an approved policy; the next
    # load detects the hash mismatch.
    skill_install_bundle(bundle=make_bundle("weather", body="# v2\n"), actor=Actor.system("x"))
    with pytest.raises(Exception, match="needs re-approval"):
        skill_load_for_execution(name="weather", agent=agent)
    return _policy(installed)


def _audit_count() -> int:
    return PolicyAuditEvent.objects.count()


def test_review_moves_pending_to_reviewed_and_stores_facts(installed, approver_actor):
    # when
    policy = policy_review(policy=installed.policy, actor=approver_actor)

    # then
    policy.refresh_from_db()
    assert policy.status == PolicyStatus.REVIEWED
    assert policy.reviewed_hash == installed.version.content_hash
    assert policy.reviewed_at is not None
    facts = policy.review_facts
    assert facts["referenced_credentials"] == ["WEATHER_KEY"]
    assert facts["referenced_domains"] == ["api.openweathermap.org"]
    assert [entry["path"] for entry in facts["inventory"]] == ["SKILL.md", "scripts/get.py"]
    assert facts["has_scripts"] is True
    assert facts["diff"] is None
    assert facts["version"] == 1
    event = PolicyAuditEvent.objects.order_by("-id").first()
    assert (event.action, event.from_status, event.to_status, event.actor_label) == (
        AuditAction.REVIEWED,
        PolicyStatus.PENDING_REVIEW,
        PolicyStatus.REVIEWED,
        "admin:alice",
    )


def test_review_of_needs_reapproval_moves_to_reviewed(installed, approver_actor, agent):
    # given
    policy = _in_state(PolicyStatus.NEEDS_REAPPROVAL, installed, approver_actor, agent)

    # when
    policy_review(policy=policy, actor=approver_actor)

    # then the review covers the new content and diffs against the approved v1
    policy.refresh_from_db()
    assert policy.status == PolicyStatus.REVIEWED
    assert policy.review_facts["diff_base_version"] == 1
    assert policy.review_facts["diff"]["removed"] == ["scripts/get.py"]
    assert policy.review_facts["version"] == 2


@pytest.mark.parametrize("state", [PolicyStatus.REVIEWED, PolicyStatus.APPROVED])
def test_review_is_refused_from(state, installed, approver_actor, agent):
    # given
    policy = _in_state(state, installed, approver_actor, agent)
    events = _audit_count()

    # when / then
    with pytest.raises(PolicyTransitionNotAllowed) as caught:
        policy_review(policy=policy, actor=approver_actor)
    assert caught.value.details == {"action": "review", "status": state}
    assert _policy(installed).status == state
    assert _audit_count() == events


def test_approve_records_who_when_which_content(installed, approver_actor, approver, agent):
    # given
    policy = _in_state(PolicyStatus.REVIEWED, installed, approver_actor, agent)

    # when
    policy_approve(policy=policy, actor=approver_actor, note="looks fine")

    # then
    policy.refresh_from_db()
    assert policy.status == PolicyStatus.APPROVED
    assert policy.approved_by == approver
    assert policy.approved_at is not None
    assert policy.approved_content_hash == installed.version.content_hash
    assert policy.approved_version == installed.version
    event = PolicyAuditEvent.objects.order_by("-id").first()
    assert (event.action, event.from_status, event.to_status, event.reason, event.actor) == (
        AuditAction.APPROVED,
        PolicyStatus.REVIEWED,
        PolicyStatus.APPROVED,
        "looks fine",
        approver,
    )
    assert event.content_hash == installed.version.content_hash


def test_reapproval_from_needs_reapproval(installed, approver_actor, agent):
    # given
    policy = _in_state(PolicyStatus.NEEDS_REAPPROVAL, installed, approver_actor, agent)

    # when
    policy_approve(policy=policy, actor=approver_actor)

    # then the current (v2) content is the approved one
    policy.refresh_from_db()
    assert policy.status == PolicyStatus.APPROVED
    assert policy.approved_version.number == 2
    assert skill_load_for_execution(name="weather", agent=agent).approved is True


@pytest.mark.parametrize("state", [PolicyStatus.PENDING_REVIEW, PolicyStatus.APPROVED])
def test_approve_is_refused_from(state, installed, approver_actor, agent):
    # given
    policy = _in_state(state, installed, approver_actor, agent)
    before = (policy.approved_at, policy.approved_content_hash)
    events = _audit_count()

    # when / then
    with pytest.raises(PolicyTransitionNotAllowed):
        policy_approve(policy=policy, actor=approver_actor)
    policy.refresh_from_db()
    assert policy.status == state
    assert (policy.approved_at, policy.approved_content_hash) == before
    assert _audit_count() == events


@pytest.mark.parametrize("who", ["staff_without_permission", "non_staff_with_permission", "system"])
def test_approve_needs_staff_with_permission(
    who, installed, approver_actor, agent, staff_without_permission, django_user_model
):
    # given a reviewed policy and an actor lacking staff status or the permission
    from django.contrib.auth.models import Permission

    policy = _in_state(PolicyStatus.REVIEWED, installed, approver_actor, agent)
    if who == "staff_without_permission":
        actor = Actor.from_user(staff_without_permission)
    elif who == "non_staff_with_permission":
        user = django_user_model.objects.create_user(username="carol")
        user.user_permissions.add(Permission.objects.get(codename="approve_policy"))
        actor = Actor.from_user(django_user_model.objects.get(pk=user.pk))
    else:
        actor = Actor.system("brain")
    events = _audit_count()

    # when / then
    with pytest.raises(ApprovalPermissionDenied) as caught:
        policy_approve(policy=policy, actor=actor)
    assert caught.value.http_status == 403
    assert _policy(installed).status == PolicyStatus.REVIEWED
    assert _audit_count() == events


def test_approve_refuses_a_review_of_older_content(installed, approver_actor, agent):
    # given a review of v1, then v2 installed without touching this policy
    policy = _in_state(PolicyStatus.REVIEWED, installed, approver_actor, agent)
    skill_install_bundle(bundle=make_bundle("weather", body="# v2\n"), actor=Actor.system("x"))
    events = _audit_count()

    # when / then
    with pytest.raises(StaleReview):
        policy_approve(policy=policy, actor=approver_actor)
    assert _policy(installed).status == PolicyStatus.REVIEWED
    assert _audit_count() == events


def test_a_stale_review_is_redone_and_then_approves_the_new_content(
    installed, approver_actor, agent
):
    # given a review of v1, then v2 installed without touching this policy
    policy = _in_state(PolicyStatus.REVIEWED, installed, approver_actor, agent)
    v2 = skill_install_bundle(
        bundle=make_bundle("weather", body="# v2\n"), actor=Actor.system("x")
    ).version

    # when the policy is reviewed again
    policy_review(policy=policy, actor=approver_actor)

    # then the review covers v2 (diffed against nothing approved yet) and is audited
    policy = _policy(installed)
    assert (policy.status, policy.reviewed_hash) == (PolicyStatus.REVIEWED, v2.content_hash)
    assert policy.review_facts["version"] == 2
    event = PolicyAuditEvent.objects.order_by("-id").first()
    assert (event.action, event.from_status, event.to_status, event.content_hash) == (
        AuditAction.REVIEWED,
        PolicyStatus.REVIEWED,
        PolicyStatus.REVIEWED,
        v2.content_hash,
    )
    # and the approval now goes through, for v2
    policy_approve(policy=policy, actor=approver_actor)
    assert _policy(installed).approved_content_hash == v2.content_hash


@pytest.mark.parametrize(
    "state", [PolicyStatus.PENDING_REVIEW, PolicyStatus.REVIEWED, PolicyStatus.NEEDS_REAPPROVAL]
)
def test_reject_returns_to_pending_review_with_note(state, installed, approver_actor, agent):
    # given
    policy = _in_state(state, installed, approver_actor, agent)

    # when
    policy_reject(policy=policy, note="calls an unknown host", actor=approver_actor)

    # then
    policy.refresh_from_db()
    assert policy.status == PolicyStatus.PENDING_REVIEW
    assert policy.rejection_note == "calls an unknown host"
    event = PolicyAuditEvent.objects.order_by("-id").first()
    assert (event.action, event.from_status, event.to_status, event.reason) == (
        AuditAction.REJECTED,
        state,
        PolicyStatus.PENDING_REVIEW,
        "calls an unknown host",
    )


def test_reject_is_refused_for_approved(installed, approver_actor, agent):
    # given
    policy = _in_state(PolicyStatus.APPROVED, installed, approver_actor, agent)
    events = _audit_count()

    # when / then
    with pytest.raises(PolicyTransitionNotAllowed):
        policy_reject(policy=policy, note="no", actor=approver_actor)
    assert _policy(installed).status == PolicyStatus.APPROVED
    assert _policy(installed).rejection_note == ""
    assert _audit_count() == events


@pytest.mark.parametrize(
    ("note", "rule"), [("   ", "required"), ("bad\x00note", "storable_text")], ids=["blank", "nul"]
)
def test_reject_needs_a_storable_note(note, rule, installed, approver_actor):
    # given
    events = _audit_count()

    # when / then
    with pytest.raises(PolicyValidationError) as caught:
        policy_reject(policy=installed.policy, note=note, actor=approver_actor)
    assert caught.value.details == {"field": "note", "rule": rule}
    assert _policy(installed).status == PolicyStatus.PENDING_REVIEW
    assert _policy(installed).rejection_note == ""
    assert _audit_count() == events


@pytest.mark.parametrize(
    "state",
    [
        PolicyStatus.PENDING_REVIEW,
        PolicyStatus.REVIEWED,
        PolicyStatus.APPROVED,
        PolicyStatus.NEEDS_REAPPROVAL,
    ],
)
def test_content_change_by_the_agent_resets_to_pending_review_from(
    state, installed, approver_actor, agent
):
    # given
    policy = _in_state(state, installed, approver_actor, agent)

    # when the agent's run installs new content
    skill_install_bundle(
        bundle=make_bundle("weather", body="# v3 from the run\n"),
        actor=Actor.system("run 7"),
        agent=agent,
    )

    # then
    policy.refresh_from_db()
    assert policy.status == PolicyStatus.PENDING_REVIEW
    assert policy.reviewed_hash == ""
    event = PolicyAuditEvent.objects.order_by("-id").first()
    assert (event.action, event.from_status, event.actor_label) == (
        AuditAction.CONTENT_CHANGED,
        state,
        "run 7",
    )


def test_transition_methods_refuse_bad_sources_in_memory(installed):
    # given a pending_review policy
    from django_fsm import TransitionNotAllowed

    policy = _policy(installed)

    # when / then: approve and hash_mismatch are not available from pending_review
    with pytest.raises(TransitionNotAllowed):
        policy.hash_mismatch()
    with pytest.raises(AttributeError):
        policy.status = PolicyStatus.APPROVED  # protected field: only transitions change it
    assert policy.status == PolicyStatus.PENDING_REVIEW


def test_database_refuses_approved_policy_without_hash(installed):
    # when / then: the check constraint holds even when the ORM is bypassed
    with pytest.raises(IntegrityError), transaction.atomic():
        Policy.objects.filter(pk=installed.policy.pk).update(status=PolicyStatus.APPROVED)
    with pytest.raises(IntegrityError), transaction.atomic():
        Policy.objects.filter(pk=installed.policy.pk).update(status="trusted")
    assert _policy(installed).status == PolicyStatus.PENDING_REVIEW


def test_one_policy_per_skill_and_agent(installed, agent):
    with pytest.raises(IntegrityError), transaction.atomic():
        Policy.objects.create(skill=Skill.objects.get(name="weather"), agent=agent)
    assert Policy.objects.count() == 1
