"""Progressive disclosure: one escaped line per candidate, the whole SKILL.md on demand, only
for skills the agent may see."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from cognition.models import Agent
from skills.bundle import bundle_from_files
from skills.errors import SkillNotFound
from skills.index.disclosure import (
    LINE_DESCRIPTION_CHARS,
    candidate_line,
    candidate_lines,
    skill_describe,
)
from skills.index.search import SkillHit, skill_search
from skills.install import skill_install_bundle
from skills.policy_edits import policy_create
from skills.services import Actor

pytestmark = pytest.mark.django_db
ACTOR = Actor.system("test")


def install(name: str, description: str, body: str = "# Steps\n", agent=None) -> str:
    text = f"---\nname: {name}\ndescription: {description}\n---\n{body}"
    bundle = bundle_from_files({"SKILL.md": text.encode()}, dir_name=name)
    skill_install_bundle(bundle=bundle, actor=ACTOR, agent=agent)
    return text


def test_a_candidate_line_is_escaped_and_its_description_cut() -> None:
    hit = SkillHit(
        name="a-b", description="Say <hi> &\n" + "x" * 300, version=1, score=0.5, status="approved"
    )
    line = candidate_line(hit)
    assert line.startswith(
        '<skill name="a-b" status="approved" score="0.5000">Say &lt;hi&gt; &amp; x'
    )
    inner = line.split(">", 1)[1].rsplit("</skill>", 1)[0]
    assert inner.endswith("…")
    assert len(inner.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")) == (
        LINE_DESCRIPTION_CHARS
    )
    assert 'disabled="true"' in candidate_line(
        SkillHit(name="a", description="d", version=1, score=1.0, disabled=True)
    )


def test_search_hits_become_lines_in_rank_order() -> None:
    install("csv-summary", "Summarize a CSV file.")
    install("csv-export", "Export a table as CSV.")
    lines = candidate_lines(skill_search(query="summarize csv", agent=None))
    assert [line.split('"')[1] for line in lines] == ["csv-summary", "csv-export"]


def test_describe_gives_the_whole_skill_md_to_those_who_may_see_it() -> None:
    users = get_user_model().objects
    olivia, bob = users.create_user("olivia"), users.create_user("bob")
    alpha = Agent.objects.create(name="alpha", owner=olivia)
    sibling = Agent.objects.create(name="sibling", owner=olivia)
    bravo = Agent.objects.create(name="bravo", owner=bob)
    text = install("csv-summary", "Summarize a CSV file.", body="# Steps\n\nRun it.\n", agent=alpha)

    described = skill_describe(name="csv-summary", agent=alpha)
    assert described == {
        "name": "csv-summary",
        "version": 1,
        "status": "pending_review",
        "description": "Summarize a CSV file.",
        "skill_md": text,
        "tools": [],
    }
    assert skill_describe(name="csv-summary", agent=sibling)["status"] == "not_yet_yours"
    assert skill_describe(name="csv-summary", agent=None)["status"] is None
    for agent, name in ((bravo, "csv-summary"), (alpha, "missing")):
        with pytest.raises(SkillNotFound) as caught:
            skill_describe(name=name, agent=agent)
        assert caught.value.details == {"skill": name}
    policy_create(skill="csv-summary", agent=bravo, actor=ACTOR)
    assert skill_describe(name="csv-summary", agent=bravo)["status"] == "needs_reapproval"
