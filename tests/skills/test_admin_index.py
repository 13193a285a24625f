"""The admin's skill search page: ranked hits with scores, as staff or as one agent; bad queries
are shown as errors on the page."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Permission

from cognition.models import Agent
from skills.bundle import bundle_from_files
from skills.install import skill_install_bundle
from skills.services import Actor

pytestmark = pytest.mark.django_db

URL = "/admin/skills/skillindexentry/"
ACTOR = Actor.system("test")


def install(name: str, description: str, agent=None) -> None:
    text = f"---\nname: {name}\ndescription: {description}\n---\n# Steps\n"
    bundle = bundle_from_files({"SKILL.md": text.encode()}, dir_name=name)
    skill_install_bundle(bundle=bundle, actor=ACTOR, agent=agent)


@pytest.fixture
def staff(client, django_user_model):
    user = django_user_model.objects.create_user("viewer", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_skill"))
    client.force_login(user)
    return user


def rows(html: str) -> list[list[str]]:
    body = html.split('id="skill-search-hits"', 1)[1].split("</tbody>", 1)[0]
    out = []
    for row in re.findall(r"<tr>(.*?)</tr>", body, re.DOTALL)[1:]:
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.DOTALL)
        out.append([re.sub(r"<[^>]+>", "", c).strip() for c in cells])
    return out


def test_staff_search_every_skill_and_see_the_ranked_scores(client, staff) -> None:
    install("csv-summary", "Summarize a CSV file.")
    install("exchange-rates", "Fetch currency exchange rates.")
    response = client.get(URL, {"q": "summarize csv"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "Mode lexical" in html
    [hit] = rows(html)
    assert hit[:3] == ["1", "csv-summary", "1"]
    assert float(hit[3]) > 0 and hit[4].endswith("(1)") and hit[5] == "–"


def test_searching_as_an_agent_shows_only_its_skills_and_their_status(
    client, staff, django_user_model
) -> None:
    owner = django_user_model.objects.create_user("owner")
    agent = Agent.objects.create(name="main", owner=owner)
    install("csv-summary", "Summarize a CSV file.", agent=agent)
    install("csv-export", "Export tables to CSV.")
    html = client.get(URL, {"q": "csv", "agent": str(agent.pk)}).content.decode()
    assert [(r[1], r[6]) for r in rows(html)] == [("csv-summary", "pending_review")]
    everyone = client.get(URL, {"q": "csv"}).content.decode()
    assert sorted(r[1] for r in rows(everyone)) == ["csv-export", "csv-summary"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"q": ""}, "The query is empty"),
        ({"q": "x" * 100_000}, "The query has 100000 characters; at most 2000"),
        ({"q": "csv", "agent": "nope"}, "No agent &#x27;nope&#x27;."),
    ],
)
def test_a_bad_query_is_an_error_on_the_page(client, staff, params, message) -> None:
    response = client.get(URL, params)
    assert response.status_code == 200
    html = response.content.decode()
    assert 'class="errornote"' in html and message in html
    assert 'id="skill-search-hits"' not in html


def test_staff_without_the_view_permission_are_refused(client, django_user_model) -> None:
    user = django_user_model.objects.create_user("plain", is_staff=True)
    client.force_login(user)
    assert client.get(URL, {"q": "csv"}).status_code == 403
