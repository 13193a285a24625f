"""The skill index: what a skill is indexed from, how installs, new versions, rollbacks and
deletions keep it current, who sees which skill, and the query rules (lexical path)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from cognition.models import Agent
from skills.bundle import bundle_from_files
from skills.index.documents import (
    ToolTerms,
    manifest_search_terms,
    mcp_tool_terms,
    search_terms,
)
from skills.index.models import SkillIndexEntry
from skills.index.search import SkillSearchQueryInvalid, skill_search
from skills.install import skill_delete, skill_install_bundle
from skills.models import Skill
from skills.policy_edits import policy_create
from skills.reviewing import policy_rollback
from skills.services import Actor

pytestmark = pytest.mark.django_db

ACTOR = Actor.system("test")


def install(name: str, description: str, body: str = "# Steps\n", agent=None, **files: str):
    text = f"---\nname: {name}\ndescription: {description}\n---\n{body}"
    content = {"SKILL.md": text.encode(), **{p: d.encode() for p, d in files.items()}}
    bundle = bundle_from_files(content, dir_name=name)
    return skill_install_bundle(bundle=bundle, actor=ACTOR, agent=agent)


def names(query: str, agent=None, **kw) -> list[str]:
    return [h.name for h in skill_search(query=query, agent=agent, **kw).hits]


@pytest.fixture
def library() -> None:
    install("exchange-rates", "Fetch the latest currency exchange rates from the ECB.")
    install("csv-summary", "Summarize a CSV file: columns, types, row counts.")
    install(
        "github-issues",
        "List and triage GitHub issues of a repository.",
        body="# Usage\n\n## Label stale tickets\n\n```\n# not a heading\n```\n",
    )
    install(
        "uptime-checker",
        "Check HTTP endpoints.\nmetadata:\n  keywords: [ping, health check]\n"
        "  example_queries: ['is my server responding?']",
        body="# Monitoring\n",
    )
    install(
        "pdf-tools",
        "Work with documents.",
        body="# Merge\n",
    )


def test_a_skill_is_found_by_its_description_name_headings_and_manifest_terms(library) -> None:
    assert names("what is the euro exchange rate today")[0] == "exchange-rates"
    assert names("summarize this csv file")[0] == "csv-summary"
    # a heading of SKILL.md (not the commented line inside the code fence)
    assert names("label stale tickets") == ["github-issues"]
    assert names("not a heading") == []
    # keywords and example queries of the front matter's metadata
    assert names("ping the health check") == ["uptime-checker"]
    assert names("is the server responding") == ["uptime-checker"]
    entry = SkillIndexEntry.objects.get(skill__name="uptime-checker")
    assert entry.fields["keywords"] == ["ping", "health check"]
    assert entry.fields["example_queries"] == ["is my server responding?"]
    assert entry.fields["headings"] == ["Monitoring"]
    assert entry.fields["tools"] == []


def test_the_manifest_hooks_read_skill_toml_search_terms_and_declared_tools() -> None:
    # the hooks are tested on the files mapping a stored version hands them
    manifest = (
        b'name = "uptime-checker"\n[search]\nkeywords = ["ping", "health check"]\n'
        b'example_queries = ["is my server responding?"]\n'
        b'[tools.check_uptime]\nsemantics = "read"\n[tools."bad name!"]\nsemantics = "read"\n'
    )
    files = {"SKILL.md": b"---\nname: uptime-checker\ndescription: d\n---\n# Run\n"}
    terms = search_terms(
        name="uptime-checker",
        description="Check HTTP endpoints.",
        frontmatter={"metadata": {"keywords": ["status"]}},
        files={**files, "skill.toml": manifest},
    )
    assert terms.keywords == ["status", "ping", "health check"]
    assert terms.example_queries == ["is my server responding?"]
    assert terms.headings == ["Run"]
    assert terms.tools == [ToolTerms(name="check_uptime")]
    assert "check uptime" in terms.document()
    assert manifest_search_terms({"skill.toml": b"not = [toml"}) == ([], [])
    assert manifest_search_terms({"skill.toml": b"\xff"}) == ([], [])
    assert manifest_search_terms({"skill.toml": b"search = 3"}) == ([], [])
    assert mcp_tool_terms({"skill.toml": b"tools = 3"}) == []
    assert mcp_tool_terms({}) == []


def test_front_matter_metadata_keywords_and_example_queries_are_indexed(db) -> None:
    text = (
        "---\nname: invoice-maker\ndescription: Builds documents.\nmetadata:\n"
        "  keywords: billing, receivable\n  example_queries:\n    - bill my client for march\n"
        "---\n# Steps\n"
    )
    bundle = bundle_from_files({"SKILL.md": text.encode()}, dir_name="invoice-maker")
    skill_install_bundle(bundle=bundle, actor=ACTOR)
    assert names("receivable") == ["invoice-maker"]
    assert names("bill a client") == ["invoice-maker"]


def test_hits_are_ranked_with_their_bm25_scores_and_versions(library) -> None:
    result = skill_search(query="github issues", agent=None)
    assert result.mode == "lexical"
    assert result.truncated is False
    top = result.hits[0]
    assert (top.name, top.version, top.lexical_rank, top.dense_rank) == (
        "github-issues",
        1,
        1,
        None,
    )
    assert top.score == top.lexical_score > 0
    assert [h.score for h in result.hits] == sorted((h.score for h in result.hits), reverse=True)
    assert names("github issues", k=1) == ["github-issues"]


def test_a_query_matching_nothing_has_no_hits_and_stop_words_alone_match_nothing(library) -> None:
    assert names("zebra xylophone") == []
    assert names("what is it please") == []


def test_a_new_version_replaces_the_indexed_text_and_a_rollback_restores_it(library, owner) -> None:
    agent = Agent.objects.create(name="main", owner=owner)
    policy = policy_create(skill="pdf-tools", agent=agent, actor=ACTOR)
    first = Skill.objects.get(name="pdf-tools").current_version
    install("pdf-tools", "Work with documents.", body="# Split pages\n")
    assert names("merge") == []
    hit = skill_search(query="split pages", agent=None).hits[0]
    assert (hit.name, hit.version) == ("pdf-tools", 2)

    policy_rollback(policy=policy, version=first, actor=ACTOR)
    assert names("merge") == ["pdf-tools"]
    assert names("split pages") == []
    assert SkillIndexEntry.objects.get(skill__name="pdf-tools").version_id == first.pk


def test_a_deleted_skill_leaves_the_index(library) -> None:
    assert names("summarize csv") == ["csv-summary"]
    skill_delete(skill="csv-summary", actor=ACTOR)
    assert names("summarize csv") == []
    assert not SkillIndexEntry.objects.filter(name="csv-summary").exists()


def test_an_agent_sees_its_own_skills_and_its_owners_others_but_no_one_elses(library) -> None:
    users = get_user_model().objects
    olivia, bob = users.create_user("olivia"), users.create_user("bob")
    alpha = Agent.objects.create(name="alpha", owner=olivia)
    sibling = Agent.objects.create(name="sibling", owner=olivia)
    bravo = Agent.objects.create(name="bravo", owner=bob)
    policy_create(skill="exchange-rates", agent=alpha, actor=ACTOR)
    policy_create(skill="csv-summary", agent=sibling, actor=ACTOR)
    policy_create(skill="github-issues", agent=bravo, actor=ACTOR)

    query = "exchange rates csv summary github issues"
    seen = {h.name: h.status for h in skill_search(query=query, agent=alpha).hits}
    assert seen == {"exchange-rates": "needs_reapproval", "csv-summary": "not_yet_yours"}
    own_only = skill_search(query=query, agent=alpha, include_shared=False).hits
    assert [h.name for h in own_only] == ["exchange-rates"]
    assert [h.name for h in skill_search(query=query, agent=bravo).hits] == ["github-issues"]
    # a policy granted later is seen at once (the visibility generation moved)
    policy_create(skill="github-issues", agent=alpha, actor=ACTOR)
    assert "github-issues" in names(query, agent=alpha)
    # staff (no agent) see every skill, without a status
    staff = skill_search(query=query, agent=None).hits
    assert {h.name for h in staff} == {"exchange-rates", "csv-summary", "github-issues"}
    assert {h.status for h in staff} == {None}


@pytest.mark.parametrize("query", ["", "   ", "\x00\n\t"])
def test_an_empty_query_is_refused_naming_the_rule(library, query) -> None:
    with pytest.raises(SkillSearchQueryInvalid) as caught:
        skill_search(query=query, agent=None)
    assert caught.value.details == {"rule": "query-empty", "field": "q"}
    assert caught.value.http_status == 400


def test_a_huge_query_is_truncated_by_default_and_refused_under_the_refuse_rule(
    library, settings
) -> None:
    huge = "summarize csv " + "x" * 100_000
    result = skill_search(query=huge, agent=None)
    assert result.truncated is True
    assert len(result.query) == settings.MOTOR_SKILL_SEARCH_QUERY_MAX_CHARS
    assert result.hits[0].name == "csv-summary"
    with pytest.raises(SkillSearchQueryInvalid) as caught:
        skill_search(query=huge, agent=None, over_limit="refuse")
    assert caught.value.details["rule"] == "query-too-long"
    assert caught.value.details["max_chars"] == settings.MOTOR_SKILL_SEARCH_QUERY_MAX_CHARS


@pytest.mark.parametrize("k", [0, 101])
def test_k_outside_one_to_a_hundred_is_refused(library, k) -> None:
    with pytest.raises(SkillSearchQueryInvalid) as caught:
        skill_search(query="csv", agent=None, k=k)
    assert caught.value.details["rule"] == "k-range"


def test_top_k_defaults_to_the_setting(db, settings) -> None:
    for i in range(5):
        install(f"report-{'abcde'[i]}", "Write a weekly report.")
    settings.MOTOR_SKILL_SEARCH_TOP_K = 3
    assert len(skill_search(query="weekly report", agent=None).hits) == 3
    assert len(skill_search(query="weekly report", agent=None, k=4).hits) == 4
