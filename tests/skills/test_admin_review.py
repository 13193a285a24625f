"""The approval console through Django's test client: permissions, write-only credentials,
decisions and their audit rows. The browser flow is in test_admin_browser.py."""

from __future__ import annotations

import re
from html import escape
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from skills import selectors
from skills.loading import skill_load_for_execution
from skills.models import AuditAction, Policy, PolicyAuditEvent, PolicyStatus, Skill
from skills.reviewing import policy_approve, policy_review
from skills.services import Actor
from tests.skills.admin_support import (
    APPROVER_PERMS,
    EDITOR_PERMS,
    WEATHER_SKILL,
    fast_password_hashing,  # noqa: F401 - autouse fixture
    import_skill,
    make_agent,
    make_user,
)

pytestmark = pytest.mark.django_db

SECRET = "wx-live-7f3c9a51d2e84b06"  # noqa: S105 - a credential value that must never render


def review_url(policy: Policy) -> str:
    return reverse("admin:skills_policy_review", args=[policy.pk])


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def audit_actions(policy: Policy) -> list[str]:
    return list(
        PolicyAuditEvent.objects.filter(policy=policy)
        .order_by("id")
        .values_list("action", flat=True)
    )


def approve_with_services(policy: Policy, approver: User) -> Policy:
    policy_review(policy=policy.pk, actor=Actor.from_user(approver))
    return policy_approve(policy=policy.pk, actor=Actor.from_user(approver))


@pytest.fixture
def approver() -> User:
    return make_user("ann", perms=APPROVER_PERMS)


@pytest.fixture
def policy(tmp_path: Path) -> Policy:
    return import_skill(tmp_path, agent=make_agent("scout"))


def test_opening_the_review_page_reviews_and_shows_facts_before_files(
    approver: User, policy: Policy
) -> None:
    # given a pending skill
    assert policy.status == PolicyStatus.PENDING_REVIEW

    # when an approver opens its review page
    response = logged_in(approver).get(review_url(policy))

    # then the review ran as that user and the facts come first, in order
    assert response.status_code == 200
    policy.refresh_from_db()
    assert policy.status == PolicyStatus.REVIEWED
    event = PolicyAuditEvent.objects.get(policy=policy, action=AuditAction.REVIEWED)
    assert (event.actor_id, event.from_status, event.to_status) == (
        approver.pk,
        PolicyStatus.PENDING_REVIEW,
        PolicyStatus.REVIEWED,
    )
    html = response.content.decode()
    order = [
        'id="suspicious-findings"',
        'id="mismatches"',
        'id="referenced-domains"',
        'id="referenced-credentials"',
        'id="file-inventory"',
        'id="diff"',
        'id="files"',
        'id="decision"',
        'id="versions"',
        'id="audit"',
    ]
    positions = [html.index(marker) for marker in order]
    assert positions == sorted(positions)
    assert "download-and-execute" in html
    assert "get.weather-tools.dev" in html
    assert 'id="btn-approve"' in html


def test_reopening_a_rejected_policy_does_not_review_it_again(
    approver: User, policy: Policy
) -> None:
    # given a policy that was reviewed and then rejected
    client = logged_in(approver)
    client.get(review_url(policy))
    client.post(review_url(policy), {"action": "reject", "note": "Vendor the installer."})
    policy.refresh_from_db()
    assert policy.status == PolicyStatus.PENDING_REVIEW

    # when the page is opened again
    response = client.get(review_url(policy))

    # then it stays pending (seed 000), shown as rejected, with its facts, the note, a button to
    # review again and the decision still open
    policy.refresh_from_db()
    assert policy.status == PolicyStatus.PENDING_REVIEW
    assert audit_actions(policy) == [
        AuditAction.POLICY_CREATED,
        AuditAction.REVIEWED,
        AuditAction.REJECTED,
    ]
    html = response.content.decode()
    assert (
        '<span id="policy-status"><span class="mc-badge mc-badge--rejected">'
        "Rejected — awaiting a new version</span></span>" in html
    )
    assert "Vendor the installer." in html
    assert 'id="btn-review"' in html
    assert 'id="btn-approve"' in html


def test_a_rejected_policy_can_still_be_approved_from_its_page(
    approver: User, policy: Policy
) -> None:
    # given a policy that was reviewed and then rejected
    client = logged_in(approver)
    client.get(review_url(policy))
    client.post(review_url(policy), {"action": "reject", "note": "Vendor the installer."})

    # when the approver changes their mind and approves from the page as it is shown
    page = client.get(review_url(policy)).content.decode()
    assert 'id="btn-approve"' in page
    response = client.post(
        review_url(policy),
        {
            "action": "approve",
            "allowed_domains": "api.open-meteo.com",
            "required_credentials": "WEATHER_TOKEN",
            "tools": ["read", "code"],
            "dependencies": "",
        },
    )

    # then the content is reviewed again and approved, in that order, by the approver
    assert response.status_code == 302
    policy.refresh_from_db()
    assert policy.status == PolicyStatus.APPROVED
    assert policy.rejection_note == ""
    assert audit_actions(policy) == [
        AuditAction.POLICY_CREATED,
        AuditAction.REVIEWED,
        AuditAction.REJECTED,
        AuditAction.REVIEWED,
        AuditAction.POLICY_UPDATED,
        AuditAction.APPROVED,
    ]


def test_rejected_policies_have_a_badge_and_a_list_filter(
    approver: User, policy: Policy, tmp_path: Path
) -> None:
    # given one rejected policy and one merely pending policy of the same skill
    other = import_skill(tmp_path / "b", agent=make_agent("ranger"), name="weather-report")
    client = logged_in(approver)
    client.get(review_url(policy))
    client.post(review_url(policy), {"action": "reject", "note": "Vendor the installer."})
    other.refresh_from_db()
    assert (policy.status, other.status) == (PolicyStatus.PENDING_REVIEW,) * 2

    # when the list is shown whole, then filtered to the rejected ones and to the others
    url = reverse("admin:skills_policy_changelist")
    everything = client.get(url).content.decode()
    rejected = client.get(url, {"rejected": "yes"}).content.decode()
    not_rejected = client.get(url, {"rejected": "no"}).content.decode()

    # then the rejected one reads so, and each filter keeps only its policy
    assert "Rejected — awaiting a new version" in everything
    assert '<span class="mc-badge mc-badge--pending_review">Pending review</span>' in everything
    assert rejected.count('class="mc-badge mc-badge--') == 1
    assert "mc-badge--rejected" in rejected
    assert not_rejected.count('class="mc-badge mc-badge--') == 1
    assert "mc-badge--pending_review" in not_rejected


def test_a_new_version_after_a_reject_is_no_longer_shown_as_rejected(
    approver: User, policy: Policy, tmp_path: Path
) -> None:
    # given a rejected policy
    client = logged_in(approver)
    client.get(review_url(policy))
    client.post(review_url(policy), {"action": "reject", "note": "Vendor the installer."})

    # when a new version of the skill is installed
    changed = {**WEATHER_SKILL, "references/fields.md": "# Fields\n\nNow in Kelvin.\n"}
    import_skill(tmp_path / "v2", agent=policy.agent, files=changed)

    # then the list shows it pending review again, not rejected
    page = client.get(reverse("admin:skills_policy_changelist")).content.decode()
    assert "mc-badge--rejected" not in page
    assert "mc-badge--pending_review" in page


def test_reject_without_a_note_is_refused_and_changes_nothing(
    approver: User, policy: Policy
) -> None:
    # given a reviewed policy
    client = logged_in(approver)
    client.get(review_url(policy))

    # when it is rejected with a blank note
    response = client.post(review_url(policy), {"action": "reject", "note": "   "})

    # then the page says why and nothing happened
    assert response.status_code == 200
    assert "Not rejected: a rejection needs a note." in response.content.decode()
    policy.refresh_from_db()
    assert (policy.status, policy.rejection_note) == (PolicyStatus.REVIEWED, "")
    assert audit_actions(policy) == [AuditAction.POLICY_CREATED, AuditAction.REVIEWED]


def test_staff_without_approve_permission_sees_no_approve_button_and_a_forged_post_is_refused(
    policy: Policy,
) -> None:
    # given a staff user who may edit policies but not approve them, on a reviewed policy
    editor = make_user("ed", perms=EDITOR_PERMS)
    client = logged_in(editor)
    page = client.get(review_url(policy)).content.decode()
    policy.refresh_from_db()
    assert policy.status == PolicyStatus.REVIEWED
    assert 'id="btn-approve"' not in page
    assert 'id="no-approve-permission"' in page
    before = audit_actions(policy)

    # when the user posts an approval anyway, with a domain edit
    response = client.post(
        review_url(policy), {"action": "approve", "allowed_domains": "api.open-meteo.com"}
    )

    # then the service refuses it and neither the approval nor the edit happened
    assert response.status_code == 200
    html = response.content.decode()
    assert "Not approved: admin:ed may not approve skill policies" in html
    assert "skills.approve_policy" in html
    policy.refresh_from_db()
    assert policy.status == PolicyStatus.REVIEWED
    assert policy.allowed_domains == []
    assert policy.approved_by is None
    assert audit_actions(policy) == before


def test_view_only_staff_can_read_the_review_but_not_review_or_post(policy: Policy) -> None:
    # given a staff user with view permission only
    viewer = make_user("vic", perms=["skills.view_policy"])
    client = logged_in(viewer)

    # when the user opens the page and then forges a save
    page = client.get(review_url(policy))
    forged = client.post(review_url(policy), {"action": "save", "allowed_domains": "evil.test"})

    # then the page renders read-only, nothing is reviewed, and the POST is forbidden
    assert page.status_code == 200
    assert 'id="policy-form"' not in page.content.decode()
    assert forged.status_code == 403
    policy.refresh_from_db()
    assert (policy.status, policy.allowed_domains) == (PolicyStatus.PENDING_REVIEW, [])
    assert audit_actions(policy) == [AuditAction.POLICY_CREATED]


def test_credential_values_are_write_only_and_never_rendered(
    approver: User, policy: Policy
) -> None:
    # given a reviewed policy that declares WEATHER_TOKEN
    client = logged_in(approver)
    client.get(review_url(policy))
    client.post(review_url(policy), {"action": "save", "required_credentials": "WEATHER_TOKEN"})
    page = client.get(review_url(policy)).content.decode()
    assert 'name="credential_value__WEATHER_TOKEN"' in page
    assert "not set" in page

    # when a value is typed into the password field and saved
    response = client.post(
        review_url(policy),
        {
            "action": "save",
            "required_credentials": "WEATHER_TOKEN",
            "credential_value__WEATHER_TOKEN": SECRET,
        },
        follow=True,
    )

    # then it is stored encrypted and every console page shows "[set]", never the value
    assert "Policy saved; the status is unchanged." in response.content.decode()
    policy.refresh_from_db()
    assert policy.status == PolicyStatus.REVIEWED
    assert selectors.policy_credential_values(policy=policy) == {"WEATHER_TOKEN": SECRET}
    assert SECRET not in policy.credential_values
    pages = {
        "review": client.get(review_url(policy)),
        "policy list": client.get(reverse("admin:skills_policy_changelist")),
        "audit list": client.get(reverse("admin:skills_policyauditevent_changelist")),
    }
    update = PolicyAuditEvent.objects.filter(
        policy=policy, action=AuditAction.POLICY_UPDATED
    ).latest("id")
    pages["audit row"] = client.get(
        reverse("admin:skills_policyauditevent_change", args=[update.pk])
    )
    for name, page_response in pages.items():
        html = page_response.content.decode()
        assert page_response.status_code == 200, name
        assert SECRET not in html, name
        if name != "audit list":  # the list has no changes column
            assert "[set]" in html, name
    assert update.changes == {"credential_values": {"set": {"WEATHER_TOKEN": "[set]"}}}

    # when the clear box is ticked
    client.post(
        review_url(policy),
        {
            "action": "save",
            "required_credentials": "WEATHER_TOKEN",
            "credential_clear__WEATHER_TOKEN": "on",
        },
    )

    # then the value is gone
    policy.refresh_from_db()
    assert selectors.policy_credential_values(policy=policy) == {}


def test_an_invalid_domain_is_refused_with_the_reason_and_nothing_changes(
    approver: User, policy: Policy
) -> None:
    # given a reviewed policy
    client = logged_in(approver)
    client.get(review_url(policy))
    before = audit_actions(policy)

    # when a domain that is not a host name is saved
    response = client.post(
        review_url(policy), {"action": "save", "allowed_domains": "api.open-meteo.com\nnot a host!"}
    )

    # then the service's message is shown with the submitted text kept, and nothing changed
    html = response.content.decode()
    assert "The policy was not saved:" in html
    assert "not a host!" in html
    policy.refresh_from_db()
    assert policy.allowed_domains == []
    assert audit_actions(policy) == before


def test_reapprove_a_policy_that_needs_reapproval(approver: User, policy: Policy) -> None:
    # given the skill approved for one agent and loaded by a second agent (onboarding)
    approve_with_services(policy, approver)
    second = make_agent("ranger")
    skill_load_for_execution(name="weather-report", agent=second)
    other = Policy.objects.get(skill=policy.skill, agent=second)
    assert other.status == PolicyStatus.NEEDS_REAPPROVAL
    client = logged_in(approver)

    # when the approver opens it, the status is kept and Re-approve is offered
    page = client.get(review_url(other)).content.decode()
    other.refresh_from_db()
    assert other.status == PolicyStatus.NEEDS_REAPPROVAL
    assert 'id="btn-reapprove"' in page
    assert 'id="btn-approve"' not in page

    # and when it is re-approved
    response = client.post(review_url(other), {"action": "reapprove"}, follow=True)

    # then it is approved by that user
    assert "Re-approved weather-report for ranger" in response.content.decode()
    other.refresh_from_db()
    assert (other.status, other.approved_by_id) == (PolicyStatus.APPROVED, approver.pk)
    event = PolicyAuditEvent.objects.get(policy=other, action=AuditAction.APPROVED)
    assert (event.from_status, event.to_status) == (
        PolicyStatus.NEEDS_REAPPROVAL,
        PolicyStatus.APPROVED,
    )


def test_new_content_shows_the_diff_and_rollback_lands_where_the_service_decides(
    approver: User, tmp_path: Path
) -> None:
    # given v1 approved, then v2 imported with a new domain and a changed script
    agent = make_agent("scout")
    policy = import_skill(tmp_path / "one", agent=agent)
    approve_with_services(policy, approver)
    changed = dict(WEATHER_SKILL)
    changed["scripts/forecast.py"] = WEATHER_SKILL["scripts/forecast.py"] + (
        'EXTRA = "https://api.weather-extra.io/v2/alerts"\n'
    )
    import_skill(tmp_path / "two", agent=agent, files=changed)
    policy.refresh_from_db()
    assert policy.status == PolicyStatus.PENDING_REVIEW
    client = logged_in(approver)

    # when the review page is opened
    html = client.get(review_url(policy)).content.decode()

    # then the capability and file diff against v1 are shown
    assert "Compared with v1" in html
    assert "now also references api.weather-extra.io" in html
    assert "changed scripts/forecast.py" in html
    assert (
        '<span class="mc-diff-add">+EXTRA = &quot;https://api.weather-extra.io/v2/alerts&quot;'
        in html
    )

    # when rolled back to v1, which this agent approved before
    skill = Skill.objects.get(name="weather-report")
    v1 = skill.versions.get(number=1)
    response = client.post(
        review_url(policy), {"action": "rollback", "version": v1.pk}, follow=True
    )

    # then it is approved again, and rolling forward to v2 (never approved) lands pending
    assert "Rolled back to v1; status: Approved." in response.content.decode()
    policy.refresh_from_db()
    skill.refresh_from_db()
    assert (policy.status, skill.current_version_id) == (PolicyStatus.APPROVED, v1.pk)
    v2 = skill.versions.get(number=2)
    client.post(review_url(policy), {"action": "rollback", "version": v2.pk})
    policy.refresh_from_db()
    assert policy.status == PolicyStatus.PENDING_REVIEW


def test_delete_asks_for_confirmation_and_goes_through_the_service(
    approver: User, policy: Policy
) -> None:
    # given a skill with a policy
    client = logged_in(approver)
    delete_url = reverse("admin:skills_skill_delete", args=[policy.skill_id])

    # when the delete page is opened, it asks first (and is not blocked by read-only children)
    confirm = client.get(delete_url)
    assert confirm.status_code == 200
    assert "Are you sure you want to delete the skill" in confirm.content.decode()
    assert Skill.objects.filter(pk=policy.skill_id).exists()

    # and when the user confirms
    client.post(delete_url, {"post": "yes"})

    # then the skill, its versions and policies are gone and the audit trail says who did it
    assert not Skill.objects.filter(name="weather-report").exists()
    assert not Policy.objects.exists()
    event = PolicyAuditEvent.objects.get(action=AuditAction.SKILL_DELETED)
    assert (event.skill_name, event.actor_id, event.reason) == (
        "weather-report",
        approver.pk,
        "deleted in the admin",
    )


def test_status_versions_files_and_audit_rows_cannot_be_edited_in_the_admin(
    policy: Policy,
) -> None:
    # given a superuser (every model permission)
    root = make_user("root", superuser=True)
    client = logged_in(root)
    event = PolicyAuditEvent.objects.filter(policy=policy).first()
    version = policy.skill.current_version

    # when the add/change/delete pages of the history models are requested or posted to
    responses = {
        "audit add": client.get(reverse("admin:skills_policyauditevent_add")),
        "audit change": client.post(
            reverse("admin:skills_policyauditevent_change", args=[event.pk]), {"reason": "x"}
        ),
        "audit delete": client.post(
            reverse("admin:skills_policyauditevent_delete", args=[event.pk]), {"post": "yes"}
        ),
        "version add": client.get(reverse("admin:skills_skillversion_add")),
        "version change": client.post(
            reverse("admin:skills_skillversion_change", args=[version.pk]), {"number": "9"}
        ),
        "version delete": client.post(
            reverse("admin:skills_skillversion_delete", args=[version.pk]), {"post": "yes"}
        ),
        "policy add": client.get(reverse("admin:skills_policy_add")),
        "policy delete": client.post(
            reverse("admin:skills_policy_delete", args=[policy.pk]), {"post": "yes"}
        ),
        "skill add": client.get(reverse("admin:skills_skill_add")),
    }

    # then every one is forbidden, and nothing changed
    assert {name: r.status_code for name, r in responses.items()} == {
        name: 403 for name in responses
    }
    assert PolicyAuditEvent.objects.get(pk=event.pk).reason == event.reason
    assert Policy.objects.filter(pk=policy.pk).exists()
    # the policy's change page is the review page, whose form has no status field
    change = client.get(reverse("admin:skills_policy_change", args=[policy.pk]))
    assert (change.status_code, change["Location"]) == (302, review_url(policy))
    page = client.get(review_url(policy)).content.decode()
    assert 'name="status"' not in page
    assert 'name="approved_by"' not in page
    assert 'name="approved_content_hash"' not in page
    # and Django's bulk delete (which would bypass the service) is not offered
    changelist = client.get(reverse("admin:skills_skill_changelist")).content.decode()
    assert 'value="delete_selected"' not in changelist
    assert 'value="delete_skills"' in changelist


def test_skill_markdown_is_rendered_with_its_raw_html_escaped(
    approver: User, policy: Policy
) -> None:
    # when the review page renders SKILL.md
    html = logged_in(approver).get(review_url(policy)).content.decode()

    # then the markdown is rendered, and the file's <script> is text, not markup
    assert "<h4>Weather report</h4>" in html  # under the page title, section and file
    assert "&lt;script&gt;alert(&#x27;raw html in a skill&#x27;)&lt;/script&gt;" in html
    assert "<script>alert('raw html in a skill')" not in html


def test_policy_list_shows_badges_and_filters_by_status(
    approver: User, policy: Policy, tmp_path: Path
) -> None:
    # given one reviewed and one pending policy
    other = import_skill(tmp_path / "b", agent=make_agent("ranger"), name="weather-report")
    client = logged_in(approver)
    client.get(review_url(policy))
    other.refresh_from_db()

    # when the list is filtered by status
    url = reverse("admin:skills_policy_changelist")
    everything = client.get(url).content.decode()
    reviewed_only = client.get(url, {"status__exact": "reviewed"}).content.decode()

    # then badges show each status, and the filter keeps only the reviewed one
    assert '<span class="mc-badge mc-badge--reviewed">Reviewed</span>' in everything
    assert '<span class="mc-badge mc-badge--pending_review">Pending review</span>' in everything
    assert reviewed_only.count('class="mc-badge mc-badge--') == 1
    assert "mc-badge--reviewed" in reviewed_only


def test_raw_file_download_is_an_attachment(approver: User, policy: Policy) -> None:
    # given a file of the current version
    file = selectors.version_files(version=policy.skill.current_version).get(path="SKILL.md")

    # when it is downloaded from the console
    response = logged_in(approver).get(
        reverse("admin:skills_policy_raw_file", args=[policy.pk, file.pk])
    )

    # then it comes as an attachment the browser will not render
    assert response.status_code == 200
    assert response["Content-Type"] == "application/octet-stream"
    assert response["Content-Disposition"] == 'attachment; filename="SKILL.md"'
    assert response.content == bytes(file.data)


def test_skill_and_version_pages_are_read_only_views(approver: User, policy: Policy) -> None:
    # given an imported skill
    client = logged_in(approver)
    skill = policy.skill
    version = skill.current_version

    # when its page, the skill list and its version's page are opened
    skill_page = client.get(reverse("admin:skills_skill_change", args=[skill.pk]))
    skill_list = client.get(reverse("admin:skills_skill_changelist"), {"q": "weather"})
    version_page = client.get(reverse("admin:skills_skillversion_change", args=[version.pk]))

    # then they show the facts without an editable field or a save button
    for response in (skill_page, skill_list, version_page):
        assert response.status_code == 200
    skill_html = skill_page.content.decode()
    assert review_url(policy) in skill_html
    assert '<span class="mc-badge mc-badge--pending_review">Pending review</span>' in skill_html
    assert 'name="_save"' not in skill_html
    assert "scout" in skill_list.content.decode()
    version_html = version_page.content.decode()
    assert "scripts/forecast.py" in version_html
    assert version.content_hash in version_html
    assert 'name="_save"' not in version_html


def test_run_review_button_reviews_a_policy_that_needs_reapproval(
    approver: User, policy: Policy
) -> None:
    # given a policy in needs_reapproval (a second agent onboarding an approved skill)
    approve_with_services(policy, approver)
    second = make_agent("ranger")
    skill_load_for_execution(name="weather-report", agent=second)
    other = Policy.objects.get(skill=policy.skill, agent=second)
    client = logged_in(approver)
    assert 'id="btn-review"' in client.get(review_url(other)).content.decode()

    # when "Run review" is pressed
    response = client.post(review_url(other), {"action": "review"}, follow=True)

    # then the facts are stored for the current content and the status is reviewed
    assert "Review facts computed for the current version." in response.content.decode()
    other.refresh_from_db()
    assert other.status == PolicyStatus.REVIEWED
    assert other.reviewed_hash == policy.skill.current_version.content_hash
    assert other.review_facts["referenced_domains"] == [
        "api.open-meteo.com",
        "get.weather-tools.dev",
    ]


def test_editing_an_approved_policy_keeps_it_approved(approver: User, policy: Policy) -> None:
    # given an approved policy
    approve_with_services(policy, approver)
    client = logged_in(approver)

    # when its domains and tools are edited in the console
    response = client.post(
        review_url(policy),
        {
            "action": "save",
            "allowed_domains": "api.open-meteo.com, *.open-meteo.com",
            "tools": ["bash", "fetch"],
            "dependencies": "requests==2.32.3",
        },
        follow=True,
    )

    # then the edit is saved and audited, and the approval stands
    assert "Policy saved; the status is unchanged." in response.content.decode()
    policy.refresh_from_db()
    assert policy.status == PolicyStatus.APPROVED
    assert policy.allowed_domains == ["api.open-meteo.com", "*.open-meteo.com"]
    assert policy.tools == ["bash", "fetch"]
    assert policy.dependencies == ["requests==2.32.3"]
    event = PolicyAuditEvent.objects.get(policy=policy, action=AuditAction.POLICY_UPDATED)
    assert (event.from_status, event.to_status, event.actor_id) == (
        PolicyStatus.APPROVED,
        PolicyStatus.APPROVED,
        approver.pk,
    )


def test_a_file_with_a_non_ascii_name_downloads_with_an_encoded_filename(
    approver: User, tmp_path: Path
) -> None:
    # given a skill with a non-ASCII file name
    files = {**WEATHER_SKILL, "references/größen.md": "# Größen\n"}
    policy = import_skill(tmp_path, agent=make_agent("scout"), files=files)
    file = selectors.version_files(version=policy.skill.current_version).get(
        path="references/größen.md"
    )

    # when it is downloaded
    response = logged_in(approver).get(
        reverse("admin:skills_policy_raw_file", args=[policy.pk, file.pk])
    )

    # then the header carries the name RFC 5987-encoded and the bytes are intact
    assert response.status_code == 200
    assert response["Content-Disposition"] == (
        "attachment; filename*=utf-8''references_gr%C3%B6%C3%9Fen.md"
    )
    assert response.content == "# Größen\n".encode()


def test_a_refused_save_does_not_echo_a_typed_credential_value(
    approver: User, policy: Policy
) -> None:
    # given a policy declaring WEATHER_TOKEN
    client = logged_in(approver)
    client.get(review_url(policy))
    client.post(review_url(policy), {"action": "save", "required_credentials": "WEATHER_TOKEN"})

    # when a value is typed but the save is refused because of another field
    response = client.post(
        review_url(policy),
        {
            "action": "save",
            "allowed_domains": "not a host!",
            "required_credentials": "WEATHER_TOKEN",
            "credential_value__WEATHER_TOKEN": SECRET,
        },
    )

    # then the re-rendered form keeps the other input but never the secret, and nothing is stored
    html = response.content.decode()
    assert "The policy was not saved:" in html
    assert "not a host!" in html
    assert SECRET not in html
    policy.refresh_from_db()
    assert selectors.policy_credential_values(policy=policy) == {}


def test_the_review_page_lists_agent_skills_spec_findings(approver: User, tmp_path: Path) -> None:
    # given a skill whose frontmatter carries a field the Agent Skills spec does not define
    agent = make_agent("speccer")
    policy = import_skill(
        tmp_path,
        agent=agent,
        name="spec-check",
        files={
            "SKILL.md": "---\nname: spec-check\ndescription: Checks specs.\nversion: 2\n---\nBody\n"
        },
    )
    # when an approver opens its review page
    html = logged_in(approver).get(review_url(policy)).content.decode()
    # then the stored strict report is shown, naming the field's rule and file
    policy.refresh_from_db()
    findings = policy.review_facts["spec_findings"]
    assert [(f["path"], f["rule"], f["message"]) for f in findings] == [
        (
            "SKILL.md",
            "spec-unknown-field",
            "field 'version' is not part of the Agent Skills specification (kept as is)",
        )
    ]
    assert 'id="spec-findings"' in html and 'id="spec-none"' not in html
    assert "spec-unknown-field" in html and escape(findings[0]["message"]) in html


def test_an_audit_row_shows_its_changes_indented_and_the_policy_by_names(
    approver: User, policy: Policy
) -> None:
    # given a policy edit recorded in the audit trail
    from skills.policy_edits import policy_update

    policy_update(
        policy=policy.pk, actor=Actor.from_user(approver), allowed_domains=["api.open-meteo.com"]
    )
    event = PolicyAuditEvent.objects.get(policy=policy, action=AuditAction.POLICY_UPDATED)
    client = logged_in(make_user("audrey", perms=["skills.view_policyauditevent"]))

    # when the audit row is opened
    page = client.get(
        reverse("admin:skills_policyauditevent_change", args=[event.pk])
    ).content.decode()

    # then its changes are indented JSON and the policy is named by skill and agent
    assert (
        '<pre class="mc-json">{\n  &quot;allowed_domains&quot;: {\n    &quot;from&quot;: [],'
        in page
    )
    assert "weather-report for scout (pending_review)" in page


def _install_version(root: Path, agent, *, extracted_from: dict) -> Policy:
    """weather-report installed as a run's extraction does: no source, `extracted_from` set."""
    from skills import bundle as bundle_lib
    from skills.install import skill_install_bundle

    skill_dir = root / "weather-report"
    for rel, text in WEATHER_SKILL.items():
        (skill_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (skill_dir / rel).write_text(text)
    bundle = bundle_lib.bundle_from_directory(skill_dir, limits=bundle_lib.BundleLimits())
    result = skill_install_bundle(
        bundle=bundle, actor=Actor.system("run"), agent=agent, extracted_from=extracted_from
    )
    assert result.policy is not None
    return result.policy


def test_a_skill_a_run_wrote_names_the_run_as_its_origin_not_an_unknown_source(
    approver: User, tmp_path: Path
) -> None:
    # given a version that a run wrote (no source of its own, extracted from the run)
    policy = _install_version(
        tmp_path, make_agent("scout"), extracted_from={"run_id": "run_0123456789ab"}
    )

    # when an approver opens its review page
    response = logged_in(approver).get(review_url(policy))

    # then the provenance names the run and does not call the source unknown
    html = response.content.decode()
    assert response.status_code == 200
    assert "Extracted from run <code>run_0123456789ab</code>" in html
    assert "unknown source" not in html


def test_a_skill_without_any_origin_says_its_source_is_unknown(
    approver: User, tmp_path: Path
) -> None:
    # given a version with neither a recorded source nor a run that wrote it
    policy = _install_version(tmp_path, make_agent("scout"), extracted_from={})

    # when an approver opens its review page, then it says the source is unknown
    html = logged_in(approver).get(review_url(policy)).content.decode()
    assert "unknown source" in html
    assert "Extracted from run" not in html


def test_a_shell_allowlist_naming_a_program_the_sandbox_lacks_is_refused_by_the_console(
    approver: User, policy: Policy
) -> None:
    # given a reviewed policy, as its page shows it
    client = logged_in(approver)
    client.get(review_url(policy))
    before = Policy.objects.filter(pk=policy.pk).values().get()

    # when the approver saves an allowlist naming a program the sandbox does not have
    response = client.post(
        review_url(policy),
        {
            "action": "save",
            "allowed_domains": "api.open-meteo.com",
            "required_credentials": "",
            "tools": ["bash"],
            "dependencies": "",
            "shell_allowlist": "jq\nno-such-program-here",
        },
    )

    # then the page says which program and why, and the policy is as it was
    assert response.status_code == 200
    page = response.content.decode()
    assert escape("'no-such-program-here' does not exist in the sandbox") in page
    assert Policy.objects.filter(pk=policy.pk).values().get() == before


def test_the_review_page_has_one_h1_naming_the_skill_and_agent(
    approver: User, policy: Policy
) -> None:
    # the skill's SKILL.md starts with "# Weather report": rendered, it must not be a second h1
    html = logged_in(approver).get(review_url(policy)).content.decode()
    headings = re.findall(r"<h1[ >].*?</h1>", html, flags=re.S)
    assert len(headings) == 1, headings
    assert headings[0].startswith('<h1 id="review-title">Review: weather-report')
