"""Importing skills from the console: pasted SKILL.md or an uploaded archive, via services."""

from __future__ import annotations

import io
import zipfile

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from skills.models import Policy, PolicyAuditEvent, PolicyStatus, Skill
from tests.skills.admin_support import (
    APPROVER_PERMS,
    WEATHER_SKILL,
    fast_password_hashing,  # noqa: F401 - autouse fixture
    make_agent,
    make_user,
)

pytestmark = pytest.mark.django_db

IMPORT_URL = "admin:skills_skill_import"


@pytest.fixture
def importer() -> User:
    return make_user("ida", perms=[*APPROVER_PERMS, "skills.add_skill"])


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_pasted_skill_md_lands_pending_for_the_agent_and_opens_its_review(importer: User) -> None:
    # given an agent and the import page
    agent = make_agent("scout")
    client = logged_in(importer)
    listing = client.get(reverse("admin:skills_skill_changelist")).content.decode()
    assert 'id="import-skills"' in listing

    # when a SKILL.md is pasted for that agent
    response = client.post(
        reverse(IMPORT_URL), {"agent": agent.pk, "skill_md": WEATHER_SKILL["SKILL.md"]}
    )

    # then the skill is installed with a pending policy and the review page is next
    policy = Policy.objects.get(skill__name="weather-report", agent=agent)
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:skills_policy_review", args=[policy.pk])
    assert policy.status == PolicyStatus.PENDING_REVIEW
    assert policy.skill.current_version.provenance["source"] == "pasted in the admin"
    page = client.get(response["Location"]).content.decode()
    assert "Installed weather-report v1 (new version; pending review for scout)." in page


def test_an_invalid_skill_is_refused_with_the_rule_and_nothing_is_written(importer: User) -> None:
    # given a SKILL.md whose name breaks the naming rule
    text = WEATHER_SKILL["SKILL.md"].replace("name: weather-report", "name: Weather_Report")

    # when it is pasted
    response = logged_in(importer).post(
        reverse(IMPORT_URL), {"agent": make_agent("scout").pk, "skill_md": text}
    )

    # then the page says what is wrong and no row was written
    assert response.status_code == 200
    html = response.content.decode()
    assert "Nothing was imported:" in html
    assert "Weather_Report" in html
    assert Skill.objects.count() == 0
    assert Policy.objects.count() == 0
    assert PolicyAuditEvent.objects.count() == 0


def test_an_archive_of_two_skills_installs_both_without_a_policy(importer: User) -> None:
    # given a zip holding two skill directories
    second = WEATHER_SKILL["SKILL.md"].replace("name: weather-report", "name: weather-alerts")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, text in WEATHER_SKILL.items():
            archive.writestr(f"weather-report/{path}", text)
        archive.writestr("weather-alerts/SKILL.md", second)
    upload = SimpleUploadedFile("skills.zip", buffer.getvalue(), content_type="application/zip")

    # when it is uploaded with no agent chosen
    response = logged_in(importer).post(reverse(IMPORT_URL), {"archive": upload})

    # then both skills exist, no policy was created, and the skill list is next
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:skills_skill_changelist")
    assert sorted(Skill.objects.values_list("name", flat=True)) == [
        "weather-alerts",
        "weather-report",
    ]
    assert Policy.objects.count() == 0


def _good_and_bad_zip() -> SimpleUploadedFile:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, text in WEATHER_SKILL.items():
            archive.writestr(f"weather-report/{path}", text)
        archive.writestr("broken/SKILL.md", "no frontmatter\n")
    return SimpleUploadedFile("skills.zip", buffer.getvalue(), content_type="application/zip")


def test_an_archive_installs_its_valid_skills_and_names_the_refused(importer: User) -> None:
    # when an archive with one valid and one invalid skill is uploaded
    client = logged_in(importer)
    response = client.post(reverse(IMPORT_URL), {"archive": _good_and_bad_zip()})

    # then the valid one is installed and the list says what was refused, with file and rule
    assert response.status_code == 302
    assert list(Skill.objects.values_list("name", flat=True)) == ["weather-report"]
    page = client.get(response["Location"]).content.decode()
    assert "Refused broken: broken/SKILL.md:" in page
    assert "[frontmatter-missing]" in page


def test_all_or_nothing_imports_nothing_from_an_archive_with_a_refused_skill(
    importer: User,
) -> None:
    response = logged_in(importer).post(
        reverse(IMPORT_URL), {"archive": _good_and_bad_zip(), "all_or_nothing": "on"}
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert "Nothing was imported:" in html
    assert "[frontmatter-missing]" in html
    assert Skill.objects.count() == 0
    assert PolicyAuditEvent.objects.count() == 0


def _weather_zip(filename: str, extra: str = "") -> SimpleUploadedFile:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, text in WEATHER_SKILL.items():
            archive.writestr(f"weather-report/{path}", text + extra)
    return SimpleUploadedFile(filename, buffer.getvalue(), content_type="application/zip")


def test_a_new_release_is_a_new_version_only_from_the_stated_source(importer: User) -> None:
    # given weather-report imported from release 1 of a registry
    client = logged_in(importer)
    source = "https://registry.example/weather"
    client.post(reverse(IMPORT_URL), {"archive": _weather_zip("r1.zip"), "source": source})

    # when release 2 comes without a source, it is refused naming both sources
    refused = client.post(reverse(IMPORT_URL), {"archive": _weather_zip("r2.zip", "\n# r2\n")})
    html = refused.content.decode()
    assert "Nothing was imported:" in html
    assert "[skill-source-conflict]" in html
    assert source in html and "r2.zip" in html
    assert Skill.objects.get().current_version.number == 1

    # and with the source stated it is the next version
    client.post(
        reverse(IMPORT_URL), {"archive": _weather_zip("r2.zip", "\n# r2\n"), "source": source}
    )
    assert Skill.objects.get().current_version.number == 2


def test_both_or_neither_input_is_a_form_error(importer: User) -> None:
    client = logged_in(importer)
    upload = SimpleUploadedFile("x.zip", b"PK\x05\x06" + b"\x00" * 18)

    neither = client.post(reverse(IMPORT_URL), {"skill_md": "  "})
    both = client.post(reverse(IMPORT_URL), {"skill_md": "---", "archive": upload})

    for response in (neither, both):
        assert response.status_code == 200
        assert (
            "Give either a pasted SKILL.md or an archive (one of them)."
            in response.content.decode()
        )
    assert Skill.objects.count() == 0


def test_import_needs_the_add_permission() -> None:
    # given a staff user who may approve but not add skills
    client = logged_in(make_user("ann", perms=APPROVER_PERMS))

    # when the import page is requested or posted to
    listing = client.get(reverse("admin:skills_skill_changelist")).content.decode()
    page = client.get(reverse(IMPORT_URL))
    post = client.post(reverse(IMPORT_URL), {"skill_md": WEATHER_SKILL["SKILL.md"]})

    # then it is not offered and refused, and nothing is installed
    assert 'id="import-skills"' not in listing
    assert (page.status_code, post.status_code) == (403, 403)
    assert Skill.objects.count() == 0
