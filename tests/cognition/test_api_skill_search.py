"""GET /api/v1/skills/search/?q= — ranked hits with scores for the agent's skills; bad queries are
400s naming the rule; the path still serves a skill named "search"."""

from __future__ import annotations

import pytest

from cognition.models import Agent
from cognition.services import agent_issue_token
from skills.models import Skill
from skills.policy_edits import policy_create
from skills.services import Actor

from .conftest import World, bearer, skill_md, state_snapshot

pytestmark = pytest.mark.django_db

SEARCH = "/api/v1/skills/search/"


def imported(client, name: str, description: str) -> None:
    text = skill_md(name).replace("Talks to the example API.", description)
    response = client.post("/api/v1/skills/", {"skill_md": text}, format="json")
    assert response.status_code == 201, response.content


@pytest.fixture
def skills(world: World) -> World:
    alpha = bearer(world.alpha_token)
    imported(alpha, "exchange-rates", "Fetch the latest currency exchange rates.")
    imported(alpha, "csv-summary", "Summarize a CSV file.")
    imported(bearer(world.bravo_token), "github-issues", "Triage GitHub issues.")
    return world


def test_an_agent_gets_its_skills_ranked_with_scores(skills: World) -> None:
    response = bearer(skills.alpha_token).get(SEARCH, {"q": "euro exchange rates please"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["agent"], body["query"], body["mode"], body["k"], body["truncated"]) == (
        "alpha",
        "euro exchange rates please",
        "lexical",
        10,
        False,
    )
    assert [h["name"] for h in body["hits"]] == ["exchange-rates"]
    hit = body["hits"][0]
    assert hit["score"] == hit["lexical_score"] > 0
    assert (hit["version"], hit["lexical_rank"], hit["dense_rank"], hit["dense_score"]) == (
        1,
        1,
        None,
        None,
    )
    assert (hit["status"], hit["disabled"]) == ("pending_review", False)
    assert body["dense_error"] == ""


def test_an_agent_never_sees_another_owners_skill(skills: World) -> None:
    body = bearer(skills.alpha_token).get(SEARCH, {"q": "github issues triage"}).json()
    assert body["hits"] == []
    body = bearer(skills.bravo_token).get(SEARCH, {"q": "github issues triage"}).json()
    assert [h["name"] for h in body["hits"]] == ["github-issues"]


def test_k_limits_the_hits_and_a_bad_k_is_a_400(skills: World) -> None:
    client = bearer(skills.alpha_token)
    body = client.get(SEARCH, {"q": "summarize exchange rates csv", "k": "1"}).json()
    assert len(body["hits"]) == 1
    for bad in ("0", "101", "x", "-1", "١"):
        response = client.get(SEARCH, {"q": "csv", "k": bad})
        assert response.status_code == 400, bad
        assert response.json()["error"]["details"] == {"rule": "k-range", "field": "k"}


@pytest.mark.parametrize("query", ["", "   ", "\t\n"])
def test_an_empty_query_is_a_400_naming_the_rule(skills: World, query: str) -> None:
    response = bearer(skills.alpha_token).get(SEARCH, {"q": query})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "skill_search_query_invalid"
    assert error["details"] == {"rule": "query-empty", "field": "q"}


def test_a_query_of_100000_characters_is_a_400_and_changes_nothing(skills: World) -> None:
    before = state_snapshot()
    response = bearer(skills.alpha_token).get(SEARCH, {"q": "csv " * 25_000})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "skill_search_query_invalid"
    assert error["details"] == {"rule": "query-too-long", "field": "q", "max_chars": 2000}
    assert "100000 characters" in error["message"]
    assert state_snapshot() == before


def test_a_query_at_the_limit_is_answered(skills: World) -> None:
    response = bearer(skills.alpha_token).get(SEARCH, {"q": "csv" + " " * 1997})
    assert response.status_code == 200
    assert [h["name"] for h in response.json()["hits"]] == ["csv-summary"]


def test_a_person_searches_for_the_agent_they_own(skills: World, personal_client) -> None:
    body = personal_client(skills.olivia).get(SEARCH, {"q": "csv", "agent": "alpha"}).json()
    assert [h["name"] for h in body["hits"]] == ["csv-summary"]
    response = personal_client(skills.olivia).get(SEARCH, {"q": "csv", "agent": "bravo"})
    assert response.status_code == 404


def test_a_shared_skill_is_listed_as_not_yet_yours(skills: World) -> None:
    sibling = Agent.objects.create(name="sibling", owner=skills.olivia)
    policy_create(skill="csv-summary", agent=sibling, actor=Actor.system("test"))
    token = agent_issue_token(agent=sibling, actor=skills.olivia).raw
    body = bearer(token).get(SEARCH, {"q": "exchange rates csv"}).json()
    assert {h["name"]: h["status"] for h in body["hits"]} == {
        "csv-summary": "needs_reapproval",
        "exchange-rates": "not_yet_yours",
    }


def test_without_q_the_path_is_the_skill_named_search(world: World) -> None:
    client = bearer(world.alpha_token)
    assert client.get(SEARCH).status_code == 404
    imported(client, "search", "Search the web.")
    response = client.get(SEARCH)
    assert response.status_code == 200
    assert response.json()["skill"] == "search"
    Agent.objects.filter(pk=world.alpha.pk).update(trusted_for_relayed_consent=True)
    assert client.delete(SEARCH, HTTP_X_MOTOR_TRIGGER="user_message").status_code == 204
    assert not Skill.objects.filter(name="search").exists()
