"""The run console says which skills a completed run wrote and links each one's review: a run's
skill waits for a person, and the console is where that person is when the run ends."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from runs.models import MotorRun, RunStatus
from runs.services import run_start
from tests.runs.helpers import new_workspace
from tests.skills.admin_support import import_skill

pytestmark = pytest.mark.django_db


def _completed_run(agent, skills: dict) -> str:
    run_id = run_start(
        agent_id=agent.pk, task="Learn the weather API", actor="test", workspace=new_workspace()
    )["run_id"]
    MotorRun.objects.filter(pk=run_id).update(
        status=RunStatus.COMPLETED,
        result={"ok": True, "summary": "Wrote the skill.", "skills": skills},
    )
    return run_id


def _console(run_id: str) -> str:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="x"))
    response = client.get(reverse("admin:runs_motorrun_change", args=[quote(run_id)]))
    assert response.status_code == 200
    return response.content.decode()


def test_a_completed_run_links_the_review_of_each_skill_it_wrote(agent, tmp_path: Path) -> None:
    # given a run that created weather-report (its policy waits for review) and failed another
    policy = import_skill(tmp_path, agent=agent)
    run_id = _completed_run(
        agent,
        {
            "created": ["weather-report"],
            "updated": [],
            "unchanged": [],
            "failed": [{"name": "broken", "reason": "SKILL.md has no name"}],
        },
    )

    # when its console is opened
    page = _console(run_id)

    # then the result names the skill with a link to its review, and the one that failed
    review = reverse("admin:skills_policy_review", args=[policy.pk])
    assert f'<li>created <a href="{review}">weather-report</a> (pending review)</li>' in page
    assert "<li>not stored: broken (SKILL.md has no name)</li>" in page


def test_a_run_that_wrote_no_skill_shows_no_skill_list(agent) -> None:
    # given a completed run whose extraction found nothing
    run_id = _completed_run(agent, {"created": [], "updated": [], "unchanged": [], "failed": []})

    # then its console has no skills section
    assert 'id="result-skills"' not in _console(run_id)
