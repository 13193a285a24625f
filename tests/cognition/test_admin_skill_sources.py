"""Skill sources are configured in the admin; acquisitions are a read-only record there."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from cognition.sources.models import SkillAcquisition, SkillSource
from tests.skills.admin_support import make_user

from .conftest import World

pytestmark = pytest.mark.django_db


def _form(**fields: object) -> dict[str, object]:
    return {"kind": "http", "reviewed": "on", "enabled": "on", "position": 10, **fields}


def test_staff_add_a_registry_and_a_bad_location_is_refused_naming_the_rule(world: World) -> None:
    client = Client()
    client.force_login(make_user("root", superuser=True))
    added = client.post(
        reverse("admin:cognition_skillsource_add"),
        _form(name="clawhub", location="https://clawhub.ai"),
    )
    assert added.status_code == 302
    source = SkillSource.objects.get()
    assert (source.kind, source.location, source.reviewed, source.position) == (
        "http",
        "https://clawhub.ai",
        True,
        10,
    )
    for kind, location, message in [
        ("http", "ftp://clawhub.ai", b"An HTTP source needs the registry&#x27;s base URL"),
        ("http", "https://user:pw@clawhub.ai", b"without a query, a fragment or credentials"),
        ("directory", "skills/registry", b"A directory source needs an absolute path."),
    ]:
        refused = client.post(
            reverse("admin:cognition_skillsource_add"),
            _form(name="other", kind=kind, location=location),
        )
        assert refused.status_code == 200
        assert message in refused.content
    assert SkillSource.objects.count() == 1


def test_acquisitions_are_listed_but_never_edited(world: World) -> None:
    acquisition = SkillAcquisition.objects.create(
        agent=world.alpha, query="convert pdf", candidates=[{"name": "pdf-to-text"}]
    )
    client = Client()
    client.force_login(make_user("root", superuser=True))
    listing = client.get(reverse("admin:cognition_skillacquisition_changelist"))
    assert listing.status_code == 200 and b"convert pdf" in listing.content
    page = client.get(reverse("admin:cognition_skillacquisition_change", args=[acquisition.pk]))
    assert page.status_code == 200 and b"pdf-to-text" in page.content
    assert client.get(reverse("admin:cognition_skillacquisition_add")).status_code == 403
    posted = client.post(
        reverse("admin:cognition_skillacquisition_change", args=[acquisition.pk]),
        {"query": "changed"},
    )
    assert posted.status_code == 403
    acquisition.refresh_from_db()
    assert acquisition.query == "convert pdf"
