"""The review page shows, for each suspicious finding, why it matters and which rule found it."""

from __future__ import annotations

from html import escape
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from skills.bundle.malware_rules import RULES_BY_ID
from tests.skills.admin_support import (
    APPROVER_PERMS,
    fast_password_hashing,  # noqa: F401 - autouse fixture
    import_skill,
    make_agent,
    make_user,
)

pytestmark = pytest.mark.django_db


def test_each_finding_says_why_it_matters(tmp_path: Path) -> None:
    # given a pending skill whose SKILL.md pipes a download into a shell
    policy = import_skill(tmp_path, agent=make_agent("scout"))
    client = Client()
    client.force_login(make_user("ann", perms=APPROVER_PERMS))
    # when an approver opens the review page
    html = client.get(reverse("admin:skills_policy_review", args=[policy.pk])).content.decode()
    # then the finding names its rule and says why it matters
    rule = RULES_BY_ID["download-and-execute.pipe"]
    assert "[download-and-execute.pipe]" in html
    assert f"Why it matters: {escape(rule.why)}" in html
